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

import logging
import secrets
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
from squall.windowing.manager import Event, WindowEvents

log = logging.getLogger("squall.windowing")

PARTITION = 1024  # tuples per saved partition of a window

SYSTEM_KEY = ("window", "system")


def _part_key(number: int) -> tuple[str, str, int]:
    return ("window", "part", number)


def _sealed_key(number: int) -> tuple[str, str, int]:
    return ("window", "sealed", number)


class _Held(Event):
    """An event whose tuple may be out of memory, in its sealed partition in the state store."""

    __slots__ = ("_tuple", "_window")

    def __init__(self, tup: Any, timestamp: int, window: PersistentWindowedBoltExecutor) -> None:
        self._window = window
        super().__init__(tup, timestamp)

    @property
    def value(self) -> Any:
        tup = self._tuple
        if tup is None:
            self._window._load(self.seq)
            tup = self._tuple
        return tup

    @value.setter
    def value(self, tup: Any) -> None:
        self._tuple = tup


class _Partition:
    """The live events of one partition (by seq); once sealed, the blob holding its records and which of them
    have expired since."""

    __slots__ = ("events", "expired", "name")

    def __init__(self) -> None:
        self.events: dict[int, _Held] = {}
        self.name: str | None = None
        self.expired: list[int] = []


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
        self._records: dict[int, tuple] = {}  # id(tuple) -> its saved record, while its tuple is in memory
        self._expired_records: list[tuple] = []  # records of the tuples expired since the last firing
        self._state = None
        self._blobs = None  # the state's blobs: where sealed partitions are
        self._bound: int | None = None  # events in memory at most, when there is a store to seal partitions in
        self._size = PARTITION
        self._partitions: dict[int, _Partition] = {}
        self._open = None  # the partition new tuples go to: its records are in the state itself
        self._resident: dict[int, None] = {}  # sealed partitions whose tuples are in memory, oldest loaded first
        self.events_in_memory = 0  # events whose tuples are in memory
        self._token = secrets.token_hex(4)  # names this instance's blobs apart from any other's
        super().prepare(conf, context, collector)
        self._windowed.anchored = False  # the window's tuples are acked already

    def _trigger_policy(self):
        trigger = super()._trigger_policy()
        trigger.handler = self  # each firing passes through ``on_trigger`` below
        return trigger

    def init_state(self, state: Any) -> None:
        self._state, self._blobs = state, state.blobs
        bound = self.bolt.max_events_in_memory
        if bound is not None and self._blobs is not None:
            self._bound = bound
            self._size = max(16, min(PARTITION, bound // 4))
        elif bound is not None:
            log.warning(
                "windowed bolt %s: its state has no store for sealed partitions (no state provider), so its"
                " windows are not bounded to %d events in memory",
                self._component,
                bound,
            )
        system = state.get(SYSTEM_KEY)
        if system is not None:
            self._restore(state, system)
        if self._blobs is not None:  # blobs no restored state names: of a run cut off, or a lost instance
            named = {p.name for p in self._partitions.values() if p.name is not None}
            for name in self._blobs.names():
                if name not in named:
                    self._blobs.release(name)
        own = getattr(self.bolt, "init_state", None)
        if callable(own):
            own(_UserState(state))

    def _restore(self, state: Any, system: dict[str, Any]) -> None:
        """The windows as saved: the open partition's records from the state, the sealed ones' from the store
        (one at a time, letting go of them past the bound)."""
        self._size = system.get("size", self._size)
        field = self.bolt.message_id_field
        ids = self._message_ids
        events = []
        for key in [k for k in state if k[:2] in (("window", "part"), ("window", "sealed"))]:
            number = key[2]
            partition = self._partitions.setdefault(number, _Partition())
            if key[1] == "part":
                records = state.get(key).values()
            else:
                if self._blobs is None:
                    raise InvalidTopologyError(
                        f"windowed bolt {self._component!r}: its saved windows are partly in the state store,"
                        " which this runtime does not read (restore it under LocalCluster or squall run)"
                    )
                partition.name, partition.expired = state.get(key)
                expired = set(partition.expired)
                records = [r for seq, r in self._blobs.get(partition.name).items() if seq not in expired]
                self._resident[number] = None
            for record in records:
                event = self._event_of(record, partition)
                if ids is not None:
                    ids[event.value[field]] = None
                events.append(event)
            self._trim()
        fields_of = self._topology_context.get_component_output_fields
        expired = [self._tuple_of(record, fields_of, register=False) for record in system["expired"]]
        self._expired_records = list(system["expired"])
        self._manager.restore(events, expired, system["manager"])
        self._open = system["manager"]["seq"] // self._size
        if self._generator is not None and system.get("watermarks") is not None:
            self._generator.latest, self._generator.last_watermark = system["watermarks"]

    def _tuple_of(self, record: tuple, fields_of: Any, register: bool = True) -> Tuple:
        _, _, values, component, stream, task = record
        tup = Tuple(values, fields_of(component, stream), component, task, stream)
        if register:  # in a window: its record is found again when it expires
            self._records[id(tup)] = record
        return tup

    def _event_of(self, record: tuple, partition: _Partition) -> Event:
        tup = self._tuple_of(record, self._topology_context.get_component_output_fields)
        event = _Held(tup, record[1], self)
        event.seq = record[0]
        partition.events[event.seq] = event
        self.events_in_memory += 1
        return event

    # -- arrivals, expiries, firings, each written through to the state ------------------------------------
    def _add(self, tup: Any, ts: int) -> None:
        event = _Held(tup, ts, self)
        self._manager.add_event(event)
        if event.seq:  # stored (a watermark is not)
            seq = event.seq
            number = seq // self._size
            if number != self._open:
                self._open = number
                self._seal_behind()
            self._partitions.setdefault(number, _Partition()).events[seq] = event
            self.events_in_memory += 1
            record = (seq, ts, tuple(tup.values), tup.source_component, tup.source_stream, tup.source_task)
            self._records[id(tup)] = record
            key = _part_key(number)
            part = self._state.get(key)
            if part is None:
                part = {}
            part[seq] = record
            self._state.put(key, part)
        self._save_system()
        self._collector.ack(tup)  # held by the runtime until the checkpoint that holds the window is complete
        if self._bound is not None and self.events_in_memory > self._bound:
            self._trim()

    def on_expiry(self, tuples: list) -> None:
        sealed_changed, emptied = set(), {}
        for tup in tuples:
            self._forget(tup)
            record = self._records.pop(id(tup), None)
            if record is None:
                continue
            self._expired_records.append(record)
            seq = record[0]
            number = seq // self._size
            partition = self._partitions[number]
            del partition.events[seq]
            self.events_in_memory -= 1
            if partition.name is None:  # its records are in the state itself
                key = _part_key(number)
                part = self._state.get(key)
                part.pop(seq, None)
                if part:
                    self._state.put(key, part)
                else:
                    self._state.delete(key)
            else:
                partition.expired.append(seq)
                sealed_changed.add(number)
            if not partition.events and number != self._open:
                del self._partitions[number]
                if partition.name is not None:
                    emptied[number] = partition.name
        for number in sealed_changed:
            if number in emptied:  # every tuple of it expired: the blob goes
                self._state.delete(_sealed_key(number))
                self._resident.pop(number, None)
                self._blobs.release(emptied[number])
            else:
                partition = self._partitions[number]
                self._state.put(_sealed_key(number), (partition.name, partition.expired))

    def on_trigger(self) -> bool:
        fired = self._manager.on_trigger()
        self._expired_records = []
        self._save_system()
        self._trim()
        return fired

    def on_activation(self, tuples, new, expired, reference_time) -> None:
        if self._bound is not None and isinstance(tuples, WindowEvents):
            tuples.on_read, tuples.read_step = self._trim, self._size  # get_iter() lets go of what it read
        try:
            self.bolt.execute(self.window(tuples, new, expired, reference_time))
        except Exception as exc:  # the window's tuples are durably in it: the error is counted, nothing fails
            self._collector.report_error(exc)

    def _timer(self) -> None:
        super()._timer()
        self._save_system()
        self._trim()

    # -- partitions out of memory ----------------------------------------------------------------------------
    def _seal_behind(self) -> None:
        """Every partition before the open one goes to the state store, written once, as a blob the state names;
        one the store did not take stays in the state, and is sealed with the next."""
        if self._bound is None:
            return
        for number in [n for n, p in self._partitions.items() if p.name is None and n != self._open]:
            records = self._state.get(_part_key(number))
            if not records:  # every tuple of it expired while it was open
                del self._partitions[number]
                self._state.delete(_part_key(number))
                continue
            name = f"{self._token}-{number}"
            try:
                self._blobs.put(name, records)
            except Exception as exc:
                log.warning("windowed bolt %s: partition %d not sealed yet: %s", self._component, number, exc)
                self._collector.report_error(exc)
                return
            partition = self._partitions[number]
            partition.name = name
            self._state.delete(_part_key(number))
            self._state.put(_sealed_key(number), (name, partition.expired))
            self._resident[number] = None

    def _load(self, seq: int) -> None:
        """Read the sealed partition holding ``seq`` back into memory."""
        number = seq // self._size
        partition = self._partitions[number]
        records = self._blobs.get(partition.name)
        fields_of = self._topology_context.get_component_output_fields
        for s, event in partition.events.items():
            event.value = self._tuple_of(records[s], fields_of)
        self.events_in_memory += len(partition.events)
        self._resident[number] = None

    def _spill(self, number: int) -> None:
        partition = self._partitions[number]
        records = self._records
        for event in partition.events.values():
            records.pop(id(event._tuple), None)
            event._tuple = None
        self.events_in_memory -= len(partition.events)
        del self._resident[number]

    def _trim(self) -> None:
        """Let sealed partitions' tuples go, oldest loaded first, until at most ``max_events_in_memory`` remain
        (the open partition's stay: they are not in the store yet)."""
        bound, resident = self._bound, self._resident
        if bound is None:
            return
        while self.events_in_memory > bound and resident:
            self._spill(next(iter(resident)))

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
                "size": self._size,
                "manager": self._manager.system_state(),
                "expired": list(self._expired_records),
                "watermarks": None if generator is None else (dict(generator.latest), generator.last_watermark),
            },
        )
