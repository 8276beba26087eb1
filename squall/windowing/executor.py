"""``WindowedBoltExecutor``: runs a ``WindowedBolt`` as a plain bolt, as Storm's executor of the same name.

``TopologyBuilder.set_bolt`` wraps a windowed bolt in one. Each input tuple goes to a ``WindowManager`` and is
held, not acked. When a window fires, the bolt's ``execute(window)`` runs, and what it emits is anchored to every
tuple in the window. A tuple is acked when it expires: after every window it belongs to has fired. If
``execute`` raises, the window's new tuples are failed (their spouts replay them) and the topology goes on.

Timers run from tick tuples the executor asks for: a processing-time window with a ``Duration`` sliding interval
fires on each tick (every sliding interval), and an event-time bolt makes a watermark on each tick (every
watermark interval). Under ``TestCluster`` both follow simulated time.

After a replay (a failed tree, a restarted worker) a tuple may be in a window again: windows are re-evaluated
with what arrives, as in Storm, and a sink that must see each window once deduplicates by the window's end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from squall.model.components import DEFAULT_STREAM, Bolt
from squall.model.config import (
    TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS,
    TOPOLOGY_MAX_SPOUT_PENDING,
    TOPOLOGY_MESSAGE_TIMEOUT_SECS,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS,
)
from squall.model.errors import InvalidTopologyError
from squall.time import now
from squall.windowing.bolt import (
    DEFAULT_WATERMARK_INTERVAL_MS,
    LATE_TUPLE_FIELD,
    Count,
    DetachedTuple,
    Duration,
    Window,
    WindowedBolt,
    WindowedOutputCollector,
)
from squall.windowing.manager import Event, WindowManager
from squall.windowing.policies import (
    CountEvictionPolicy,
    CountTriggerPolicy,
    EvictionPolicy,
    TimeEvictionPolicy,
    TimeTriggerPolicy,
    TriggerPolicy,
    WatermarkCountEvictionPolicy,
    WatermarkCountTriggerPolicy,
    WatermarkTimeEvictionPolicy,
    WatermarkTimeTriggerPolicy,
)
from squall.windowing.watermarks import WatermarkEventGenerator

log = logging.getLogger("squall.windowing")

DEFAULT_LAG_MS = 0


class WindowedBoltExecutor(Bolt):
    # Windows are not kept in task snapshots: a task rebuilt after a lost worker starts with empty windows, as a
    # Storm bolt restarts, and the tuples they held time out and are replayed by their spouts.
    task_snapshots = False

    def __init__(self, bolt: WindowedBolt) -> None:
        self.bolt = bolt

    # -- what the topology sees ----------------------------------------------------------------------------
    @property
    def outputs(self) -> Any:
        declared, late = self.bolt.outputs, self.bolt.late_tuple_stream
        if late is None:
            return declared
        streams = dict(declared) if isinstance(declared, Mapping) else {}
        if not isinstance(declared, Mapping) and len(declared):
            streams[DEFAULT_STREAM] = tuple(declared)
        streams[late] = (LATE_TUPLE_FIELD,)
        return streams

    def get_component_configuration(self) -> dict[str, Any]:
        own = getattr(self.bolt, "get_component_configuration", None)
        conf = dict((own() if callable(own) else None) or {})
        timer = self._timer_ms()
        if timer:
            conf[TOPOLOGY_TICK_TUPLE_FREQ_SECS] = timer / 1000.0
        return conf

    def _timer_ms(self) -> int | None:
        """How often the executor's timer runs: the watermark interval, or a time window's sliding interval."""
        bolt = self.bolt
        if bolt.event_time:
            return (bolt.watermark_interval or Duration.millis(DEFAULT_WATERMARK_INTERVAL_MS)).value or None
        if isinstance(bolt.sliding_interval, Duration):
            return bolt.sliding_interval.value or None
        return None

    def validate(self, component_id: str, conf: Mapping[str, Any]) -> None:
        """Storm's checks, at ``build()``: a window whose length plus sliding interval outlasts the message
        timeout (or outnumbers ``topology.max.spout.pending``) would have its tuples time out before it fires."""
        self.check_declaration(component_id)
        bolt, name = self.bolt, f"windowed bolt {component_id!r}"
        length, sliding = bolt.window_length, bolt.sliding_interval
        durations = sum(s.value for s in (length, sliding) if isinstance(s, Duration))
        counts = sum(s.value for s in (length, sliding) if isinstance(s, Count))
        timeouts_on = conf.get(TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS, True)
        timeout_ms = int(conf.get(TOPOLOGY_MESSAGE_TIMEOUT_SECS, 30) * 1000)
        if timeouts_on and durations > timeout_ms:
            raise InvalidTopologyError(
                f"{name}: window duration (length + sliding interval) {durations / 1000:g} s is more than "
                f"{TOPOLOGY_MESSAGE_TIMEOUT_SECS} ({timeout_ms / 1000:g} s): its tuples would time out before it fires"
            )
        max_pending = conf.get(TOPOLOGY_MAX_SPOUT_PENDING)
        if max_pending is not None and counts > max_pending:
            raise InvalidTopologyError(
                f"{name}: window count (length + sliding interval) {counts} is more than "
                f"{TOPOLOGY_MAX_SPOUT_PENDING} ({max_pending}): the window could never fill"
            )

    def check_declaration(self, component_id: str) -> None:
        """What every windowed bolt must declare, whatever its config."""
        bolt, name = self.bolt, f"windowed bolt {component_id!r}"
        if bolt.window_length is None:
            raise InvalidTopologyError(f"{name}: no window declared (with_window or with_tumbling_window)")
        if bolt.late_tuple_stream is not None and not bolt.event_time:
            raise InvalidTopologyError(f"{name}: a late tuple stream needs a timestamp field or extractor")
        if bolt.timestamp_field is not None and bolt.timestamp_extractor is not None:
            raise InvalidTopologyError(f"{name}: give a timestamp field or a timestamp extractor, not both")
        if isinstance(bolt.sliding_interval, Duration) and bolt.sliding_interval.value == 0:
            raise InvalidTopologyError(f"{name}: a sliding interval of 0 ms would fire without end")
        if bolt.max_events_in_memory is not None and not bolt.persistent:
            raise InvalidTopologyError(f"{name}: max events in memory needs with_persistence()")
        if bolt.message_id_field is not None and not bolt.persistent:
            # An in-memory window keeps a failed tuple until it expires: its replay must come in again.
            raise InvalidTopologyError(f"{name}: a message id field needs with_persistence()")

    # -- the bolt ------------------------------------------------------------------------------------------
    def prepare(self, conf: dict, context: Any, collector: Any) -> None:
        self._collector = collector
        self._windowed = WindowedOutputCollector(collector)
        self._component = context.component_id
        self._failed: set[int] = set()  # ids of held tuples failed with a window that raised
        self._message_ids: dict[Any, None] | None = {} if self.bolt.message_id_field else None  # in the windows
        self.duplicates = 0  # tuples not added: their message id was in a window already
        self.late_tuples = 0
        bolt = self.bolt
        bolt.prepare(conf, context, self._windowed)
        self._manager = WindowManager(self)
        self._generator = None
        if bolt.event_time:
            streams = {(component, stream) for component, stream in context.get_this_sources()}
            lag = bolt.lag.value if bolt.lag is not None else DEFAULT_LAG_MS
            interval = (bolt.watermark_interval or Duration.millis(DEFAULT_WATERMARK_INTERVAL_MS)).value
            self._generator = WatermarkEventGenerator(self._manager, interval, lag, streams)
        self._eviction = self._eviction_policy()
        self._trigger = self._trigger_policy()
        self._manager.set_eviction_policy(self._eviction)
        self._manager.set_trigger_policy(self._trigger)
        if self._generator is not None:
            self._generator.start()
        self._trigger.start()

    def _eviction_policy(self) -> EvictionPolicy:
        bolt, length = self.bolt, self.bolt.window_length
        if isinstance(length, Count):
            return WatermarkCountEvictionPolicy(length.value) if bolt.event_time else CountEvictionPolicy(length.value)
        if bolt.event_time:
            lag = bolt.lag.value if bolt.lag is not None else DEFAULT_LAG_MS
            return WatermarkTimeEvictionPolicy(length.value, lag)
        return TimeEvictionPolicy(length.value)

    def _trigger_policy(self) -> TriggerPolicy:
        bolt, sliding, manager = self.bolt, self.bolt.sliding_interval, self._manager
        if isinstance(sliding, Count):
            if bolt.event_time:
                return WatermarkCountTriggerPolicy(sliding.value, manager, self._eviction, manager)
            return CountTriggerPolicy(sliding.value, manager, self._eviction)
        if bolt.event_time:
            return WatermarkTimeTriggerPolicy(sliding.value, manager, self._eviction, manager)
        return TimeTriggerPolicy(sliding.value, manager, self._eviction)

    def execute(self, tup: Any) -> None:
        if tup.is_tick:
            self._timer()
            return
        if self._generator is None:
            if not self._duplicate(tup):
                self._add(tup, int(now() * 1000))
            return
        try:
            ts = int(self.bolt.timestamp_of(tup))
        except (KeyError, ValueError, TypeError) as exc:
            what = self.bolt.timestamp_field or "the timestamp extractor"
            raise ValueError(
                f"windowed bolt {self._component!r}: no timestamp from {what} in a tuple of "
                f"{tup.source_component}/{tup.source_stream}: {exc}"
            ) from exc
        if self._generator.track((tup.source_component, tup.source_stream), ts):
            if not self._duplicate(tup):
                self._add(tup, ts)
            return
        self.late_tuples += 1
        if self.bolt.late_tuple_stream is not None:
            detached = DetachedTuple(
                tuple(tup.values), tuple(tup.fields), tup.source_component, tup.source_stream, tup.source_task, ts
            )
            self._collector.emit([detached], tup, self.bolt.late_tuple_stream)
        else:
            log.info(
                "windowed bolt %s: a late tuple (timestamp %d, before the watermark %d) is not processed: %s",
                self._component,
                ts,
                self._generator.last_watermark,
                tup.values,
            )
        self._collector.ack(tup)

    def _duplicate(self, tup: Any) -> bool:
        """A replay of a tuple still in a window (by its message id field): acked, and not added again."""
        ids = self._message_ids
        if ids is None:
            return False
        key = tup[self.bolt.message_id_field]
        if key not in ids:
            ids[key] = None
            return False
        self.duplicates += 1
        self._collector.ack(tup)
        return True

    def _forget(self, tup: Any) -> None:
        if self._message_ids is not None:
            self._message_ids.pop(tup[self.bolt.message_id_field], None)

    def _add(self, tup: Any, ts: int) -> None:
        """Into the windows; acked when it expires."""
        self._manager.add_event(Event(tup, ts))

    def _timer(self) -> None:
        if self._generator is not None:
            self._generator.run()
        elif isinstance(self._trigger, TimeTriggerPolicy):
            moment = int(now() * 1000)
            if self._trigger.due(moment):  # ticks that came late, together, fire one window
                self._trigger.run(moment)

    def cleanup(self) -> None:
        self._manager.shutdown()
        self.bolt.cleanup()

    # -- the window manager's listener ------------------------------------------------------------------------
    def on_expiry(self, tuples: list) -> None:
        ack, failed = self._collector.ack, self._failed
        for tup in tuples:
            self._forget(tup)
            if failed and id(tup) in failed:
                failed.discard(id(tup))
                continue
            ack(tup)

    def window(self, tuples: Sequence, new: list, expired: list, reference_time: int | None) -> Window:
        """What ``execute`` gets: the window's tuples, with a start for a time window."""
        length = self.bolt.window_length
        start = reference_time - length.value if isinstance(length, Duration) and reference_time is not None else None
        return Window(tuples, new, expired, start, reference_time)

    def on_activation(self, tuples: Sequence, new: list, expired: list, reference_time: int | None) -> None:
        self._windowed.anchors = tuples
        try:
            self.bolt.execute(self.window(tuples, new, expired, reference_time))
        except Exception as exc:
            self._collector.report_error(exc)
            log.error("windowed bolt %s: execute(window) raised; the window's new tuples fail", self._component)
            for tup in new:
                if id(tup) not in self._failed:
                    self._failed.add(id(tup))
                    self._collector.fail(tup)
        finally:
            self._windowed.anchors = ()
