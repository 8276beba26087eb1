"""Trident windows: a stream's tuples over the last N tuples or the last T of time, aggregated as each window
fires (Storm's ``tumblingWindow``, ``slidingWindow`` and ``window``).

A window is per partition, as in Storm. Each batch's tuples join the partition's window when the batch ends, in
txid order (a window's node is a committer), and the windows that fire then are aggregated and passed on with that
batch. A batch that runs again after a failure passes on the same windows' results again, without adding its
tuples twice. What a window holds lives in its task's memory (``InMemoryWindowsStore``), as Storm's in-memory
store: a worker that is lost takes its windows' tuples with it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from squall.trident.operation import Aggregator, TridentCollector
from squall.trident.processors import BatchContext, Processor, TaskEnv, check_arity
from squall.trident.tuple import TridentTuple, tuple_type

REPLAYS_KEPT = 64  # the results of this many txids are kept, for a batch that runs again


def _millis(duration: Any) -> int:
    value = getattr(duration, "value", duration)
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"a window's duration must be a positive Duration, got {duration!r}")
    return value


@dataclass(frozen=True)
class WindowConfig:
    """``window_length`` and ``sliding_length``: tuples for a count window, milliseconds for a duration one."""

    kind: str  # "count" or "duration"
    window_length: int
    sliding_length: int

    def __post_init__(self) -> None:
        if self.window_length <= 0 or self.sliding_length <= 0:
            raise ValueError(f"a window's length and slide must be positive, got {self}")
        if self.sliding_length > self.window_length:
            raise ValueError(f"a window cannot slide ({self.sliding_length}) by more than its length ({self})")

    def get_window_length(self) -> int:
        return self.window_length

    def get_sliding_length(self) -> int:
        return self.sliding_length

    @property
    def tumbling(self) -> bool:
        return self.window_length == self.sliding_length


class TumblingCountWindow:
    @staticmethod
    def of(count: int) -> WindowConfig:
        return WindowConfig("count", count, count)


class SlidingCountWindow:
    @staticmethod
    def of(count: int, sliding: int) -> WindowConfig:
        return WindowConfig("count", count, sliding)


class TumblingDurationWindow:
    @staticmethod
    def of(duration: Any) -> WindowConfig:
        return WindowConfig("duration", _millis(duration), _millis(duration))


class SlidingDurationWindow:
    @staticmethod
    def of(duration: Any, sliding: Any) -> WindowConfig:
        return WindowConfig("duration", _millis(duration), _millis(sliding))


class InMemoryWindowsStore:
    """Where a task's windows keep their tuples and results: a dict (Storm's ``InMemoryWindowsStore``)."""

    def __init__(self) -> None:
        self.entries: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self.entries.get(key)

    def get_all(self, keys: Iterable[Any]) -> list[Any]:
        return [self.entries.get(k) for k in keys]

    def get_all_keys(self) -> list[Any]:
        return list(self.entries)

    def put(self, key: Any, value: Any) -> None:
        self.entries[key] = value

    def put_all(self, entries: Iterable[tuple[Any, Any]]) -> None:
        self.entries.update(entries)

    def remove(self, key: Any) -> None:
        self.entries.pop(key, None)

    def remove_all(self, keys: Iterable[Any]) -> None:
        for key in keys:
            self.entries.pop(key, None)

    def shutdown(self) -> None:
        self.entries.clear()


class InMemoryWindowsStoreFactory:
    def create(self, conf: dict[str, Any] | None = None) -> InMemoryWindowsStore:
        return InMemoryWindowsStore()


class Windows:
    """One partition's window: tuples in (``add``, with their time), the windows that fire out (``fire``)."""

    def __init__(self, config: WindowConfig, store: InMemoryWindowsStore) -> None:
        self.config, self.store = config, store
        self.events: list[tuple[float, tuple]] = []  # (ms, values), oldest first
        self.since_fire = 0  # tuples since the last count window fired
        self.next_fire: float | None = None  # a duration window's next firing (ms)

    def add(self, tuples: Sequence[tuple], now_ms: float) -> list[list[tuple]]:
        """The batch's tuples join the window; returns the windows that fire, oldest first."""
        config, fired = self.config, []
        if config.kind == "count":
            for values in tuples:
                self.events.append((now_ms, values))
                self.since_fire += 1
                if self.since_fire == config.sliding_length:
                    self.since_fire = 0
                    fired.append([v for _, v in self.events[-config.window_length :]])
                    if config.tumbling:
                        self.events = []
                    else:
                        del self.events[: max(0, len(self.events) - config.window_length)]
            return fired
        if self.next_fire is None:
            self.next_fire = now_ms + config.sliding_length
        while now_ms >= self.next_fire:  # the windows that ended before these tuples came
            end = self.next_fire
            window = [v for t, v in self.events if end - config.window_length <= t < end]
            if window:
                fired.append(window)
            self.events = [(t, v) for t, v in self.events if t >= end + config.sliding_length - config.window_length]
            self.next_fire = end + config.sliding_length
        self.events.extend((now_ms, values) for values in tuples)
        return fired


class WindowProcessor(Processor):
    """``aggregator`` over each window of this partition's tuples, as windows fire."""

    def __init__(self, node_id, label, config: WindowConfig, store_factory, agg: Aggregator, project, out_fields):
        super().__init__(node_id, label)
        self.config, self.store_factory, self.agg = config, store_factory, agg
        self.project, self.out_fields = project, list(out_fields)
        self.make = tuple_type(out_fields)

    def prepare(self, env: TaskEnv) -> None:
        self.windows = Windows(self.config, self.store_factory.create(env.conf))
        self.results: dict[Any, list[list[Any]]] = {}  # txid -> what its windows gave
        self.agg.prepare(env.conf, env.operation_context())

    def start_batch(self, ctx: BatchContext) -> None:
        ctx.slots[self.node_id] = []

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        ctx.slots[self.node_id].append(tuple(self.project(tup)))

    def finish_batch(self, ctx: BatchContext) -> None:
        tuples, key = ctx.slots.pop(self.node_id), ctx.txid
        results = self.results.get(key) if key is not None else None
        if results is None:
            results = []
            for window in self.windows.add(tuples, time.time() * 1000):
                results.extend(self._aggregate(ctx, window))
            if key is not None:
                self.results[key] = results
                for old in [k for k in self.results if k <= key - REPLAYS_KEPT]:
                    del self.results[old]
        for values in results:
            self.pass_on(ctx, self.make(values))

    def _aggregate(self, ctx: BatchContext, window: list[tuple]) -> list[list[Any]]:
        capture = _Capture(self.label, self.out_fields)
        state = self.agg.init(ctx.batch_id, capture)
        kind = self.project.kind
        for values in window:
            new = self.agg.aggregate(state, kind(values), capture)
            if new is not None:
                state = new
        self.agg.complete(state, capture)
        return capture.rows

    def cleanup(self) -> None:
        self.agg.cleanup()
        self.windows.store.shutdown()


class _Capture(TridentCollector):
    def __init__(self, label: str, fields: list[str]) -> None:
        self.label, self.fields, self.rows = label, fields, []

    def emit(self, values: Sequence[Any]) -> None:
        check_arity(self.label, values, self.fields)
        self.rows.append(list(values))

    def report_error(self, error: BaseException) -> None:
        raise error


class Projection:
    """A picklable projection of a tuple to a window's input fields, with their tuple type."""

    def __init__(self, positions: list[int], fields: Sequence[str]) -> None:
        self.positions, self.fields = positions, list(fields)

    @property
    def kind(self) -> type[TridentTuple]:
        return tuple_type(self.fields)

    def __call__(self, tup: tuple) -> tuple:
        return tuple(tup[i] for i in self.positions)
