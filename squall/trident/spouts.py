"""Spouts of a Trident stream.

``new_stream(txid, spout)`` takes:

* a ``BatchSpout`` (Storm's ``IBatchSpout``): each emitter task emits whole batches, by txid, and replays a txid
  itself (``FixedBatchSpout`` keeps each txid's batch until it is acked);
* squall's transactional and opaque partitioned spouts (memory, Redis log, Kafka), with their guarantees.
"""

from __future__ import annotations

from typing import Any

from squall.model.fields import Fields, as_fields
from squall.transactional.spouts import PartitionedTransactionalSpout


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
    if isinstance(spout, BatchSpout):
        return as_fields(spout.outputs), 0
    return Fields(*list(spout.fields)[1:]), 1
