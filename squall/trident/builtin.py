"""Trident's built-in operations (Storm's ``trident.operation.builtin``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from squall.trident.operation import (
    BaseAggregator,
    BaseFilter,
    CombinerAggregator,
    Filter,
    TridentCollector,
    TridentOperationContext,
)
from squall.trident.state import BaseQueryFunction, MapState, Snapshottable, TupleCollection
from squall.trident.tuple import TridentTuple

log = logging.getLogger("squall.trident")


class Count(CombinerAggregator):
    """The number of tuples."""

    def init(self, tup: TridentTuple) -> int:
        return 1

    def combine(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0


class Sum(CombinerAggregator):
    """The sum of the first input field (an int while every value is an int)."""

    def init(self, tup: TridentTuple) -> Any:
        return tup[0]

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def zero(self) -> int:
        return 0


class MapGet(BaseQueryFunction):
    """Each tuple's value in a map state, its input fields being the key."""

    def batch_retrieve(self, state: MapState, tuples: list[TridentTuple]) -> list[Any]:
        return state.multi_get([list(t) for t in tuples])

    def execute(self, tup: TridentTuple, result: Any, collector: TridentCollector) -> None:
        collector.emit([result])


class SnapshotGet(BaseQueryFunction):
    """The single value of a ``Snapshottable`` state (an ungrouped ``persistent_aggregate``)."""

    def batch_retrieve(self, state: Snapshottable, tuples: list[TridentTuple]) -> list[Any]:
        value = state.get()
        return [value] * len(tuples)

    def execute(self, tup: TridentTuple, result: Any, collector: TridentCollector) -> None:
        collector.emit([result])


class TupleCollectionGet(BaseQueryFunction):
    """Every key of a ``TupleCollection`` state with its value, one tuple each, for each input tuple."""

    def batch_retrieve(self, state: TupleCollection, tuples: list[TridentTuple]) -> list[Any]:
        return [list(state.get_tuples()) for _ in tuples]

    def execute(self, tup: TridentTuple, result: Any, collector: TridentCollector) -> None:
        for values in result:
            collector.emit(values)


class FilterNull(BaseFilter):
    """Keeps the tuples with no None among their input fields."""

    def is_keep(self, tup: TridentTuple) -> bool:
        return all(v is not None for v in tup)


class Equals(BaseFilter):
    """Keeps the tuples whose input fields are all equal."""

    def is_keep(self, tup: TridentTuple) -> bool:
        return all(v == tup[0] for v in tup)


class Negate(BaseFilter):
    """Keeps what ``filter`` drops."""

    def __init__(self, filter: Filter) -> None:
        self.filter = filter

    def prepare(self, conf: dict, context: TridentOperationContext) -> None:
        self.filter.prepare(conf, context)

    def is_keep(self, tup: TridentTuple) -> bool:
        return not self.filter.is_keep(tup)

    def cleanup(self) -> None:
        self.filter.cleanup()


class Debug(BaseFilter):
    """Logs each tuple (at INFO, logger ``squall.trident``) and keeps it."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name

    def is_keep(self, tup: TridentTuple) -> bool:
        log.info("%s%r", f"{self.name}: " if self.name else "DEBUG: ", list(tup))
        return True


class TrueFilter(BaseFilter):
    def is_keep(self, tup: TridentTuple) -> bool:
        return True


class Extreme(BaseAggregator):
    """The tuple with the least (or greatest) key: a field's position, or a function of the tuple."""

    def __init__(self, key: int | Callable[[TridentTuple], Any], least: bool) -> None:
        self.key, self.least = key, least

    def _key(self, tup: TridentTuple) -> Any:
        return tup[self.key] if isinstance(self.key, int) else self.key(tup)

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        return [None]

    def aggregate(self, state: list[Any], tup: TridentTuple, collector: TridentCollector) -> None:
        best = state[0]
        if best is None:
            state[0] = tup
            return
        a, b = self._key(tup), self._key(best)
        if (a < b) if self.least else (a > b):
            state[0] = tup

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        if state[0] is not None:
            collector.emit(list(state[0]))


class _FirstNSorted(BaseAggregator):
    def __init__(self, n: int, sort_at: int | None, reverse: bool) -> None:
        self.n, self.sort_at, self.reverse = n, sort_at, reverse

    def init(self, batch_id: Any, collector: TridentCollector) -> list[TridentTuple]:
        return []

    def aggregate(self, state: list, tup: TridentTuple, collector: TridentCollector) -> None:
        state.append(tup)

    def complete(self, state: list, collector: TridentCollector) -> None:
        if self.sort_at is not None:
            state = sorted(state, key=lambda t: t[self.sort_at], reverse=self.reverse)
        for tup in state[: self.n]:
            collector.emit(list(tup))


class FirstN:
    """An assembly (``stream.apply_assembly(FirstN(...))``): the batch's first ``n`` tuples, or, with
    ``sort_field``, its ``n`` least (``reverse``: greatest) by that field."""

    def __init__(self, n: int, sort_field: str | None = None, reverse: bool = False) -> None:
        self.n, self.sort_field, self.reverse = n, sort_field, reverse

    def apply(self, stream: Any) -> Any:
        fields = stream.fields
        at = None if self.sort_field is None else list(fields).index(self.sort_field)
        agg = _FirstNSorted(self.n, at, self.reverse)
        return stream.partition_aggregate(fields, agg, fields).global_().partition_aggregate(fields, agg, fields)
