"""What Trident tests (and first tries) are written with: an in-memory map state and fixed batch spouts, plus the
small operations Storm's own Trident tests use."""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from squall.model.config import TOPOLOGY_MAX_TASK_PARALLELISM
from squall.model.fields import Fields, as_fields
from squall.transactional.spouts import PartitionedTransactionalSpout
from squall.trident.operation import BaseAggregator, BaseFilter, BaseFunction, TridentCollector
from squall.trident.spouts import BatchSpout
from squall.trident.state import (
    READ_COMMITTED,
    MemoryBackingMap,
    OpaqueMap,
    SnapshottableMap,
    StateFactory,
    TupleCollection,
    committed_current,
)
from squall.trident.tuple import TridentTuple

GLOBAL_KEY = ["$MEMORY-MAP-STATE-GLOBAL$"]


class MemoryMapState(SnapshottableMap, TupleCollection):
    """An opaque map state in the worker process's memory (Storm's ``MemoryMapState``): each partition's values
    outlive a worker generation in the same process, and are lost with the process. For tests and first tries;
    ``squall.trident.state`` has the durable ones."""

    def __init__(self, state_id: str) -> None:
        self.backing = MemoryBackingMap(state_id, 0)
        super().__init__(OpaqueMap.build(self.backing), GLOBAL_KEY)
        self.removed: list[Sequence[Any]] = []
        self.curr_txid: int | None = None

    class Factory(StateFactory):
        def __init__(self) -> None:
            self.id = uuid.uuid4().hex

        def make_state(self, conf: dict, metrics: Any, partition_index: int, num_partitions: int) -> MemoryMapState:
            return MemoryMapState(f"{self.id}/{partition_index}")

    def begin_commit(self, txid: int | None) -> None:
        super().begin_commit(txid)
        if txid is None or txid != self.curr_txid:
            self.backing.multi_remove(self.removed)
        self.removed, self.curr_txid = [], txid

    def multi_remove(self, keys: list[Sequence[Any]]) -> None:
        """The keys read as None for the rest of the batch, and are gone once the next txid begins."""
        self.multi_put(keys, [None] * len(keys))
        self.removed.extend(keys)

    def get_tuples(self) -> Iterator[list[Any]]:
        limit = READ_COMMITTED.get()
        for key, value in list(self.backing.data.items()):
            if list(key) != GLOBAL_KEY:
                yield [*key, committed_current(value, limit)]


def _values(fields: Sequence[str], value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    if len(fields) == 1:
        return [value]
    raise TypeError(f"a tuple of fields {list(fields)} must be a list or tuple of values, got {value!r}")


class FixedBatchSpout(BatchSpout):
    """Emits ``values`` in batches of up to ``max_batch_size``, then nothing (or, with ``set_cycle(True)``, from
    the start again). A txid's batch is kept until it is acked, so a replay is the same batch: transactional.
    Runs as one emitter task (Storm's, too)."""

    def __init__(self, fields: Sequence[str], max_batch_size: int, *values: Any) -> None:
        self.outputs = as_fields(fields)
        self.max_batch_size = max_batch_size
        self.values = [_values(self.outputs, v) for v in values]
        self.cycle = False
        self.index = 0
        self.batches: dict[int, list[list[Any]]] = {}

    def set_cycle(self, cycle: bool) -> None:
        self.cycle = cycle

    def emit_batch(self, batch_id: int, collector: Any) -> None:
        batch = self.batches.get(batch_id)
        if batch is None:
            if self.index >= len(self.values) and self.cycle:
                self.index = 0
            batch = self.values[self.index : self.index + self.max_batch_size]
            self.index += len(batch)
            self.batches[batch_id] = batch
        for values in batch:
            collector.emit(values)

    def ack(self, batch_id: int) -> None:
        self.batches.pop(batch_id, None)

    def get_component_configuration(self) -> dict[str, Any]:
        return {TOPOLOGY_MAX_TASK_PARALLELISM: 1}


# -- the operations Storm's Trident tests use ----------------------------------------------------------------
class Split(BaseFunction):
    """Each word of the first field (split on spaces; empty words skipped)."""

    def execute(self, tup: TridentTuple, collector: TridentCollector) -> None:
        for word in tup[0].split(" "):
            if word:
                collector.emit([word])


class StringLength(BaseFunction):
    def execute(self, tup: TridentTuple, collector: TridentCollector) -> None:
        collector.emit([len(tup[0])])


class CountAsAggregator(BaseAggregator):
    """The number of tuples, as a general aggregator (no partial combine)."""

    def init(self, batch_id: Any, collector: TridentCollector) -> list[int]:
        return [0]

    def aggregate(self, state: list[int], tup: TridentTuple, collector: TridentCollector) -> None:
        state[0] += 1

    def complete(self, state: list[int], collector: TridentCollector) -> None:
        collector.emit([state[0]])


class TuplifyArgs(BaseFunction):
    """The first field, a JSON list, as a tuple's values."""

    def execute(self, tup: TridentTuple, collector: TridentCollector) -> None:
        import json

        collector.emit(json.loads(tup[0]))


class FeederBatchSpout(PartitionedTransactionalSpout):
    """A spout a test feeds: ``feed(list_of_values)`` makes the next batch of those tuples, and returns once that
    batch has committed (as Storm's ``FeederBatchSpout``). A batch begins only when something was fed.

    Each batch is decided on the driver, where the test's own instance lives, and its tuples travel as the batch's
    metadata, so a replay is the same batch: transactional. Feed it from the test's thread while a
    ``LocalCluster`` runs the topology (its own thread moves the batches); the values must be JSON."""

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = Fields("tx", *as_fields(fields))
        self._fed: deque[tuple[list[list[Any]], threading.Event]] = deque()
        self._waiting: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # the emitters on the workers need only the fields
        return {"fields": self.fields}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(list(state["fields"])[1:])

    def __deepcopy__(self, memo: dict) -> FeederBatchSpout:
        return self

    def feed(self, tuples: Sequence[Any], timeout: float = 120.0) -> None:
        fields = list(self.fields)[1:]
        done = threading.Event()
        with self._lock:
            self._fed.append(([_values(fields, v) for v in tuples], done))
        if not done.wait(timeout):
            raise TimeoutError(f"the fed batch did not commit within {timeout}s")

    def num_partitions(self) -> int:
        return 1

    def is_ready(self) -> bool:
        return bool(self._fed)

    def initialize_transaction(self, txid: int) -> list[dict[str, Any]]:
        with self._lock:
            tuples, done = self._fed.popleft() if self._fed else ([], None)
            if done is not None:
                self._waiting[txid] = done
        return [{"tuples": tuples}]

    def on_committed(self, txid: int) -> None:
        done = self._waiting.pop(txid, None)
        if done is not None:
            done.set()

    def emit_partition_batch(self, tx: Any, collector: Any, partition: int, meta: Any) -> None:
        for values in meta["tuples"]:
            collector.emit([tx, *values])

    def emit_partition_batch_new(self, tx: Any, collector: Any, partition: int, last_meta: Any) -> Any:
        raise RuntimeError("a FeederBatchSpout's batches are decided on the driver")


class TrueFilter(BaseFilter):
    """Keeps every tuple."""

    def is_keep(self, tup: TridentTuple) -> bool:
        return True
