"""``WindowManager``: Storm's, with windows found by position instead of by a scan.

Events are kept in timestamp order (arrival order among equal timestamps; an event that arrives out of order is
inserted where its timestamp belongs). Expired events are a prefix, a window is a contiguous run after it, and
the events a window has that the one before did not are found by position: adding an event and expiring one cost
O(1) amortized (O(log n) out of order), and a firing costs O(log n) plus its new and expired events. The window's
own events are handed over as ``WindowEvents``, a sequence read from the manager's storage when first used, so a
window of 100,000 events is not copied unless the bolt reads it.

As in Storm, expired events are also looked for every ``EXPIRE_EVENTS_THRESHOLD`` arrivals, so that their tuples
are acked without waiting for the next firing.
"""

from __future__ import annotations

import sys
import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from squall.time import now
from squall.windowing.policies import Action, EvictionPolicy, TriggerPolicy

EXPIRE_EVENTS_THRESHOLD = 100
COMPACT_AFTER = 4096  # expired events kept in storage before it is compacted


class Event:
    """A value and its timestamp (ms)."""

    __slots__ = ("seq", "timestamp", "value")
    is_watermark = False

    def __init__(self, value: Any, timestamp: int) -> None:
        self.value, self.timestamp = value, timestamp
        self.seq = 0  # arrival order, set by the manager

    def get(self) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r}, {self.timestamp})"


class WatermarkEvent(Event):
    """Every event up to ``timestamp`` has arrived, bar late ones."""

    __slots__ = ()
    is_watermark = True

    def __init__(self, timestamp: int) -> None:
        super().__init__(None, timestamp)


class WindowLifecycleListener(Protocol):
    def on_expiry(self, events: list) -> None: ...

    def on_activation(self, events: Sequence, new_events: list, expired: list, reference_time: int | None) -> None: ...


class WindowEvents(Sequence):
    """A window's values, read from the manager's storage when first used (and kept from then on).

    With ``on_read`` set (a persistent window with a bound on the events in memory), iterating reads them one
    by one without keeping them, and calls ``on_read`` after every ``read_step``, so the window lets go of what
    it read.
    """

    __slots__ = ("__weakref__", "_events", "_hi", "_lo", "_values", "on_read", "read_step")

    def __init__(self, events: list[Event], lo: int, hi: int) -> None:
        self._events, self._lo, self._hi = events, lo, hi
        self._values: list | None = None
        self.on_read: Any = None
        self.read_step = 1024

    def values(self) -> list:
        if self._values is None:
            self._values = [e.value for e in self._events[self._lo : self._hi]]
            self._events = None
        return self._values

    def detach(self) -> None:
        """The manager's storage is about to move: keep this window's own events."""
        if self._values is None:
            self._events, self._lo, self._hi = self._events[self._lo : self._hi], 0, self._hi - self._lo

    def __len__(self) -> int:
        return self._hi - self._lo

    def __getitem__(self, index):
        return self.values()[index]

    def __iter__(self) -> Iterator:
        if self.on_read is None or self._values is not None:
            return iter(self.values())
        return self._read(self._events[self._lo : self._hi])

    def _read(self, events: list[Event]) -> Iterator:
        on_read, step = self.on_read, self.read_step
        for i, event in enumerate(events, 1):
            yield event.value
            if i % step == 0:
                on_read()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self.values() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.values())


def _timestamp(event: Event) -> int:
    return event.timestamp


def _key(event: Event) -> tuple[int, int]:
    return event.timestamp, event.seq


class WindowManager:
    """Holds a window's events, fires windows on its trigger policy and expires events on its eviction policy,
    telling ``listener`` (``on_activation`` with the window, its new and its expired events; ``on_expiry``)."""

    def __init__(self, listener: WindowLifecycleListener) -> None:
        self.listener = listener
        self.eviction_policy: EvictionPolicy | None = None
        self.trigger_policy: TriggerPolicy | None = None
        self._events: list[Event] = []  # in timestamp order; those before ``_head`` have expired
        self._head = 0
        self._expired: list = []  # values expired since the last firing
        self._since_expiry = 0
        self._seq = 0
        self._previous: tuple[tuple[int, int], int] | None = None  # last window's last event (ts, seq); seq then
        self._earliest_added: int | None = None  # the lowest timestamp added since the last firing
        self._views: list[weakref.ref[WindowEvents]] = []  # windows handed out that may still read storage

    def set_eviction_policy(self, policy: EvictionPolicy) -> None:
        self.eviction_policy = policy

    def set_trigger_policy(self, policy: TriggerPolicy) -> None:
        self.trigger_policy = policy

    # -- arrivals -------------------------------------------------------------------------------------------
    def add(self, value: Any, ts: int | None = None) -> None:
        """``value`` at ``ts`` (ms; default: now on the topology's clock)."""
        self.add_event(Event(value, int(now() * 1000) if ts is None else ts))

    def add_event(self, event: Event) -> None:
        if not event.is_watermark:
            self._store(event)
        self.eviction_policy.track(event)
        self.trigger_policy.track(event)
        self._since_expiry += 1
        if self._since_expiry >= EXPIRE_EVENTS_THRESHOLD:
            self._scan(full=False)

    def _store(self, event: Event) -> None:
        self._seq += 1
        event.seq = self._seq
        events, ts = self._events, event.timestamp
        if len(events) == self._head or ts >= events[-1].timestamp:
            events.append(event)
        else:  # out of order: where its timestamp belongs
            self._freeze_views()
            events.insert(bisect_right(events, ts, self._head, len(events), key=_timestamp), event)
        if self._earliest_added is None or ts < self._earliest_added:
            self._earliest_added = ts

    # -- firing ---------------------------------------------------------------------------------------------
    def on_trigger(self) -> bool:
        """Fire a window: expire what the eviction policy says, and hand the window to the listener if it holds
        any event. Returns whether it did."""
        lo, hi = self._scan(full=True)
        expired, self._expired = self._expired, []
        new = self._new_events(lo, hi)
        self._earliest_added = None
        fired = hi > lo
        if fired:
            last = self._events[hi - 1]
            self._previous = (_key(last), self._seq)
            window = WindowEvents(self._events, lo, hi)
            if len(self._views) >= 64:
                self._views = [ref for ref in self._views if ref() is not None]
            self._views.append(weakref.ref(window))
            context = self.eviction_policy.context
            self.listener.on_activation(window, new, expired, None if context is None else context.reference_time)
        else:
            self._previous = None
        self.trigger_policy.reset()
        return fired

    def _scan(self, full: bool) -> tuple[int, int]:
        """Expire the events the eviction policy expires; with ``full``, also find the window: ``(lo, hi)``."""
        events, i, end = self._events, self._head, len(self._events)
        evict = self.eviction_policy.evict
        expired, action = [], None
        while i < end:
            action = evict(events[i])
            if action is not Action.EXPIRE:
                break
            expired.append(events[i].value)
            i += 1
        self._head = lo = hi = i
        if full and i < end and action is Action.PROCESS:
            hi = self.eviction_policy.process_until(events, i + 1, end)
        self._expired.extend(expired)
        self._since_expiry = 0
        if expired:
            self.listener.on_expiry(expired)
        if self._head >= COMPACT_AFTER and self._head * 2 >= len(events):
            self._freeze_views()
            del events[: self._head]
            self._head, lo, hi = 0, lo - self._head, hi - self._head
        return lo, hi

    def _new_events(self, lo: int, hi: int) -> list:
        """The window's events that the previous window did not hold."""
        events = self._events
        if self._previous is None:
            return [e.value for e in events[lo:hi]]
        last_key, last_seq = self._previous
        after = bisect_right(events, last_key, lo, hi, key=_key)
        late: list = []
        if self._earliest_added is not None and self._earliest_added <= last_key[0]:  # arrived inside the old range
            start = bisect_left(events, self._earliest_added, lo, after, key=_timestamp)
            late = [e.value for e in events[start:after] if e.seq > last_seq]
        return late + [e.value for e in events[after:hi]]

    def _freeze_views(self) -> None:
        """Storage is about to move: windows handed out keep their own events first."""
        for ref in self._views:
            view = ref()
            if view is not None:
                view.detach()
        self._views = []

    # -- what trigger policies ask ----------------------------------------------------------------------------
    def get_event_count(self, reference_time: int) -> int:
        """Events at or before ``reference_time``."""
        events = self._events
        return bisect_right(events, reference_time, self._head, len(events), key=_timestamp) - self._head

    def get_earliest_event_ts(self, start_ts: int, end_ts: int) -> int:
        """The earliest timestamp in ``(start_ts, end_ts]``, or ``sys.maxsize``."""
        events = self._events
        i = bisect_right(events, start_ts, self._head, len(events), key=_timestamp)
        return events[i].timestamp if i < len(events) and events[i].timestamp <= end_ts else sys.maxsize

    def get_sliding_count_timestamps(self, start_ts: int, end_ts: int, sliding_count: int) -> list[int]:
        """The timestamp of every ``sliding_count``-th event in ``(start_ts, end_ts]``."""
        if end_ts <= start_ts:
            return []
        events, head = self._events, self._head
        first = bisect_right(events, start_ts, head, len(events), key=_timestamp)
        last = bisect_right(events, end_ts, first, len(events), key=_timestamp)
        return [e.timestamp for e in events[first + sliding_count - 1 : last : sliding_count]]

    @property
    def events(self) -> list[Event]:
        """The events held (not expired), in timestamp order."""
        return self._events[self._head :]

    def __len__(self) -> int:
        return len(self._events) - self._head

    def system_state(self) -> dict[str, Any]:
        """What, besides its events, the manager needs to go on after a restart (persistent windows)."""
        return {
            "seq": self._seq,
            "previous": self._previous,
            "since_expiry": self._since_expiry,
            "earliest_added": self._earliest_added,
            **self.get_state(),
        }

    def restore(self, events: list[Event], expired: list, system: dict[str, Any]) -> None:
        """Start again from ``events`` (each with its ``seq``), the values expired since the last firing, and
        ``system_state()``."""
        self._events = sorted(events, key=_key)
        self._head, self._expired, self._views = 0, list(expired), []
        self._seq, self._previous = system["seq"], system["previous"]
        self._since_expiry, self._earliest_added = system["since_expiry"], system["earliest_added"]
        self.restore_state(system)

    def get_state(self) -> dict[str, Any]:
        return {"es": self.eviction_policy.get_state(), "ts": self.trigger_policy.get_state()}

    def restore_state(self, state: dict[str, Any]) -> None:
        if state.get("es") is not None:
            self.eviction_policy.restore_state(state["es"])
        if state.get("ts") is not None:
            self.trigger_policy.restore_state(state["ts"])

    def shutdown(self) -> None:
        if self.trigger_policy is not None:
            self.trigger_policy.shutdown()
