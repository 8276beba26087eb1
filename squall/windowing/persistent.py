"""``PersistentWindowedBoltExecutor``: a windowed bolt whose windows live in its task's ``KeyValueState``, as
Storm's executor of the same name keeps them in the state backend (``WindowedBolt.with_persistence()``).

The executor is a ``StatefulBolt``: every tuple that enters a window is written to the state (in partitions of
``PARTITION`` tuples, so a wave saves only the partitions it changed) and acked at once; squall holds a
stateful task's acks until the checkpoint that holds its state is complete, so a tuple is acked only once the
window state covering it is durable. The window manager's own state (its policies', the watermark's, the
previous window's end, the tuples expired since the last firing) is saved with it. A task rebuilt after a lost
worker or a restarted driver starts from that state, and the waves after it run again: its windows go on where
they were, and a window that fired after the checkpoint fires again (deduplicate by ``end_timestamp``).

As in Storm, what ``execute(window)`` emits is not anchored (the window's tuples are already acked), and the
bolt's own state, if it defines ``init_state(state)``, is a ``KeyValueState`` of its own, saved with the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from squall.model.components import StatefulBolt
from squall.model.config import (
    TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS,
    TOPOLOGY_MESSAGE_TIMEOUT_SECS,
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS,
)
from squall.model.errors import InvalidTopologyError
from squall.model.tuple import Tuple
from squall.windowing.executor import WindowedBoltExecutor
from squall.windowing.manager import Event

PARTITION = 1024  # tuples per saved partition of a window

SYSTEM_KEY = ("window", "system")


def _part_key(seq: int) -> tuple[str, str, int]:
    return ("window", "part", seq // PARTITION)


class _UserState:
    """The bolt's own keys in the task's state, apart from the window's."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def put(self, key: Any, value: Any) -> None:
        self._state.put(("user", key), value)

    def get(self, key: Any, default: Any = None) -> Any:
        return self._state.get(("user", key), default)

    def delete(self, key: Any) -> None:
        self._state.delete(("user", key))

    def __contains__(self, key: object) -> bool:
        return ("user", key) in self._state

    def __iter__(self) -> Iterator[Any]:
        return (key[1] for key in list(self._state) if key[0] == "user")

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items(self):
        return [(key, self.get(key)) for key in self]


class PersistentWindowedBoltExecutor(WindowedBoltExecutor, StatefulBolt):
    def prepare(self, conf: dict, context: Any, collector: Any) -> None:
        self._topology_context = context
        self._records: dict[int, tuple] = {}  # id(tuple) -> its saved record, while in a window or just expired
        self._expired_records: list[tuple] = []  # records of the tuples expired since the last firing
        self._state = None
        super().prepare(conf, context, collector)
        self._windowed.anchored = False  # the window's tuples are acked already

    def _trigger_policy(self):
        trigger = super()._trigger_policy()
        trigger.handler = self  # each firing passes through ``on_trigger`` below
        return trigger

    def init_state(self, state: Any) -> None:
        self._state = state
        system = state.get(SYSTEM_KEY)
        if system is not None:
            self._restore(state, system)
        own = getattr(self.bolt, "init_state", None)
        if callable(own):
            own(_UserState(state))

    def _restore(self, state: Any, system: dict[str, Any]) -> None:
        fields_of = self._topology_context.get_component_output_fields
        events = []
        for key in list(state):
            if key[:2] == ("window", "part"):
                for record in state.get(key).values():
                    events.append(self._event_of(record, fields_of))
        if self._message_ids is not None:
            self._message_ids = {e.value[self.bolt.message_id_field]: None for e in events}
        expired = [self._event_of(record, fields_of).value for record in system["expired"]]
        self._expired_records = list(system["expired"])
        self._manager.restore(events, expired, system["manager"])
        if self._generator is not None and system.get("watermarks") is not None:
            self._generator.latest, self._generator.last_watermark = system["watermarks"]

    def _event_of(self, record: tuple, fields_of: Any) -> Event:
        seq, ts, values, component, stream, task = record
        tup = Tuple(values, fields_of(component, stream), component, task, stream)
        self._records[id(tup)] = record
        event = Event(tup, ts)
        event.seq = seq
        return event

    # -- arrivals, expiries, firings, each written through to the state ------------------------------------
    def _add(self, tup: Any, ts: int) -> None:
        event = Event(tup, ts)
        self._manager.add_event(event)
        if event.seq:  # stored (a watermark is not)
            record = (event.seq, ts, tuple(tup.values), tup.source_component, tup.source_stream, tup.source_task)
            self._records[id(tup)] = record
            key = _part_key(event.seq)
            part = self._state.get(key)
            if part is None:
                part = {}
            part[event.seq] = record
            self._state.put(key, part)
        self._save_system()
        self._collector.ack(tup)  # held by the runtime until the checkpoint that holds the window is complete

    def on_expiry(self, tuples: list) -> None:
        for tup in tuples:
            self._forget(tup)
            record = self._records.pop(id(tup), None)
            if record is None:
                continue
            self._expired_records.append(record)
            key = _part_key(record[0])
            part = self._state.get(key)
            if part is not None:
                part.pop(record[0], None)
                if part:
                    self._state.put(key, part)
                else:
                    self._state.delete(key)

    def on_trigger(self) -> bool:
        fired = self._manager.on_trigger()
        self._expired_records = []
        self._save_system()
        return fired

    def on_activation(self, tuples, new, expired, reference_time) -> None:
        try:
            self.bolt.execute(self.window(tuples, new, expired, reference_time))
        except Exception as exc:  # the window's tuples are durably in it: the error is counted, nothing fails
            self._collector.report_error(exc)

    def _timer(self) -> None:
        super()._timer()
        self._save_system()

    def validate(self, component_id: str, conf: Any) -> None:
        """Storm's checks for a persistent window: its tuples are acked at checkpoints, not at expiry, so the
        window may outlast the message timeout, but the checkpoint interval may not."""
        self.check_declaration(component_id)
        interval_ms = conf.get(TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS, 1000)
        timeout_ms = int(conf.get(TOPOLOGY_MESSAGE_TIMEOUT_SECS, 30) * 1000)
        if conf.get(TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, True) and interval_ms > timeout_ms:
            raise InvalidTopologyError(
                f"persistent windowed bolt {component_id!r}: {TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS} {interval_ms} "
                f"is more than {TOPOLOGY_MESSAGE_TIMEOUT_SECS} ({timeout_ms} ms): its tuples would time out first"
            )

    def _save_system(self) -> None:
        generator = self._generator
        self._state.put(
            SYSTEM_KEY,
            {
                "manager": self._manager.system_state(),
                "expired": list(self._expired_records),
                "watermarks": None if generator is None else (dict(generator.latest), generator.last_watermark),
            },
        )
