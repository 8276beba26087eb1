"""``Stream``, ``GroupedStream`` and ``TridentState``: how a Trident topology is declared (Storm's ``Stream``).

Every method returns a new ``Stream`` and checks, where it is called, that the fields it names exist: a missing
one raises ``ValueError`` naming it and the fields the stream has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from squall.model.fields import Fields
from squall.model.groupings import Grouping
from squall.trident.graph import OPERATION, PARTITION, Node
from squall.trident.impl import (
    ChainedAggregator,
    CombinerCombine,
    CombinerPartial,
    SingleEmit,
    as_aggregator,
)
from squall.trident.operation import (
    Aggregator,
    CombinerAggregator,
    Filter,
    Function,
    ReducerAggregator,
)
from squall.trident.processors import (
    EachFilter,
    EachFunction,
    MapEach,
    PartitionAggregate,
    PartitionPersist,
    Project,
    StateQuery,
)
from squall.trident.state import (
    CombinerAggStateUpdater,
    MapCombinerAggStateUpdater,
    MapReducerAggStateUpdater,
    QueryFunction,
    ReducerAggStateUpdater,
    StateFactory,
    StateUpdater,
)
from squall.trident.windowing import (
    Projection,
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowConfig,
    WindowProcessor,
)

FieldsLike = Fields | Sequence[str] | str


def as_field_list(value: FieldsLike) -> Fields:
    return Fields(value) if isinstance(value, str) else Fields(*value)


def _is_fields(value: Any) -> bool:
    return isinstance(value, (Fields, list, tuple, str))


def positions(op: str, available: Fields, wanted: Fields) -> list[int]:
    """Where each of ``wanted`` is in ``available``, or ``ValueError`` naming the first missing field."""
    for name in wanted:
        if name not in available:
            raise ValueError(
                f"{op}: trying to select non-existent field {name!r} from a stream with fields {list(available)}"
            )
    return [available.index(name) for name in wanted]


def inputs(op: str, available: Fields, wanted: Fields) -> list[int] | None:
    """``positions``, or None when ``wanted`` is every field in order: the operation sees the tuple itself."""
    where = positions(op, available, wanted)
    return None if where == list(range(len(available))) else where


def _appended(op: str, base: Fields, added: Fields) -> Fields:
    clash = [f for f in added if f in base]
    if clash:
        raise ValueError(f"{op}: the output fields {clash} are already fields of the stream {list(base)}")
    return Fields(*base, *added)


class Stream:
    """A stream of tuples, in batches, with named fields. Made by a ``TridentTopology`` (its ``topology``), never
    directly."""

    def __init__(self, topology: Any, node: Node, name: str | None = None) -> None:
        self._topology, self._node, self._name = topology, node, name

    def get_output_fields(self) -> Fields:
        return self._node.fields

    @property
    def fields(self) -> Fields:
        return self._node.fields

    def _add(self, kind: str, fields: Fields, **kw: Any) -> Stream:
        node = self._topology.add_node(kind, fields, [self._node], name=self._name, **kw)
        return Stream(self._topology, node, self._name)

    def _op(self, fields: Fields, make: Any, **kw: Any) -> Stream:
        """An operation node; ``make(node_id, label)`` makes its processor."""
        stream = self._add(OPERATION, fields, **kw)
        node = stream._node
        node.processor = make(node.id, self._label(node))
        return stream

    def _label(self, node: Node) -> str:
        return f"{node.name or 'trident'} node {node.id}"

    # -- naming and parallelism --------------------------------------------------------------------
    def name(self, name: str) -> Stream:
        """Names the operations declared from here on (the bolts' ids show it)."""
        self._node.name = self._node.name or name
        return Stream(self._topology, self._node, name)

    def parallelism_hint(self, n: int) -> Stream:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"parallelism_hint: {n!r} is not a positive integer")
        self._node.parallelism = n
        return self

    # -- partition-local operations ------------------------------------------------------------------
    def each(self, *args: Any) -> Stream:
        """``each(input_fields, function, function_fields)``, ``each(function, function_fields)`` (every field in),
        ``each(input_fields, filter)`` or ``each(filter)``."""
        if args and not _is_fields(args[0]):
            args = (self.fields, *args)
        if len(args) == 2 and isinstance(args[1], Filter):
            return self._filter(as_field_list(args[0]), args[1])
        if len(args) != 3 or not isinstance(args[1], Function):
            raise TypeError("each takes (input_fields, function, function_fields) or (input_fields, filter)")
        input_fields, function, function_fields = as_field_list(args[0]), args[1], as_field_list(args[2])
        where = inputs(f"each({type(function).__name__})", self.fields, input_fields)
        out = _appended(f"each({type(function).__name__})", self.fields, function_fields)
        return self._op(
            out, lambda i, label: EachFunction(i, label, function, where, input_fields, out, function_fields)
        )

    def _filter(self, input_fields: Fields, filter: Filter) -> Stream:
        where = inputs(f"each({type(filter).__name__})", self.fields, input_fields)
        return self._op(self.fields, lambda i, label: EachFilter(i, label, filter, where, input_fields))

    def filter(self, *args: Any) -> Stream:
        """``filter(filter)`` or ``filter(input_fields, filter)``."""
        if len(args) == 1:
            return self._filter(self.fields, args[0])
        return self._filter(as_field_list(args[0]), args[1])

    def map(self, function: Any, output_fields: FieldsLike | None = None) -> Stream:
        """One tuple out per tuple in: ``function`` (a ``MapFunction`` or a callable) returns its values."""
        out = self.fields if output_fields is None else as_field_list(output_fields)
        return self._op(out, lambda i, label: MapEach(i, label, "map", function, out))

    def flat_map(self, function: Any, output_fields: FieldsLike | None = None) -> Stream:
        out = self.fields if output_fields is None else as_field_list(output_fields)
        return self._op(out, lambda i, label: MapEach(i, label, "flat_map", function, out))

    def peek(self, consumer: Any) -> Stream:
        return self._op(self.fields, lambda i, label: MapEach(i, label, "peek", consumer, self.fields))

    def project(self, fields: FieldsLike) -> Stream:
        wanted = as_field_list(fields)
        where = positions("project", self.fields, wanted)
        return self._op(wanted, lambda i, label: Project(i, label, where, wanted))

    # -- repartitioning -----------------------------------------------------------------------------
    def _partition(self, *grouping: Any) -> Stream:
        if self._node.kind == PARTITION:  # two repartitions in a row: a step between them to hold the first
            from squall.trident.builtin import TrueFilter

            return self.each(Fields(), TrueFilter())._partition(*grouping)
        return self._add(PARTITION, self.fields, grouping=tuple(grouping))

    def shuffle(self) -> Stream:
        return self._partition("shuffle")

    def local_or_shuffle(self) -> Stream:
        return self._partition("local_or_shuffle")

    def partition_by(self, fields: FieldsLike) -> Stream:
        wanted = as_field_list(fields)
        positions("partition_by", self.fields, wanted)
        return self._partition("fields", wanted)

    def broadcast(self) -> Stream:
        return self._partition("all")

    def global_(self) -> Stream:
        return self._partition("global")

    def batch_global(self) -> Stream:
        return self._partition("batch_global")

    def partition(self, grouping: Grouping) -> Stream:
        if not isinstance(grouping, Grouping):
            raise TypeError(f"partition takes a squall Grouping, got {type(grouping).__name__}")
        return self._partition("custom", grouping)

    def identity_partition(self) -> Stream:
        return self._partition("identity")

    # -- aggregation --------------------------------------------------------------------------------
    def group_by(self, fields: FieldsLike) -> GroupedStream:
        wanted = as_field_list(fields)
        positions("group_by", self.fields, wanted)
        return GroupedStream(self, wanted)

    def partition_aggregate(self, *args: Any) -> Stream:
        """``partition_aggregate([input_fields,] aggregator, function_fields)``: over each partition's part of
        the batch; ``function_fields`` replace the stream's fields."""
        input_fields, agg, function_fields = _agg_args(self.fields, args)
        return self._partition_aggregate((), input_fields, as_aggregator(agg), function_fields)

    def _partition_aggregate(self, group: Fields, input_fields: Fields, agg: Aggregator, fn_fields: Fields) -> Stream:
        where = inputs("partition_aggregate", self.fields, input_fields)
        group_at = positions("group_by", self.fields, group)
        out = Fields(*group, *fn_fields)
        return self._op(out, lambda i, label: PartitionAggregate(i, label, agg, where, input_fields, group_at, out))

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self, None)

    def aggregate(self, *args: Any) -> Stream:
        """``aggregate([input_fields,] aggregator, function_fields)``: over the whole batch, one result. A
        ``CombinerAggregator`` is combined in each partition before the batch goes to one."""
        input_fields, agg, function_fields = _agg_args(self.fields, args)
        return self.chained_agg().aggregate(input_fields, agg, function_fields).chain_end()

    def persistent_aggregate(self, factory: StateFactory, *args: Any) -> TridentState:
        """``persistent_aggregate(state_factory, [input_fields,] aggregator, function_fields)``: the whole stream's
        one value, kept in the state, updated once per batch."""
        input_fields, agg, function_fields = _agg_args(self.fields, args, op="persistent_aggregate")
        if isinstance(agg, CombinerAggregator):
            combined = (
                ChainedAggregatorDeclarer(self, None, whole_batch=False)
                .aggregate(input_fields, agg, function_fields)
                .chain_end()
            )
            return combined.partition_persist(factory, function_fields, CombinerAggStateUpdater(agg), function_fields)
        if isinstance(agg, ReducerAggregator):
            return self.global_().partition_persist(factory, input_fields, ReducerAggStateUpdater(agg), function_fields)
        raise TypeError("persistent_aggregate takes a CombinerAggregator or a ReducerAggregator")

    def partition_persist(
        self,
        factory: StateFactory,
        input_fields: FieldsLike,
        updater: StateUpdater,
        function_fields: FieldsLike | None = None,
    ) -> TridentState:
        """Each batch's tuples of each partition, handed to ``updater`` with the partition's state, in the
        batch's commit phase."""
        wanted = as_field_list(input_fields)
        out = Fields() if function_fields is None else as_field_list(function_fields)
        where = inputs("partition_persist", self.fields, wanted)
        state_id = self._topology.state_id()
        stream = self._op(
            out,
            lambda i, label: PartitionPersist(i, label, state_id, factory, updater, where, wanted, out),
            committer=True,
        )
        return TridentState(self._topology, stream._node, state_id, factory)

    def state_query(
        self, state: TridentState, input_fields: FieldsLike, function: QueryFunction, function_fields: FieldsLike
    ) -> Stream:
        """Reads ``state`` for each tuple (``function.batch_retrieve`` once per batch and partition, then
        ``function.execute`` per tuple, whose emits are appended). The query runs on the tasks that hold the state:
        partition the stream as the state is (``group_by`` the same fields) to find each key where it is."""
        if not isinstance(state, TridentState):
            raise TypeError(f"state_query takes a TridentState, got {type(state).__name__}")
        wanted, fn_fields = as_field_list(input_fields), as_field_list(function_fields)
        op = f"state_query({type(function).__name__})"
        where = inputs(op, self.fields, wanted)
        out = _appended(op, self.fields, fn_fields)
        return self._op(
            out,
            lambda i, label: StateQuery(
                i,
                label,
                state.state_id,
                state.factory,
                function,
                where,
                wanted,
                out,
                fn_fields,
                state._node is not None,
            ),
            colocate=state._node,
        )

    def _extreme(self, key: Any, least: bool, op: str) -> Stream:
        """Each partition's tuple of the least (or greatest) key, per batch: Storm's ``minBy``/``maxBy``, which
        are partition aggregates."""
        from squall.trident.builtin import Extreme

        if isinstance(key, str):
            key = positions(op, self.fields, Fields(key))[0]
        return self.partition_aggregate(self.fields, Extreme(key, least), self.fields)

    def min_by(self, field: str) -> Stream:
        """Each partition's tuple with the least ``field``, per batch."""
        return self._extreme(field, True, "min_by")

    def max_by(self, field: str) -> Stream:
        return self._extreme(field, False, "max_by")

    def min(self, key: Any) -> Stream:
        """Each partition's tuple with the least ``key(tuple)``, per batch."""
        return self._extreme(key, True, "min")

    def max(self, key: Any) -> Stream:
        return self._extreme(key, False, "max")

    # -- windows ------------------------------------------------------------------------------------
    def window(
        self, config: WindowConfig, store_factory: Any, input_fields: FieldsLike, aggregator: Any, fields: FieldsLike
    ) -> Stream:
        """``aggregator`` over each window of each partition's tuples (``TumblingCountWindow.of(n)``,
        ``SlidingCountWindow.of(n, slide)``, ``TumblingDurationWindow.of(d)``, ``SlidingDurationWindow.of(d, s)``);
        the stream carries each window's results, in the batch during which it fired."""
        wanted, out = as_field_list(input_fields), as_field_list(fields)
        where = positions("window", self.fields, wanted)
        agg = as_aggregator(aggregator)
        return self._op(
            out,
            lambda i, label: WindowProcessor(i, label, config, store_factory, agg, Projection(where, wanted), out),
            committer=True,
        )

    def tumbling_window(
        self, size: Any, store_factory: Any, input_fields: FieldsLike, aggregator: Any, fields: FieldsLike
    ) -> Stream:
        """Every ``size`` tuples (an int) or every ``size`` of time (a ``Duration``), the window since the last."""
        config = TumblingCountWindow.of(size) if isinstance(size, int) else TumblingDurationWindow.of(size)
        return self.window(config, store_factory, input_fields, aggregator, fields)

    def sliding_window(
        self, size: Any, slide: Any, store_factory: Any, input_fields: FieldsLike, aggregator: Any, fields: FieldsLike
    ) -> Stream:
        """Every ``slide`` tuples (or of time), the last ``size`` tuples (or of time)."""
        if isinstance(size, int):
            config = SlidingCountWindow.of(size, slide)
        else:
            config = SlidingDurationWindow.of(size, slide)
        return self.window(config, store_factory, input_fields, aggregator, fields)

    def apply_assembly(self, assembly: Any) -> Stream:
        """``assembly.apply(stream)``: a few steps packaged as one (``FirstN``)."""
        return assembly.apply(self)

    def to_stream(self) -> Stream:
        return self


def _agg_args(fields: Fields, args: tuple, op: str = "aggregate") -> tuple[Fields, Any, Fields]:
    if len(args) == 2:
        return fields, args[0], as_field_list(args[1])
    if len(args) == 3:
        return as_field_list(args[0]), args[1], as_field_list(args[2])
    raise TypeError(f"{op} takes ([input_fields,] aggregator, function_fields)")


class ChainedAggregatorDeclarer:
    """``chained_agg()``: several aggregators over one batch, emitted side by side, then ``chain_end()``."""

    def __init__(self, stream: Stream, group: Fields | None, whole_batch: bool = True) -> None:
        self.stream, self.group, self.whole_batch = stream, group, whole_batch
        self.aggs: list[tuple[Fields, Any, Fields]] = []
        self.partition_only = False

    def _check(self, op: str, input_fields: Fields) -> None:
        positions(op, self.stream.fields, input_fields)

    def aggregate(self, *args: Any) -> ChainedAggregatorDeclarer:
        input_fields, agg, function_fields = _agg_args(self.stream.fields, args)
        self._check("aggregate", input_fields)
        self.aggs.append((input_fields, agg, function_fields))
        return self

    def partition_aggregate(self, *args: Any) -> ChainedAggregatorDeclarer:
        self.partition_only = True
        return self.aggregate(*args)

    def chain_end(self) -> Stream:
        if not self.aggs:
            raise ValueError("chain_end: no aggregator was declared")
        stream, group = self.stream, self.group or Fields()
        out_fields = Fields(*[f for _, _, fn in self.aggs for f in fn])
        if self.partition_only:
            return stream._partition_aggregate(
                group, *self._chain(stream.fields, [as_aggregator(a) for _, a, _ in self.aggs])
            )
        if all(isinstance(a, CombinerAggregator) for _, a, _ in self.aggs):
            # each partition combines its part first; only the partial values cross the network
            partial = stream._partition_aggregate(
                group, *self._chain(stream.fields, [CombinerPartial(a) for _, a, _ in self.aggs])
            )
            moved = self._move(partial)
            finals = [CombinerCombine(a) for _, a, _ in self.aggs]
            if len(finals) == 1:
                return moved._partition_aggregate(group, out_fields, self._single(finals[0]), out_fields)
            inputs = [Fields(*fn) for _, _, fn in self.aggs]
            chained = ChainedAggregator(
                finals, [positions("aggregate", out_fields, f) for f in inputs], [list(f) for f in inputs]
            )
            return moved._partition_aggregate(group, out_fields, self._single(chained), out_fields)
        moved = self._move(stream)
        aggs = [as_aggregator(a) for _, a, _ in self.aggs]
        needed, chained, _ = self._chain(moved.fields, aggs)
        return moved._partition_aggregate(group, needed, self._single(chained), out_fields)

    def _chain(self, fields: Fields, aggs: list[Aggregator]) -> tuple[Fields, Aggregator, Fields]:
        """The aggregators over ``fields`` as one, with their own input fields (positions in ``fields``)."""
        out_fields = Fields(*[f for _, _, fn in self.aggs for f in fn])
        if len(aggs) == 1:
            return self.aggs[0][0], aggs[0], out_fields
        needed = Fields(*dict.fromkeys(f for inp, _, _ in self.aggs for f in inp))
        where = [positions("aggregate", needed, inp) for inp, _, _ in self.aggs]
        return needed, ChainedAggregator(aggs, where, [list(inp) for inp, _, _ in self.aggs]), out_fields

    def _move(self, stream: Stream) -> Stream:
        """The batch (or each group) to one partition."""
        if self.group:
            return stream.partition_by(self.group)
        return stream.batch_global() if self.whole_batch else stream.global_()

    def _single(self, agg: Aggregator) -> Aggregator:
        return agg if self.group else SingleEmit(agg, self.whole_batch)


class GroupedStream:
    """``group_by(fields)``: aggregations then run per group, and the group's fields lead their output."""

    def __init__(self, stream: Stream, group: Fields) -> None:
        self.stream, self.group = stream, group

    def get_group_fields(self) -> Fields:
        return self.group

    def name(self, name: str) -> GroupedStream:
        return GroupedStream(self.stream.name(name), self.group)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self.stream, self.group)

    def aggregate(self, *args: Any) -> Stream:
        input_fields, agg, function_fields = _agg_args(self.stream.fields, args)
        return self.chained_agg().aggregate(input_fields, agg, function_fields).chain_end()

    def partition_aggregate(self, *args: Any) -> Stream:
        input_fields, agg, function_fields = _agg_args(self.stream.fields, args)
        return self.stream._partition_aggregate(self.group, input_fields, as_aggregator(agg), function_fields)

    def persistent_aggregate(self, factory: StateFactory, *args: Any) -> TridentState:
        """Each group's value, kept in the (map) state under the group's fields, updated once per batch."""
        input_fields, agg, function_fields = _agg_args(self.stream.fields, args, op="persistent_aggregate")
        positions("persistent_aggregate", self.stream.fields, input_fields)
        group, out = self.group, Fields(*self.group, *function_fields)
        if isinstance(agg, CombinerAggregator):
            combined = self.aggregate(input_fields, agg, function_fields)
            return combined.partition_persist(factory, out, MapCombinerAggStateUpdater(agg, len(group)), out)
        if isinstance(agg, ReducerAggregator):
            moved = self.stream.partition_by(group)
            wanted = Fields(*group, *[f for f in input_fields if f not in group])
            return moved.partition_persist(factory, wanted, MapReducerAggStateUpdater(agg, len(group)), out)
        raise TypeError("persistent_aggregate takes a CombinerAggregator or a ReducerAggregator")

    def state_query(
        self, state: TridentState, input_fields: FieldsLike, function: QueryFunction, function_fields: FieldsLike
    ) -> Stream:
        """The query, with each group on the task that holds its key in ``state``."""
        return self.stream.partition_by(self.group).state_query(state, input_fields, function, function_fields)

    def each(self, *args: Any) -> GroupedStream:
        return GroupedStream(self.stream.each(*args), self.group)

    def to_stream(self) -> Stream:
        return self.stream

    def get_output_fields(self) -> Fields:
        return self.stream.fields


class TridentState:
    """What ``persistent_aggregate`` and ``partition_persist`` return (and ``new_static_state``, with no stream):
    the state, for ``state_query``, and the stream of its new values."""

    def __init__(self, topology: Any, node: Node | None, state_id: str, factory: StateFactory) -> None:
        self._topology, self._node, self.state_id, self.factory = topology, node, state_id, factory

    def new_values_stream(self) -> Stream:
        if self._node is None:
            raise ValueError("a static state has no stream of new values")
        return Stream(self._topology, self._node, self._node.name)

    def parallelism_hint(self, n: int) -> TridentState:
        if self._node is None:
            raise ValueError("a static state takes the parallelism of the streams that query it")
        Stream(self._topology, self._node).parallelism_hint(n)
        return self
