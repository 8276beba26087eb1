"""What runs inside a Trident bolt: one processor per node of its group, wired to its children.

A processor gets each input tuple (``receive``) and the batch's end (``finish_batch``), and passes what it makes
to its children: other processors of the group, or ``Bridge``s, which emit on the bolt's streams to other bolts.
Per-batch values live in the batch's ``BatchContext``; a processor's attributes are the task's and outlive the
batch. A task's processors are called for one batch at a time (``TaskPlan``'s lock), as Storm calls them on one
executor thread.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall.model.attempt import TransactionAttempt
from squall.transactional.requests import RequestAttempt
from squall.trident.operation import (
    Aggregator,
    Consumer,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    MultiReducer,
    TridentCollector,
    TridentOperationContext,
)
from squall.trident.state import READ_COMMITTED, State, StateFactory, StateUpdater
from squall.trident.tuple import TridentTuple, tuple_type

log = logging.getLogger("squall.trident")

Receiver = tuple["Processor", int]  # a child and which of its inputs this is


def batch_partition(batch_id: Any, partitions: int) -> int:
    """The partition a whole batch goes to (``batch_global``), and the one that speaks for an empty batch."""
    key = batch_id.txid if isinstance(batch_id, TransactionAttempt) else batch_id
    return int(key) % partitions


@dataclass
class BatchContext:
    """One batch's values in one task: each processor's slot, and the try's collector."""

    batch_id: Any
    collector: Any  # the try's OutputCollector
    slots: dict[int, Any] = field(default_factory=dict)

    @property
    def txid(self) -> int | None:
        return self.batch_id.txid if isinstance(self.batch_id, TransactionAttempt) else None


@dataclass
class TaskEnv:
    """What a processor learns when its task prepares it."""

    conf: dict[str, Any]
    partition_index: int
    num_partitions: int
    component: str
    state: Callable[[str, StateFactory], State]  # the task's state for a state id, made once
    state_lock: Callable[[str], Any]  # held while the state is updated or read
    committed: Callable[[], int]  # the latest txid this worker knows committed
    tasks_of: Callable[[str], list[int]]  # a component's task ids

    def operation_context(self) -> TridentOperationContext:
        return TridentOperationContext(self.partition_index, self.num_partitions, self.component, self.conf)


def check_arity(where: str, values: Sequence[Any], fields: Sequence[str]) -> None:
    if len(values) != len(fields):
        raise ValueError(f"{where} emitted {len(values)} values {list(values)!r} for the fields {list(fields)}")


def _same(tup: TridentTuple) -> TridentTuple:
    return tup


def _key_of(positions: Sequence[int]) -> Callable[[tuple], tuple]:
    if len(positions) == 1:
        (i,) = positions
        return lambda tup: (tup[i],)
    return lambda tup: tuple(tup[i] for i in positions)


def _projection(positions: Sequence[int] | None, fields: Sequence[str]) -> Callable[[tuple], TridentTuple]:
    """What an operation sees of a tuple: its input fields (``positions`` None: all of them, as they are)."""
    if positions is None:
        return _same
    kind = tuple_type(fields)
    if len(positions) == 1:
        (i,) = positions
        return lambda tup: kind((tup[i],))
    return lambda tup: kind(tup[i] for i in positions)


class Processor:
    """A node of a Trident bolt's group."""

    def __init__(self, node_id: int, label: str) -> None:
        self.node_id, self.label = node_id, label
        self.children: list[Receiver] = []

    def prepare(self, env: TaskEnv) -> None:
        pass

    def start_batch(self, ctx: BatchContext) -> None:
        pass

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        raise NotImplementedError

    def receive_rows(self, ctx: BatchContext, index: int, kind: type, skip: int, rows: Sequence[tuple]) -> None:
        """Several rows of one input stream, as tuples of type ``kind`` past their first ``skip`` values."""
        for row in rows:
            self.receive(ctx, index, kind(row[skip:] if skip else row))

    def finish_batch(self, ctx: BatchContext) -> None:
        pass

    def cleanup(self) -> None:
        pass

    def pass_on(self, ctx: BatchContext, tup: TridentTuple) -> None:
        for child, index in self.children:
            child.receive(ctx, index, tup)


class _Emitting(TridentCollector):
    """The collector a processor hands its operation: each emit goes to the processor's children."""

    def __init__(self, processor: Processor, make: Callable[[Sequence[Any]], TridentTuple]) -> None:
        self.processor, self.make = processor, make
        self.ctx: BatchContext | None = None

    def emit(self, values: Sequence[Any]) -> None:
        self.processor.pass_on(self.ctx, self.make(values))

    def report_error(self, error: BaseException) -> None:
        log.error("%s: %s", self.processor.label, error, exc_info=error)


class _Fresh(_Emitting):
    """Each emit is a new tuple of ``out_fields`` (a persist's updater, a multi-reducer)."""

    def __init__(self, processor: Processor, out_fields: Sequence[str]) -> None:
        self.out_fields, self.kind = list(out_fields), tuple_type(out_fields)
        super().__init__(processor, self._make)

    def _make(self, values: Sequence[Any]) -> TridentTuple:
        check_arity(self.processor.label, values, self.out_fields)
        return self.kind(values)


class _Appending(_Emitting):
    """Each emit's values follow the input tuple's (``each``)."""

    def __init__(self, processor: Processor, out_fields: Sequence[str], function_fields: Sequence[str]) -> None:
        self.kind, self.function_fields = tuple_type(out_fields), list(function_fields)
        self.width = len(function_fields)
        super().__init__(processor, self._append)
        self.input: tuple = ()

    def _append(self, values: Sequence[Any]) -> TridentTuple:
        if len(values) != self.width:
            check_arity(self.processor.label, values, self.function_fields)
        return self.kind(self.input + tuple(values))


class EachFunction(Processor):
    def __init__(self, node_id: int, label: str, function: Function, positions, input_fields, out_fields, fn_fields):
        super().__init__(node_id, label)
        self.function = function
        self.project = _projection(positions, input_fields)
        self.collector = _Appending(self, out_fields, fn_fields)
        self.base = len(out_fields) - len(fn_fields)  # where the function's own fields begin

    def prepare(self, env: TaskEnv) -> None:
        self.function.prepare(env.conf, env.operation_context())

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        collector = self.collector
        collector.ctx, collector.input = ctx, tup
        self.function.execute(self.project(tup), collector)

    def cleanup(self) -> None:
        self.function.cleanup()


class EachFilter(Processor):
    def __init__(self, node_id: int, label: str, filter: Filter, positions, input_fields) -> None:
        super().__init__(node_id, label)
        self.filter = filter
        self.project = _projection(positions, input_fields)

    def prepare(self, env: TaskEnv) -> None:
        self.filter.prepare(env.conf, env.operation_context())

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        if self.filter.is_keep(self.project(tup)):
            self.pass_on(ctx, tup)

    def cleanup(self) -> None:
        self.filter.cleanup()


class MapEach(Processor):
    """``map`` (one out per in), ``flat_map`` (any number), ``peek`` (the input, after the consumer saw it)."""

    def __init__(self, node_id: int, label: str, kind: str, function: Any, out_fields: Sequence[str]) -> None:
        super().__init__(node_id, label)
        self.kind, self.function, self.out_fields = kind, function, list(out_fields)
        self.make = tuple_type(out_fields)

    def prepare(self, env: TaskEnv) -> None:
        prepare = getattr(self.function, "prepare", None)
        if prepare is not None:
            prepare(env.conf, env.operation_context())

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        if self.kind == "peek":
            _call(self.function, Consumer, "accept", tup)
            self.pass_on(ctx, tup)
        elif self.kind == "map":
            values = _call(self.function, MapFunction, "execute", tup)
            check_arity(self.label, values, self.out_fields)
            self.pass_on(ctx, self.make(values))
        else:
            for values in _call(self.function, FlatMapFunction, "execute", tup):
                check_arity(self.label, values, self.out_fields)
                self.pass_on(ctx, self.make(values))


def _call(function: Any, kind: type, method: str, tup: TridentTuple) -> Any:
    """A ``MapFunction``/``FlatMapFunction``/``Consumer``, or a plain callable in its place."""
    return getattr(function, method)(tup) if isinstance(function, kind) else function(tup)


class Project(Processor):
    def __init__(self, node_id: int, label: str, positions: Sequence[int], fields: Sequence[str]) -> None:
        super().__init__(node_id, label)
        self.project = _projection(positions, fields)

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        self.pass_on(ctx, self.project(tup))


class PartitionAggregate(Processor):
    """An aggregator over this task's part of the batch; grouped, one aggregation per group."""

    def __init__(self, node_id, label, agg: Aggregator, positions, input_fields, group_positions, out_fields):
        super().__init__(node_id, label)
        self.agg, self.group_size = agg, len(group_positions)
        self.group_key = _key_of(group_positions)
        self.positions, self.group_positions = positions, list(group_positions)
        self.project = _projection(positions, input_fields)
        self.out_fields = list(out_fields)
        self.fn_fields = self.out_fields[self.group_size :]
        self.collector = _Emitting(self, self._fresh)
        self.group: tuple = ()

    def _fresh(self, values: Sequence[Any]) -> TridentTuple:
        check_arity(self.label, values, self.fn_fields)
        return tuple_type(self.out_fields)(self.group + tuple(values))

    def prepare(self, env: TaskEnv) -> None:
        self.agg.prepare(env.conf, env.operation_context())

    def start_batch(self, ctx: BatchContext) -> None:
        self.collector.ctx, self.group = ctx, ()
        ctx.slots[self.node_id] = {} if self.group_size else self.agg.init(ctx.batch_id, self.collector)

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        collector, agg = self.collector, self.agg
        collector.ctx = ctx
        if self.group_size:
            key = self.group_key(tup)
            groups = ctx.slots[self.node_id]
            if key not in groups:
                self.group = key
                groups[key] = agg.init(ctx.batch_id, collector)
            self.group = key
            new = agg.aggregate(groups[key], self.project(tup), collector)
            if new is not None:
                groups[key] = new
        else:
            self.group = ()
            new = agg.aggregate(ctx.slots[self.node_id], self.project(tup), collector)
            if new is not None:
                ctx.slots[self.node_id] = new

    def finish_batch(self, ctx: BatchContext) -> None:
        collector = self.collector
        collector.ctx = ctx
        if self.group_size:
            for key, state in ctx.slots.pop(self.node_id).items():
                self.group = key
                self.agg.complete(state, collector)
        else:
            self.group = ()
            self.agg.complete(ctx.slots.pop(self.node_id), collector)

    def cleanup(self) -> None:
        self.agg.cleanup()


class PartitionPersist(Processor):
    """Buffers the batch's tuples; at the commit, in txid order: ``begin_commit``, the updater, ``commit``."""

    def __init__(
        self,
        node_id,
        label,
        state_id: str,
        factory: StateFactory,
        updater: StateUpdater,
        positions,
        input_fields,
        out_fields,
    ) -> None:
        super().__init__(node_id, label)
        self.state_id, self.factory, self.updater = state_id, factory, updater
        self.project = _projection(positions, input_fields)
        self.out_fields = list(out_fields)
        self.collector = _Fresh(self, out_fields)

    def prepare(self, env: TaskEnv) -> None:
        self.state = env.state(self.state_id, self.factory)
        self.state_lock = env.state_lock(self.state_id)
        self.updater.prepare(env.conf, env.operation_context())

    def start_batch(self, ctx: BatchContext) -> None:
        ctx.slots[self.node_id] = []

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        ctx.slots[self.node_id].append(self.project(tup))

    def finish_batch(self, ctx: BatchContext) -> None:
        tuples = ctx.slots.pop(self.node_id)
        if not tuples:
            return
        txid = ctx.txid
        self.collector.ctx = ctx
        state = self.state
        with self.state_lock:
            state.begin_commit(txid)
            try:
                self.updater.update_state(state, tuples, self.collector)
            except BaseException:
                abort = getattr(state, "abort_commit", None)  # a state of the user's may not have it
                if abort is not None:
                    abort(txid)
                raise
            state.commit(txid)

    def cleanup(self) -> None:
        self.updater.cleanup()


class StateQuery(Processor):
    """Buffers the batch's tuples; at its end, one ``batch_retrieve`` for all of them (under the state's lock),
    then ``execute`` per tuple, whose emits are appended to it."""

    def __init__(
        self,
        node_id,
        label,
        state_id: str,
        factory: StateFactory,
        function,
        positions,
        input_fields,
        out_fields,
        fn_fields,
        committed_reads: bool = True,
    ) -> None:
        """``committed_reads``: the state is this topology's (a request reads what its committed txids left); a
        static state's txids, if it has any, are not this topology's."""
        super().__init__(node_id, label)
        self.state_id, self.factory, self.function = state_id, factory, function
        self.committed_reads = committed_reads
        self.project = _projection(positions, input_fields)
        self.collector = _Appending(self, out_fields, fn_fields)

    def prepare(self, env: TaskEnv) -> None:
        self.state = env.state(self.state_id, self.factory)
        self.state_lock = env.state_lock(self.state_id)
        self.known_committed = env.committed
        self.function.prepare(env.conf, env.operation_context())

    def start_batch(self, ctx: BatchContext) -> None:
        ctx.slots[self.node_id] = []

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        ctx.slots[self.node_id].append(tup)

    def _limit(self, batch: Any) -> int | None:
        """A request's read of this topology's state: the latest txid known committed, when it began or since."""
        if not self.committed_reads or not isinstance(batch, RequestAttempt):
            return None
        return max(batch.committed, self.known_committed())

    def finish_batch(self, ctx: BatchContext) -> None:
        tuples = ctx.slots.pop(self.node_id)
        if not tuples:
            return
        args = [self.project(t) for t in tuples]
        with self.state_lock:
            limit = READ_COMMITTED.set(self._limit(ctx.batch_id))
            try:
                results = self.function.batch_retrieve(self.state, args)
            finally:
                READ_COMMITTED.reset(limit)
        if len(results) != len(args):
            raise ValueError(f"{self.label}: batch_retrieve gave {len(results)} results for {len(args)} tuples")
        collector = self.collector
        collector.ctx = ctx
        for tup, arg, result in zip(tuples, args, results, strict=True):
            collector.input = tup
            self.function.execute(arg, result, collector)

    def cleanup(self) -> None:
        self.function.cleanup()


class Results(Processor):
    """A DRPC stream's last step: what reaches it is the request's result, reported to the driver."""

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        ctx.collector.captured.append(list(tup))


class _Counting(TridentCollector):
    """A function's emits added up by key, as a grouped ``Count`` or ``Sum`` on its own fields would."""

    def __init__(self, label: str, fn_fields: Sequence[str], key_at: list[int], value_at: int | None) -> None:
        self.label, self.fn_fields, self.width = label, list(fn_fields), len(fn_fields)
        self.key_at, self.value_at, self.at = key_at, value_at, key_at[0]
        self.counts: defaultdict[Any, Any] = defaultdict(int)

    def emit(self, values: Sequence[Any]) -> None:
        if len(values) != self.width:
            check_arity(self.label, values, self.fn_fields)
        key = tuple(values[i] for i in self.key_at)
        self.counts[key] += 1 if self.value_at is None else values[self.value_at]

    def report_error(self, error: BaseException) -> None:
        log.error("%s: %s", self.label, error, exc_info=error)


class _CountingOne(_Counting):
    """One key field, counted: a dict add per emit."""

    def emit(self, values: Sequence[Any]) -> None:
        if len(values) != self.width:
            check_arity(self.label, values, self.fn_fields)
        self.counts[values[self.at]] += 1


class _SummingOne(_Counting):
    def emit(self, values: Sequence[Any]) -> None:
        if len(values) != self.width:
            check_arity(self.label, values, self.fn_fields)
        self.counts[values[self.at]] += values[self.value_at]


class FusedCount(Processor):
    """``each(function)`` straight into a grouped ``Count`` (or ``Sum``) over the function's own fields, on the
    same partitions: the function's emits are added up in a dict, with no tuple made per emit. It passes on what
    the two would: each group's fields and its partial value, once per batch."""

    def __init__(self, each: EachFunction, agg: PartitionAggregate, key_at: list[int], value_at: int | None) -> None:
        super().__init__(agg.node_id, f"{each.label} and {agg.label}")
        self.each, self.agg = each, agg
        self.function, self.project = each.function, each.project
        kind = _Counting if len(key_at) > 1 else _CountingOne if value_at is None else _SummingOne
        self.collector = kind(each.label, each.collector.function_fields, key_at, value_at)
        self.make = tuple_type(agg.out_fields)
        self.single = len(key_at) == 1

    def prepare(self, env: TaskEnv) -> None:
        self.each.prepare(env)
        self.agg.prepare(env)

    def start_batch(self, ctx: BatchContext) -> None:
        ctx.slots[self.node_id] = defaultdict(int)

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        self.collector.counts = ctx.slots[self.node_id]
        self.function.execute(self.project(tup), self.collector)

    def receive_rows(self, ctx: BatchContext, index: int, kind: type, skip: int, rows: Sequence[tuple]) -> None:
        collector, execute, project = self.collector, self.function.execute, self.project
        collector.counts = ctx.slots[self.node_id]
        if project is _same:
            if skip:
                for row in rows:
                    execute(kind(row[skip:]), collector)
            else:
                for row in rows:
                    execute(kind(row), collector)
        else:
            for row in rows:
                execute(project(kind(row[skip:] if skip else row)), collector)

    def finish_batch(self, ctx: BatchContext) -> None:
        make, children = self.make, self.children
        for key, value in ctx.slots.pop(self.node_id).items():
            out = make((key, value)) if self.single else make((*key, value))
            for child, index in children:
                child.receive(ctx, index, out)

    def cleanup(self) -> None:
        self.each.cleanup()
        self.agg.cleanup()


class MultiReduce(Processor):
    """Several inputs into one ``MultiReducer`` (``merge``, ``join``)."""

    def __init__(self, node_id, label, reducer: MultiReducer, projections, out_fields) -> None:
        super().__init__(node_id, label)
        self.reducer = reducer
        self.projections = [_projection(p, f) for p, f in projections]
        self.out_fields = list(out_fields)
        self.collector = _Fresh(self, out_fields)

    def prepare(self, env: TaskEnv) -> None:
        self.reducer.prepare(env.conf, env.operation_context())

    def start_batch(self, ctx: BatchContext) -> None:
        self.collector.ctx = ctx
        ctx.slots[self.node_id] = self.reducer.init(self.collector)

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        self.collector.ctx = ctx
        new = self.reducer.execute(ctx.slots[self.node_id], index, self.projections[index](tup), self.collector)
        if new is not None:
            ctx.slots[self.node_id] = new

    def finish_batch(self, ctx: BatchContext) -> None:
        self.collector.ctx = ctx
        self.reducer.complete(ctx.slots.pop(self.node_id), self.collector)

    def cleanup(self) -> None:
        self.reducer.cleanup()


class Bridge(Processor):
    """Emits on one of the bolt's streams, to the bolt that reads it. ``mode``: ``"route"`` (the subscription's
    grouping picks), ``"same"`` (the reading task of this task's index) or ``"batch"`` (the batch's task)."""

    def __init__(self, node_id: int, label: str, stream: str, mode: str, reader: str) -> None:
        super().__init__(node_id, label)
        self.stream, self.mode, self.reader = stream, mode, reader

    def prepare(self, env: TaskEnv) -> None:
        self.targets = env.tasks_of(self.reader)
        self.index = env.partition_index

    def receive(self, ctx: BatchContext, index: int, tup: TridentTuple) -> None:
        values = tuple(tup)
        if self.mode == "route":
            ctx.collector.emit(values, stream=self.stream)
        elif self.mode == "same":
            ctx.collector.emit_direct(self.targets[self.index], values, stream=self.stream)
        else:
            target = self.targets[batch_partition(ctx.batch_id, len(self.targets))]
            ctx.collector.emit_direct(target, values, stream=self.stream)


def chained_product(emitted: list[list[Sequence[Any]]]) -> list[list[Any]]:
    """What several aggregators emitted for one group, as Storm's ``ChainedAggregatorImpl`` joins it: every
    combination of one emit from each."""
    return [list(itertools.chain.from_iterable(combo)) for combo in itertools.product(*emitted)]
