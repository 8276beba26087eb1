"""The operations a Trident stream runs: Storm's ``org.apache.storm.trident.operation``, in snake case.

When each method is called, and on which thread:

* ``prepare(conf, context)`` once per task of the bolt that runs the operation, and per worker generation (a
  relaunched worker prepares again), before its first tuple; ``cleanup()`` when the task ends.
* The per-tuple and per-batch methods (``execute``, ``is_keep``, ``aggregate``, ``complete``, ...) are called on
  the thread of the batch being processed. Several batches may be in flight on one worker, but squall calls a
  task's operations for one batch at a time (a per-task lock), so an operation's own attributes need no lock.
  Another task's instance is another object.
* Anything may block, at the price of holding up that task's other batches.
* A raised exception (``FailedException`` or any other) fails the batch: every batch from its txid on is emitted
  again, and the state updates of a failed batch are never committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall.model.fields import Fields
from squall.trident.tuple import TridentTuple


class TridentCollector:
    """What an operation emits through: ``emit(values)`` appends a tuple to the operation's output."""

    def emit(self, values: Sequence[Any]) -> None:
        raise NotImplementedError

    def report_error(self, error: BaseException) -> None:
        """Log ``error`` against the task; the batch goes on."""
        raise NotImplementedError

    def flush(self) -> None:
        """Nothing to do: what is emitted goes on at the end of the call."""


@dataclass
class TridentOperationContext:
    """What ``prepare`` learns of where the operation runs."""

    partition_index: int
    num_partitions: int
    component_id: str
    conf: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def get_partition_index(self) -> int:
        return self.partition_index

    def num_partitions_of(self) -> int:
        return self.num_partitions

    def make_projection_factory(self, fields: Sequence[str]) -> Fields:
        return Fields(*fields)


class Operation:
    def prepare(self, conf: dict[str, Any], context: TridentOperationContext) -> None:
        """Called once per task, before its first tuple."""

    def cleanup(self) -> None:
        """Called once when the task ends."""


class BaseOperation(Operation):
    pass


class Function(Operation):
    """``each(input_fields, function, function_fields)``: each emitted list of values is appended to the input
    tuple (so it must have one value per function field); an input for which nothing is emitted is dropped."""

    def execute(self, tup: TridentTuple, collector: TridentCollector) -> None:
        raise NotImplementedError


class BaseFunction(Function):
    pass


class Filter(Operation):
    """``each(input_fields, filter)`` / ``filter(filter)``: keeps the tuples for which ``is_keep`` is true."""

    def is_keep(self, tup: TridentTuple) -> bool:
        raise NotImplementedError


class BaseFilter(Filter):
    pass


class Aggregator(Operation):
    """The general aggregator: ``init`` starts a batch's (or a group's) aggregation, ``aggregate`` takes each tuple,
    ``complete`` emits. Anything may be emitted from each of the three."""

    def init(self, batch_id: Any, collector: TridentCollector) -> Any:
        raise NotImplementedError

    def aggregate(self, state: Any, tup: TridentTuple, collector: TridentCollector) -> Any:
        """Returns nothing (``state`` is changed in place) or the new state."""
        raise NotImplementedError

    def complete(self, state: Any, collector: TridentCollector) -> None:
        raise NotImplementedError


class BaseAggregator(Aggregator):
    pass


class CombinerAggregator:
    """``init(tup)`` maps one tuple to a value, ``combine`` joins two values, ``zero()`` is the value of nothing.
    squall combines each task's values of a batch before they cross the network, as Storm does."""

    def init(self, tup: TridentTuple) -> Any:
        raise NotImplementedError

    def combine(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def zero(self) -> Any:
        raise NotImplementedError


class ReducerAggregator:
    """``init()`` is the starting value, ``reduce(curr, tup)`` folds one tuple in."""

    def init(self) -> Any:
        raise NotImplementedError

    def reduce(self, curr: Any, tup: TridentTuple) -> Any:
        raise NotImplementedError


class MapFunction:
    """``map(function[, fields])``: one tuple in, one list of values out."""

    def execute(self, tup: TridentTuple) -> Sequence[Any]:
        raise NotImplementedError


class FlatMapFunction:
    """``flat_map(function[, fields])``: one tuple in, any number of lists of values out."""

    def execute(self, tup: TridentTuple) -> Iterable[Sequence[Any]]:
        raise NotImplementedError


class Consumer:
    """``peek(consumer)``: sees each tuple; the stream goes on unchanged."""

    def accept(self, tup: TridentTuple) -> None:
        raise NotImplementedError


class MultiReducer(Operation):
    """Over several streams at once (``TridentTopology.multi_reduce``): ``execute`` is told which input stream
    (its index) each tuple comes from."""

    def init(self, collector: TridentCollector) -> Any:
        raise NotImplementedError

    def execute(self, state: Any, stream_index: int, tup: TridentTuple, collector: TridentCollector) -> Any:
        raise NotImplementedError

    def complete(self, state: Any, collector: TridentCollector) -> None:
        raise NotImplementedError
