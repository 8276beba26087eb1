"""Transactional spouts: sources that emit batches a transaction id can name again.

Both kinds are partitioned: each batch takes a slice of every partition, and
the coordinator stores each partition's slice (its metadata, JSON) per txid.
Emitters run on the workers (``squall/transactional/emitters.py``), partition ``p`` on emitter task
``p mod parallelism``.

* ``PartitionedTransactionalSpout``: the same txid always emits the same batch.
  Supports exactly-once with ``TransactionalValue`` state, if every partition
  can be re-read (seeked) to the stored slice.
* ``OpaquePartitionedTransactionalSpout``: a replayed txid may emit a different
  batch (a partition was unavailable, say); each batch continues from where the
  previous batch ended. Supports exactly-once with ``OpaqueValue`` state, and
  needs no partition to be re-readable on demand.

A non-partitioned transactional source is a partitioned one with one partition.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from squall.model.fields import Fields, as_fields


class _Partitioned:
    """What both kinds share. Each emitter task has an instance of its own (unpickled where the task runs),
    and calls, on its one emitting thread: ``open`` once, the emit methods once per partition and batch, in the
    order batches begin, ``success(txid)`` once a txid it emitted has committed (told before the emitter's next
    batch), and ``close`` when the task ends."""

    fields: Fields

    def num_partitions(self) -> int:
        raise NotImplementedError

    def is_ready(self) -> bool:
        """Whether a new transaction should start now (checked on the driver)."""
        return True

    def open(self, conf: dict[str, Any], context: Any) -> None:
        """Called once per emitter task, before its first batch: ``context`` is its ``TopologyContext``."""

    def success(self, txid: int) -> None:
        """Called once for each txid this emitter task emitted, after the txid committed."""

    def close(self) -> None:
        """Called when the emitter task ends (the topology stops, or its worker is relaunched)."""

    # A spout may also define, called on the driver's own instance, on the run's thread:
    # ``initialize_transaction(txid) -> [meta per partition]``: the driver decides each new batch; each partition
    # then emits exactly its meta (``emit_partition_batch``), the first time and on a replay alike.
    # ``on_committed(txid)``: txid committed.


def is_transactional_spout(spout: object) -> bool:
    """Whether ``spout`` is a transactional or opaque partitioned spout."""
    return isinstance(spout, _Partitioned)


class PartitionedTransactionalSpout(_Partitioned):
    def emit_partition_batch_new(self, tx, collector, partition: int, last_meta: Any) -> Any:
        """Emit the batch that follows ``last_meta`` (None for the first); return its metadata."""
        raise NotImplementedError

    def emit_partition_batch(self, tx, collector, partition: int, meta: Any) -> None:
        """Emit exactly the batch ``meta`` describes (a replay)."""
        raise NotImplementedError


class OpaquePartitionedTransactionalSpout(_Partitioned):
    def emit_partition_batch(self, tx, collector, partition: int, last_meta: Any) -> Any:
        """Emit the batch that follows ``last_meta`` (None for the first); return its metadata."""
        raise NotImplementedError


# Sentences a partition gives each batch unless told otherwise: a batch's fixed costs (its commit's store writes
# above all) stay a small share of its time; docs/performance.md has the figures.
DEFAULT_TAKE_PER_BATCH = 25_000


def _slice(data: Sequence, start: int, take: int) -> Sequence:
    return data[start : start + take]


class MemoryTransactionalSpout(PartitionedTransactionalSpout):
    """Storm's in-memory transactional spout: ``partitions`` maps a partition number to
    its list of value lists; each batch takes up to ``take_per_batch`` of each (``DEFAULT_TAKE_PER_BATCH``).

    Partitions may be added, and lists appended to, while the topology runs, where its emitters run: in the
    test's process under ``TestCluster``. Under ``LocalCluster`` and ``squall run`` the emitters run on the
    workers, each with the spout as it was submitted.
    Tuples carry the ``TransactionAttempt`` first, then ``fields``.
    """

    def __init__(
        self, partitions: Mapping[int, Sequence[Sequence[Any]]], fields, take_per_batch: int = DEFAULT_TAKE_PER_BATCH
    ) -> None:
        self.partitions = partitions
        self.fields = Fields("tx", *as_fields(fields))
        self.take_per_batch = take_per_batch

    def __deepcopy__(self, memo: dict) -> MemoryTransactionalSpout:
        """An emitter task's copy in the same process (``TestCluster``'s) shares ``partitions`` with this one."""
        return copy.copy(self)

    def num_partitions(self) -> int:
        return len(self.partitions)

    def _emit(self, tx, collector, partition: int, start: int, count: int) -> None:
        for values in _slice(self.partitions.get(partition, []), start, count):
            collector.emit([tx, *values])

    def emit_partition_batch_new(self, tx, collector, partition: int, last_meta: Any) -> dict:
        start = last_meta["index"] + last_meta["amount"] if last_meta else 0
        available = len(self.partitions.get(partition, [])) - start
        meta = {"index": start, "amount": max(0, min(self.take_per_batch, available))}
        self._emit(tx, collector, partition, meta["index"], meta["amount"])
        return meta

    def emit_partition_batch(self, tx, collector, partition: int, meta: Any) -> None:
        self._emit(tx, collector, partition, meta["index"], meta["amount"])


class OpaqueMemoryTransactionalSpout(OpaquePartitionedTransactionalSpout):
    """The opaque twin of ``MemoryTransactionalSpout``. Partitions listed in
    ``unavailable`` emit nothing (and stay where they were) until they are back."""

    def __init__(
        self, partitions: Mapping[int, Sequence[Sequence[Any]]], fields, take_per_batch: int = DEFAULT_TAKE_PER_BATCH
    ) -> None:
        self.partitions = partitions
        self.fields = Fields("tx", *as_fields(fields))
        self.take_per_batch = take_per_batch
        self.unavailable: set[int] = set()

    def num_partitions(self) -> int:
        return len(self.partitions)

    def emit_partition_batch(self, tx, collector, partition: int, last_meta: Any) -> dict:
        start = last_meta["index"] + last_meta["amount"] if last_meta else 0
        if partition in self.unavailable:
            return {"index": start, "amount": 0}
        batch = _slice(self.partitions.get(partition, []), start, self.take_per_batch)
        for values in batch:
            collector.emit([tx, *values])
        return {"index": start, "amount": len(batch)}
