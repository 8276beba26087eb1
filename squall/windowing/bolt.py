"""``WindowedBolt``: Storm's ``BaseWindowedBolt`` in Python form, with ``Count``, ``Duration`` and ``Window``.

Declared on the bolt:

- ``with_window(length, sliding)``: each a ``Count`` or a ``Duration`` (sliding defaults to ``Count(1)``);
  ``with_tumbling_window(length)``: sliding by the length;
- ``with_timestamp_field(name)`` or ``with_timestamp_extractor(fn)``: event time, in milliseconds; without
  them, processing time on the topology's clock (``squall.time``);
- ``with_lag(Duration)`` and ``with_watermark_interval(Duration)`` (default 1 s);
- ``with_late_tuple_stream(stream)``: where late tuples go, in a field ``tuple``.

The bolt's ``execute(window)`` is called each time a window fires; what it emits is anchored to every tuple of
the window, and the window's tuples are acked when they expire from it (``executor.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from squall.model.components import DEFAULT_STREAM
from squall.model.errors import InvalidTopologyError

if TYPE_CHECKING:  # for annotations only
    from squall.model.topology import TopologyContext

DEFAULT_WATERMARK_INTERVAL_MS = 1000
LATE_TUPLE_FIELD = "tuple"


@dataclass(frozen=True)
class Count:
    """A number of tuples."""

    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool) or self.value < 1:
            raise ValueError(f"Count must be a whole number of tuples >= 1, got {self.value!r}")

    @classmethod
    def of(cls, value: int) -> Count:
        return cls(value)


class Duration:
    """A length of time: ``Duration(seconds)`` takes a number of seconds (a float is fine) or a
    ``datetime.timedelta``; ``Duration.millis(n)``, ``.seconds(n)``, ``.minutes(n)``, ``.hours(n)`` and
    ``.days(n)`` say the unit. Kept to the millisecond: ``value`` is the length in whole milliseconds.
    ``Duration.of(n)`` is Storm's ``Duration.of``, in milliseconds."""

    __slots__ = ("value",)

    def __init__(self, seconds: float | timedelta) -> None:
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
            raise ValueError(f"Duration takes a number of seconds or a timedelta, got {seconds!r}")
        if seconds < 0:
            raise ValueError(f"Duration must not be negative, got {seconds!r} s")
        object.__setattr__(self, "value", round(seconds * 1000))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Duration is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.value == self.value

    def __hash__(self) -> int:
        return hash((Duration, self.value))

    def __repr__(self) -> str:
        return f"Duration.millis({self.value})"

    def __reduce__(self):
        return (Duration.millis, (self.value,))

    def total_seconds(self) -> float:
        return self.value / 1000

    def to_timedelta(self) -> timedelta:
        return timedelta(milliseconds=self.value)

    @classmethod
    def millis(cls, value: float) -> Duration:
        return cls(value / 1000)

    milliseconds = millis
    of = millis

    @classmethod
    def seconds(cls, value: float) -> Duration:
        return cls(value)

    @classmethod
    def minutes(cls, value: float) -> Duration:
        return cls(value * 60)

    @classmethod
    def hours(cls, value: float) -> Duration:
        return cls(value * 3600)

    @classmethod
    def days(cls, value: float) -> Duration:
        return cls(value * 86_400)


class DetachedTuple(NamedTuple):
    """A late tuple as the late-tuple stream carries it: its values and where it came from."""

    values: tuple
    fields: tuple
    source_component: str
    source_stream: str
    source_task: int
    timestamp: int


class Window:
    """The tuples of one firing: ``get()`` all of them (``get_iter()`` one by one), ``get_new()`` those the
    previous window did not hold, ``get_expired()`` those that left since; ``start_timestamp`` and
    ``end_timestamp`` in ms (the start only for a time window)."""

    __slots__ = ("_expired", "_new", "_tuples", "end_timestamp", "start_timestamp")

    def __init__(
        self,
        tuples: Sequence,
        new: list,
        expired: list,
        start_timestamp: int | None,
        end_timestamp: int | None,
    ) -> None:
        self._tuples, self._new, self._expired = tuples, new, expired
        self.start_timestamp, self.end_timestamp = start_timestamp, end_timestamp

    def get(self) -> list:
        return list(self._tuples)

    def get_iter(self):
        """The window's tuples one by one (Storm's ``getIter``): a persistent window with a bound on the events
        in memory reads them from the state store as it goes, where ``get()`` holds them all at once."""
        return iter(self._tuples)

    def get_new(self) -> list:
        return self._new

    def get_expired(self) -> list:
        return self._expired

    def __len__(self) -> int:
        return len(self._tuples)

    def __iter__(self):
        return iter(self._tuples)

    def __repr__(self) -> str:
        return (
            f"Window({len(self._tuples)} tuples, {len(self._new)} new, {len(self._expired)} expired, "
            f"{self.start_timestamp}..{self.end_timestamp})"
        )


WindowSpec = Count | Duration


class WindowedOutputCollector:
    """A ``WindowedBolt``'s collector, handed to its ``prepare``: emits are anchored to every tuple of the window
    being executed (not anchored for a persistent window, whose tuples are acked already). Acks are the
    runtime's. Use it from ``execute(window)``, on the task's thread."""

    def __init__(self, collector: Any) -> None:
        self._collector = collector
        self.anchors: Sequence = ()
        self.anchored = True  # False for a persistent window, whose tuples are acked before it fires

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """``OutputCollector.emit``, anchored to the window; returns the target task ids."""
        return self._collector.emit(values, list(self.anchors) if self.anchored else None, stream)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """``OutputCollector.emit_direct``, anchored to the window."""
        anchors = list(self.anchors) if self.anchored else None
        self._collector.emit_direct(task, values, anchors=anchors, stream=stream)

    def reset_timeout(self, tup: Any) -> None:
        """``OutputCollector.reset_timeout``: for a tuple the window holds long."""
        self._collector.reset_timeout(tup)

    def report_error(self, error: BaseException) -> None:
        """``OutputCollector.report_error``."""
        self._collector.report_error(error)


class WindowedBolt:
    """A bolt over windows of its input: Storm's ``BaseWindowedBolt``; ``execute(window)`` runs each time a window
    fires.

    It runs inside a bolt task (``squall.windowing.executor``), as a ``Bolt`` does: an instance per task,
    ``prepare`` once per task instance, every call on the one thread that runs its worker's tasks, so
    ``execute`` should not block for long. Neither its windows nor its attributes are saved with the task: a
    task rebuilt after a lost worker starts from ``prepare`` with empty windows, and the tuples they held time
    out and are replayed by their spouts. With ``with_persistence()`` the windows are kept in the task's state
    instead, and the bolt may define ``init_state(state)`` for state of its own (as a ``KeyValueState``), saved
    with them.

    Its collector (given to ``prepare``) has ``emit``, ``emit_direct``, ``report_error`` and ``reset_timeout``;
    emits are anchored to every tuple of the window being executed (with persistence they are not anchored:
    the window's tuples are acked already). Acking is the runtime's: a tuple is acked once it has expired from
    every window it belongs to; with persistence, once it is in the window's state, so its spout sees the ack
    once a checkpoint holds it.
    """

    outputs: Any = ()
    window_length: WindowSpec | None = None
    sliding_interval: WindowSpec | None = None
    timestamp_field: str | None = None
    timestamp_extractor: Callable[[Any], int] | None = None
    lag: Duration | None = None
    watermark_interval: Duration | None = None
    late_tuple_stream: str | None = None
    persistent = False
    message_id_field: str | None = None
    max_events_in_memory: int | None = None

    # -- declaring the window ---------------------------------------------------------------------------
    def with_window(self, length: WindowSpec, sliding: WindowSpec | None = None) -> WindowedBolt:
        """A sliding window of ``length``, firing every ``sliding`` (default: every tuple, ``Count(1)``)."""
        for what, spec in (("length", length), ("sliding interval", sliding)):
            if spec is not None and not isinstance(spec, (Count, Duration)):
                raise InvalidTopologyError(
                    f"windowed bolt {type(self).__name__}: window {what} must be a Count or a Duration, got {spec!r}"
                )
        if length is None:
            raise InvalidTopologyError(f"windowed bolt {type(self).__name__}: a window needs a length")
        self.window_length = length
        self.sliding_interval = sliding if sliding is not None else Count(1)
        return self

    def with_tumbling_window(self, length: WindowSpec) -> WindowedBolt:
        """Windows of ``length`` end to end: each tuple is in exactly one."""
        return self.with_window(length, length)

    def with_timestamp_field(self, name: str) -> WindowedBolt:
        """Event time: each tuple's timestamp (ms) is its field ``name``."""
        self.timestamp_field = name
        return self

    def with_timestamp_extractor(self, extractor: Callable[[Any], int]) -> WindowedBolt:
        """Event time: each tuple's timestamp (ms) is ``extractor(tuple)``."""
        self.timestamp_extractor = extractor
        return self

    def with_lag(self, lag: Duration) -> WindowedBolt:
        """How far behind the latest timestamp a tuple may arrive and still be in its window."""
        self.lag = _duration("lag", lag, self)
        return self

    def with_watermark_interval(self, interval: Duration) -> WindowedBolt:
        """How often watermarks are made (default 1 s)."""
        self.watermark_interval = _duration("watermark interval", interval, self)
        return self

    def with_late_tuple_stream(self, stream_id: str) -> WindowedBolt:
        """Late tuples go to ``stream_id``, in a field ``tuple`` (a ``DetachedTuple``), anchored to themselves."""
        if not isinstance(stream_id, str) or not stream_id:
            raise InvalidTopologyError(f"windowed bolt {type(self).__name__}: a late tuple stream needs a name")
        self.late_tuple_stream = stream_id
        return self

    def with_message_id_field(self, name: str) -> WindowedBolt:
        """Each tuple's field ``name`` identifies its message, the same when it is replayed: a replayed tuple
        whose message is still in a window is acked and not added again, so a window holds each message once
        (as Storm's ``withMessageIdField`` keeps windows from counting a replay twice)."""
        if not isinstance(name, str) or not name:
            raise InvalidTopologyError(f"windowed bolt {type(self).__name__}: a message id field needs a name")
        self.message_id_field = name
        return self

    def with_persistence(self) -> WindowedBolt:
        """Keep the windows in the task's state (Storm's ``withPersistence``): they survive lost workers and
        restarted drivers, and tuples are acked once a checkpoint holds them, not when they expire. The bolt
        may define ``init_state(state)`` for state of its own, saved with the windows."""
        self.persistent = True
        return self

    def with_max_events_in_memory(self, max_events: int) -> WindowedBolt:
        """Keep at most ``max_events`` of a persistent window's tuples in memory (Storm's
        ``withMaxEventsInMemory``): the others are in the state store, in sealed partitions, read back when a
        window, an expiry or ``get_iter()`` needs them. Needs ``with_persistence()``."""
        if not isinstance(max_events, int) or isinstance(max_events, bool) or max_events < 1:
            raise InvalidTopologyError(
                f"windowed bolt {type(self).__name__}: max events in memory must be a whole number >= 1,"
                f" got {max_events!r}"
            )
        self.max_events_in_memory = max_events
        return self

    # -- what the user writes ------------------------------------------------------------------------------
    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: WindowedOutputCollector) -> None:
        """Called once per task instance, before any window fires, as ``Bolt.prepare`` is; keep ``collector``."""

    def execute(self, window: Window) -> None:
        """Process one firing of the window, on the task's thread.

        It fires as tuples arrive for a ``Count`` sliding interval, and on the tick the runtime asks for every
        ``Duration`` sliding interval; under event time (``with_timestamp_field``), when a watermark, made every
        watermark interval, passes its end. What it raises is reported among the run's errors, and the topology
        goes on; without persistence the window's new tuples fail, and their spouts replay them.
        """
        raise NotImplementedError(f"{type(self).__name__} must define execute(window)")

    def cleanup(self) -> None:
        """Not called by squall, as ``Bolt.cleanup``."""

    # -- what the runtime asks -----------------------------------------------------------------------------
    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None or self.timestamp_extractor is not None

    def timestamp_of(self, tup: Any) -> int:
        if self.timestamp_extractor is not None:
            return self.timestamp_extractor(tup)
        return tup[self.timestamp_field]


def _duration(what: str, value: Any, bolt: WindowedBolt) -> Duration:
    if not isinstance(value, Duration):
        raise InvalidTopologyError(f"windowed bolt {type(bolt).__name__}: {what} must be a Duration, got {value!r}")
    return value
