"""Spouts of a Trident stream.

``new_stream(txid, spout)`` takes:

* a ``BatchSpout`` (Storm's ``IBatchSpout``): each emitter task emits whole batches, by txid, and replays a txid
  itself (``FixedBatchSpout`` keeps each txid's batch until it is acked);
* squall's transactional and opaque partitioned spouts (memory, Redis log, Kafka), with their guarantees;
* a plain ``Spout``, at least once (``RichSpoutEmitter``).
"""

from __future__ import annotations

from typing import Any

from squall.model.components import Spout
from squall.model.config import TOPOLOGY_SPOUT_MAX_BATCH_SIZE
from squall.model.fields import Fields, as_fields
from squall.transactional.spouts import OpaquePartitionedTransactionalSpout, PartitionedTransactionalSpout


class BatchSpout:
    """A source that emits a batch at a time: Storm's ``IBatchSpout``.

    Each emitter task has an instance of its own, unpickled on the worker that runs it, and makes every call on one
    thread:

    * ``open(conf, context)`` once, before the first batch;
    * ``emit_batch(batch_id, collector)`` for each batch, in txid order: ``batch_id`` is the txid. The same txid
      comes again when its batch failed: emitting the same tuples again then makes the stream transactional;
    * ``ack(batch_id)`` once the batch committed (before the next ``emit_batch``): it will not be asked for again;
    * ``close()`` when the task ends.

    ``outputs`` declares the fields. ``get_component_configuration()`` may cap the emitter tasks with
    ``topology.max.task.parallelism``.
    """

    outputs: Any = ()

    def open(self, conf: dict[str, Any], context: Any) -> None:
        pass

    def emit_batch(self, batch_id: int, collector: Any) -> None:
        raise NotImplementedError

    def ack(self, batch_id: int) -> None:
        pass

    def close(self) -> None:
        pass

    def get_component_configuration(self) -> dict[str, Any] | None:
        return None


class BatchSpoutEmitter(PartitionedTransactionalSpout):
    """A ``BatchSpout`` run as a partitioned transactional spout: one partition per emitter task."""

    def __init__(self, spout: BatchSpout, tasks: int) -> None:
        self.spout, self.tasks = spout, tasks
        self.fields = as_fields(spout.outputs)

    def num_partitions(self) -> int:
        return self.tasks

    def open(self, conf: dict[str, Any], context: Any) -> None:
        self.spout.open(conf, context)

    def emit_partition_batch_new(self, tx: Any, collector: Any, partition: int, last_meta: Any) -> dict:
        self.spout.emit_batch(tx.txid, collector)
        return {"txid": tx.txid}

    def emit_partition_batch(self, tx: Any, collector: Any, partition: int, meta: Any) -> None:
        self.spout.emit_batch(tx.txid, collector)

    def success(self, txid: int) -> None:
        self.spout.ack(txid)

    def close(self) -> None:
        self.spout.close()

    def get_component_configuration(self) -> dict[str, Any] | None:
        return self.spout.get_component_configuration()


def spout_fields(spout: Any) -> tuple[Fields, int]:
    """The fields a spout's Trident stream has, and how many leading values of its rows to drop (a transactional
    spout's ``tx``)."""
    if isinstance(spout, (BatchSpout, Spout)):
        return as_fields(spout.outputs), 0
    return Fields(*list(spout.fields)[1:]), 1


MAX_BATCH_SIZE = 1000  # Storm's topology.spout.max.batch.size: next_tuple calls a batch, at most


class _BatchCollector:
    """A plain spout's collector inside a Trident batch: emits go to the batch, and their msg ids are kept for the
    batch's txid."""

    may_wait = False

    def __init__(self) -> None:
        self.target: Any = None
        self.ids: list[Any] = []
        self.emit_budget = MAX_BATCH_SIZE

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> list[int]:
        if msg_id is not None:
            self.ids.append(msg_id)
        return self.target.emit(list(values))

    def emit_many(self, rows: Any, msg_ids: Any = None, stream: str = "default") -> None:
        for i, values in enumerate(rows):
            self.emit(values, None if msg_ids is None else msg_ids[i], stream)

    def emit_direct(self, task: int, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        raise ValueError("a spout in a Trident stream emits to the stream, not to a task")

    def report_error(self, error: BaseException) -> None:
        self.target.report_error(error)

    def report_malformed(self, what: str) -> None:
        self.target.report_malformed(what)


class RichSpoutEmitter(OpaquePartitionedTransactionalSpout):
    """A plain ``Spout`` in a Trident stream (Storm's ``RichSpoutBatchExecutor``): each batch is up to
    ``topology.spout.max.batch.size`` calls of ``next_tuple`` on each emitter task. The msg ids of a batch are
    acked once it commits; when its txid is emitted again (it failed), they are failed first, so the spout sends
    them again. At least once: a tuple may be counted again if it was re-sent after its batch partly committed to
    a state that is not opaque."""

    def __init__(self, spout: Any, tasks: int) -> None:
        self.spout, self.tasks = spout, tasks
        self.fields = as_fields(spout.outputs)

    def num_partitions(self) -> int:
        return self.tasks

    def open(self, conf: dict[str, Any], context: Any) -> None:
        self.collector = _BatchCollector()
        self.collector.emit_budget = self.most = int(conf.get(TOPOLOGY_SPOUT_MAX_BATCH_SIZE) or MAX_BATCH_SIZE)
        self.pending: dict[int, list[Any]] = {}  # txid -> the msg ids its batch emitted
        self.spout.open(conf, context, self.collector)
        activate = getattr(self.spout, "activate", None)
        if activate is not None:
            activate()

    def emit_partition_batch(self, tx: Any, collector: Any, partition: int, last_meta: Any) -> dict:
        for msg_id in self.pending.pop(tx.txid, ()):  # this txid failed: what it emitted goes back to the spout
            self.spout.fail(msg_id)
        batch = self.collector
        batch.target, batch.ids = collector, []
        for _ in range(self.most):
            before = len(batch.ids)
            self.spout.next_tuple()
            if len(batch.ids) == before or len(batch.ids) >= self.most:
                break
        self.pending[tx.txid] = batch.ids
        return {"emitted": len(batch.ids)}

    def success(self, txid: int) -> None:
        for msg_id in self.pending.pop(txid, ()):
            self.spout.ack(msg_id)

    def close(self) -> None:
        self.spout.close()
