"""How Trident's aggregations are spelled as ``Aggregator``s (Storm's ``trident.operation.impl``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from squall.trident.operation import (
    Aggregator,
    CombinerAggregator,
    MultiReducer,
    ReducerAggregator,
    TridentCollector,
    TridentOperationContext,
)
from squall.trident.processors import batch_partition
from squall.trident.tuple import TridentTuple, tuple_type


class _Holder:
    __slots__ = ("seen", "value")

    def __init__(self, value: Any) -> None:
        self.value, self.seen = value, False


class CombinerPartial(Aggregator):
    """A combiner's first half, before the network: each tuple's ``init``, combined; ``zero()`` for nothing."""

    def __init__(self, agg: CombinerAggregator) -> None:
        self.agg = agg

    def init(self, batch_id: Any, collector: TridentCollector) -> _Holder:
        return _Holder(self.agg.zero())

    def aggregate(self, state: _Holder, tup: TridentTuple, collector: TridentCollector) -> None:
        state.value = self.agg.combine(state.value, self.agg.init(tup))

    def complete(self, state: _Holder, collector: TridentCollector) -> None:
        collector.emit([state.value])


class CombinerCombine(Aggregator):
    """A combiner's second half: the partial values (field 0) combined (Storm's ``CombinerAggregatorCombineImpl``)."""

    def __init__(self, agg: CombinerAggregator) -> None:
        self.agg = agg

    def init(self, batch_id: Any, collector: TridentCollector) -> _Holder:
        return _Holder(self.agg.zero())

    def aggregate(self, state: _Holder, tup: TridentTuple, collector: TridentCollector) -> None:
        if state.seen:
            state.value = self.agg.combine(state.value, tup[0])
        else:
            state.value, state.seen = tup[0], True

    def complete(self, state: _Holder, collector: TridentCollector) -> None:
        collector.emit([state.value])


class ReducerImpl(Aggregator):
    def __init__(self, agg: ReducerAggregator) -> None:
        self.agg = agg

    def init(self, batch_id: Any, collector: TridentCollector) -> _Holder:
        return _Holder(self.agg.init())

    def aggregate(self, state: _Holder, tup: TridentTuple, collector: TridentCollector) -> None:
        state.value = self.agg.reduce(state.value, tup)

    def complete(self, state: _Holder, collector: TridentCollector) -> None:
        collector.emit([state.value])


def as_aggregator(agg: Any) -> Aggregator:
    """Any of the three kinds as a general ``Aggregator``, run whole (no partial combine)."""
    if isinstance(agg, CombinerAggregator):
        return CombinerPartial(agg)
    if isinstance(agg, ReducerAggregator):
        return ReducerImpl(agg)
    if isinstance(agg, Aggregator):
        return agg
    raise TypeError(f"{type(agg).__name__} is not an Aggregator, CombinerAggregator or ReducerAggregator")


class _Capture(TridentCollector):
    def __init__(self) -> None:
        self.emitted: list[Sequence[Any]] = []

    def emit(self, values: Sequence[Any]) -> None:
        self.emitted.append(list(values))


class ChainedAggregator(Aggregator):
    """Several aggregators over one input, each on its own input fields (positions in the shared input); emits
    every combination of one emit of each (Storm's ``ChainedAggregatorImpl``)."""

    def __init__(self, aggs: list[Aggregator], inputs: list[list[int]], input_fields: list[list[str]]) -> None:
        self.aggs, self.inputs = aggs, inputs
        self.kinds = [tuple_type(f) for f in input_fields]

    def prepare(self, conf: dict, context: TridentOperationContext) -> None:
        for agg in self.aggs:
            agg.prepare(conf, context)

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        captures = [_Capture() for _ in self.aggs]
        return [captures, [agg.init(batch_id, c) for agg, c in zip(self.aggs, captures, strict=True)]]

    def aggregate(self, state: list[Any], tup: TridentTuple, collector: TridentCollector) -> None:
        captures, states = state
        for i, agg in enumerate(self.aggs):
            new = agg.aggregate(states[i], self.kinds[i](tup[j] for j in self.inputs[i]), captures[i])
            if new is not None:
                states[i] = new

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        captures, states = state
        for agg, capture, s in zip(self.aggs, captures, states, strict=True):
            agg.complete(s, capture)
        for combo in itertools.product(*(c.emitted for c in captures)):
            collector.emit([v for values in combo for v in values])

    def cleanup(self) -> None:
        for agg in self.aggs:
            agg.cleanup()


class SingleEmit(Aggregator):
    """After the batch went to one partition (``global_``, ``batch_global``): the aggregator runs there, and a
    batch with no tuple at all still gets one result, from the partition ``batch_partition`` picks (Storm's
    ``SingleEmitAggregator``)."""

    def __init__(self, agg: Aggregator, whole_batch: bool) -> None:
        self.agg, self.whole_batch = agg, whole_batch  # whole_batch: batch_global, else global_ (partition 0)

    def prepare(self, conf: dict, context: TridentOperationContext) -> None:
        self.index, self.partitions = context.partition_index, context.num_partitions
        self.agg.prepare(conf, context)

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        return [batch_id, False, None]

    def aggregate(self, state: list[Any], tup: TridentTuple, collector: TridentCollector) -> None:
        if not state[1]:
            state[1], state[2] = True, self.agg.init(state[0], collector)
        new = self.agg.aggregate(state[2], tup, collector)
        if new is not None:
            state[2] = new

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        if not state[1]:
            speaker = batch_partition(state[0], self.partitions) if self.whole_batch else 0
            if self.index != speaker:
                return
            state[2] = self.agg.init(state[0], collector)
        self.agg.complete(state[2], collector)

    def cleanup(self) -> None:
        self.agg.cleanup()


class IdentityMultiReducer(MultiReducer):
    """``merge``: every input tuple goes on as it is."""

    def init(self, collector: TridentCollector) -> None:
        return None

    def execute(self, state: Any, stream_index: int, tup: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(tup)

    def complete(self, state: Any, collector: TridentCollector) -> None:
        pass


class JoinerMultiReducer(MultiReducer):
    """``join``: each input's tuples are grouped by the join fields (first in each projection); at the batch's end
    each key emits the key, then every combination of one tuple's other fields from each input. ``outer`` inputs
    with no tuple for a key take one row of Nones."""

    def __init__(self, join_types: list[str], key_size: int, widths: list[int]) -> None:
        self.join_types, self.key_size, self.widths = join_types, key_size, widths

    def init(self, collector: TridentCollector) -> dict:
        return {}

    def execute(self, state: dict, stream_index: int, tup: TridentTuple, collector: TridentCollector) -> None:
        key = tuple(tup[: self.key_size])
        sides = state.get(key)
        if sides is None:
            sides = state[key] = [[] for _ in self.widths]
        sides[stream_index].append(tuple(tup[self.key_size :]))

    def complete(self, state: dict, collector: TridentCollector) -> None:
        for key, sides in state.items():
            rows = []
            for i, side in enumerate(sides):
                if side:
                    rows.append(side)
                elif self.join_types[i] == "outer":
                    rows.append([(None,) * self.widths[i]])
                else:
                    break
            else:
                for combo in itertools.product(*rows):
                    collector.emit([*key, *(v for part in combo for v in part)])
