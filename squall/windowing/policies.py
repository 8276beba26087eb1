"""When a window fires (trigger policies) and which events it holds (eviction policies), as Storm's.

Times are integers in milliseconds. Each eviction policy answers ``evict(event)`` for one event, as Storm's do,
and ``process_until(events, start, end)`` for a run of events in timestamp order that ``WindowManager`` asks
about at once, so that a window is found in O(log n), not by a scan of it. Trigger policies call their
``handler.on_trigger()`` after setting the eviction policy's context: its reference time, and for some the
count of events it covers.
"""

from __future__ import annotations

import enum
import sys
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Protocol

from squall.time import now

NO_DELTA_YET = 2**31 - 1  # Storm's Integer.MAX_VALUE: the first time window takes every event


class Action(enum.Enum):
    EXPIRE = "EXPIRE"  # out of the window for good: acked
    PROCESS = "PROCESS"  # in the window
    KEEP = "KEEP"  # not yet in a window (its time has not come)
    STOP = "STOP"  # stop looking: nothing after it is decided now


@dataclass(frozen=True)
class EvictionContext:
    """Storm's ``DefaultEvictionContext``."""

    reference_time: int
    current_count: int | None = None
    sliding_count: int | None = None
    sliding_interval: int | None = None


class TriggerHandler(Protocol):
    def on_trigger(self) -> bool: ...


def _timestamp(event: Any) -> int:
    return event.timestamp


def _until_after(events: list, start: int, end: int, reference_time: int) -> int:
    """The first index in ``events[start:end]`` (timestamp order) whose timestamp is past ``reference_time``."""
    return bisect_right(events, reference_time, start, end, key=_timestamp)


class EvictionPolicy:
    context: EvictionContext | None = None

    def evict(self, event: Any) -> Action:
        raise NotImplementedError

    def process_until(self, events: list, start: int, end: int) -> int:
        """How far, from ``start``, the events (in timestamp order) are PROCESS, with ``evict``'s side effects."""
        raise NotImplementedError

    def track(self, event: Any) -> None:
        pass

    def set_context(self, context: EvictionContext) -> None:
        self.context = context

    def reset(self) -> None:
        pass

    def get_state(self) -> Any:
        return None

    def restore_state(self, state: Any) -> None:
        pass


class CountEvictionPolicy(EvictionPolicy):
    """The last ``count`` events."""

    def __init__(self, count: int) -> None:
        self.threshold = count
        self.current_count = 0

    def evict(self, event: Any) -> Action:
        if self.current_count > self.threshold:
            self.current_count -= 1
            return Action.EXPIRE
        return Action.PROCESS

    def process_until(self, events: list, start: int, end: int) -> int:
        return end  # past the expired, every event counts

    def track(self, event: Any) -> None:
        if not event.is_watermark:
            self.current_count += 1

    def get_state(self) -> int:
        return self.current_count

    def restore_state(self, state: int) -> None:
        self.current_count = state


class TimeEvictionPolicy(EvictionPolicy):
    """Events of the last ``window_length`` ms before the reference time."""

    def __init__(self, window_length: int) -> None:
        self.window_length = window_length
        self.delta = 0

    def evict(self, event: Any) -> Action:
        now = self.context.reference_time if self.context is not None else _now_ms()
        diff = now - event.timestamp
        if diff >= self.window_length + self.delta:
            return Action.EXPIRE
        if diff < 0:  # not yet: beyond the reference time
            return Action.KEEP
        return Action.PROCESS

    def process_until(self, events: list, start: int, end: int) -> int:
        now = self.context.reference_time if self.context is not None else _now_ms()
        return _until_after(events, start, end, now)

    def set_context(self, context: EvictionContext) -> None:
        previous, self.context = self.context, context
        if context.sliding_interval is not None:  # a timer fired: how late was it (Storm's drift correction)
            if previous is None:
                self.delta = NO_DELTA_YET
            else:
                self.delta = context.reference_time - previous.reference_time - context.sliding_interval

    def get_state(self) -> EvictionContext | None:
        return self.context

    def restore_state(self, state: EvictionContext | None) -> None:
        self.context = state


class WatermarkTimeEvictionPolicy(TimeEvictionPolicy):
    """Event time: events of the last ``window_length`` ms before the watermark's window end; those more than
    ``lag`` past it stop the look."""

    def __init__(self, window_length: int, lag: int = sys.maxsize) -> None:
        super().__init__(window_length)
        self.lag = lag

    def evict(self, event: Any) -> Action:
        if self.context is None:
            return Action.STOP
        diff = self.context.reference_time - event.timestamp
        if diff < -self.lag:
            return Action.STOP
        if diff < 0:
            return Action.KEEP
        return super().evict(event)

    def process_until(self, events: list, start: int, end: int) -> int:
        if self.context is None:
            return start
        return _until_after(events, start, end, self.context.reference_time)


class WatermarkCountEvictionPolicy(EvictionPolicy):
    """Event time: the last ``count`` events at or before the reference time."""

    def __init__(self, count: int) -> None:
        self.threshold = count
        self.current_count = 0
        self.processed = 0

    def evict(self, event: Any) -> Action:
        if self.context is None:
            return Action.STOP
        if event.timestamp <= self.context.reference_time and self.processed < self.current_count:
            if self.current_count > self.threshold:
                self.current_count -= 1
                return Action.EXPIRE
            self.processed += 1
            return Action.PROCESS
        return Action.KEEP

    def process_until(self, events: list, start: int, end: int) -> int:
        if self.context is None:
            return start
        due = _until_after(events, start, end, self.context.reference_time) - start
        taken = max(0, min(due, self.current_count - self.processed))
        self.processed += taken
        return start + taken

    def set_context(self, context: EvictionContext) -> None:
        self.context = context
        if context.current_count is not None:
            self.current_count = context.current_count
        else:
            self.current_count = self.processed + context.sliding_count
        self.processed = 0

    def reset(self) -> None:
        self.processed = 0

    def get_state(self) -> tuple[int, int]:
        return self.current_count, self.processed

    def restore_state(self, state: tuple[int, int]) -> None:
        self.current_count, self.processed = state


class TriggerPolicy:
    def track(self, event: Any) -> None:
        pass

    def reset(self) -> None:
        pass

    def start(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def get_state(self) -> Any:
        return None

    def restore_state(self, state: Any) -> None:
        pass


class CountTriggerPolicy(TriggerPolicy):
    """Fires every ``count`` events."""

    def __init__(self, count: int, handler: TriggerHandler, eviction_policy: EvictionPolicy) -> None:
        self.count, self.handler, self.eviction_policy = count, handler, eviction_policy
        self.current_count = 0
        self.started = False

    def track(self, event: Any) -> None:
        if self.started and not event.is_watermark:
            self.current_count += 1
            if self.current_count >= self.count:
                self.eviction_policy.set_context(EvictionContext(_now_ms()))
                self.handler.on_trigger()

    def reset(self) -> None:
        self.current_count = 0

    def start(self) -> None:
        self.started = True

    def get_state(self) -> int:
        return self.current_count

    def restore_state(self, state: int) -> None:
        self.current_count = state


class TimeTriggerPolicy(TriggerPolicy):
    """Fires every ``duration`` ms of processing time. Storm runs it on a timer thread; squall's windowed bolt
    calls ``run`` from its tick tuples, so windows move with the topology's clock (simulated under
    ``TestCluster``)."""

    def __init__(self, duration: int, handler: TriggerHandler, eviction_policy: EvictionPolicy | None = None) -> None:
        self.duration, self.handler, self.eviction_policy = duration, handler, eviction_policy
        self.last_fire: int | None = None

    def due(self, now: int) -> bool:
        """Whether a tick at ``now`` fires: not if one fired less than half an interval before (ticks that
        arrive together after a stall fire one window, not several at the same time)."""
        return self.last_fire is None or now - self.last_fire >= self.duration / 2

    def run(self, now: int | None = None) -> None:
        """One firing, as Storm's timer task: the reference time is a millisecond before ``now``."""
        now = _now_ms() if now is None else now
        self.last_fire = now
        if self.eviction_policy is not None:
            self.eviction_policy.set_context(EvictionContext(now - 1, sliding_interval=self.duration))
        self.handler.on_trigger()


class WatermarkCountTriggerPolicy(TriggerPolicy):
    """Event time: fires every ``count`` events, as watermarks pass them."""

    def __init__(
        self, count: int, handler: TriggerHandler, eviction_policy: EvictionPolicy, window_manager: Any
    ) -> None:
        self.count, self.handler = count, handler
        self.eviction_policy, self.window_manager = eviction_policy, window_manager
        self.last_processed_ts = 0
        self.started = False

    def track(self, event: Any) -> None:
        if self.started and event.is_watermark:
            for ts in self.window_manager.get_sliding_count_timestamps(
                self.last_processed_ts, event.timestamp, self.count
            ):
                self.eviction_policy.set_context(EvictionContext(ts, None, self.count))
                self.handler.on_trigger()
                self.last_processed_ts = ts

    def start(self) -> None:
        self.started = True

    def get_state(self) -> int:
        return self.last_processed_ts

    def restore_state(self, state: int) -> None:
        self.last_processed_ts = state


class WatermarkTimeTriggerPolicy(TriggerPolicy):
    """Event time: fires at each window end (a multiple of ``sliding_interval``) a watermark passes; empty
    stretches are skipped to the next window that holds an event."""

    def __init__(
        self, sliding_interval: int, handler: TriggerHandler, eviction_policy: EvictionPolicy, window_manager: Any
    ) -> None:
        self.sliding_interval, self.handler = sliding_interval, handler
        self.eviction_policy, self.window_manager = eviction_policy, window_manager
        self.next_window_end = 0
        self.started = False

    def track(self, event: Any) -> None:
        if not (self.started and event.is_watermark):
            return
        watermark, window_end = event.timestamp, self.next_window_end
        while window_end <= watermark:
            count = self.window_manager.get_event_count(window_end)
            self.eviction_policy.set_context(EvictionContext(window_end, count))
            if self.handler.on_trigger():
                window_end += self.sliding_interval
            else:  # nothing in this window: on to the next one that holds an event
                aligned = self._next_aligned_window_end(window_end, watermark)
                if aligned == sys.maxsize:
                    break
                window_end = aligned
        self.next_window_end = window_end

    def _next_aligned_window_end(self, start: int, end: int) -> int:
        earliest = self.window_manager.get_earliest_event_ts(start, end)
        if earliest == sys.maxsize or earliest % self.sliding_interval == 0:
            return earliest
        return earliest + (self.sliding_interval - earliest % self.sliding_interval)

    def start(self) -> None:
        self.started = True

    def get_state(self) -> int:
        return self.next_window_end

    def restore_state(self, state: int) -> None:
        self.next_window_end = state


def _now_ms() -> int:
    return int(now() * 1000)
