"""Kafka spouts for transactional topologies (seed 003): each batch is an offset range per partition.

A batch's slice of partition *p* is the records of ``[offset, next)``, stored by the coordinator as the batch's
metadata ``{"offset", "next", "count"}``; the next batch of *p* starts at ``next``.

* ``KafkaTransactionalSpout`` re-reads exactly that range when a txid is replayed, so a replayed batch has the
  same tuples (for ``TransactionalValue`` state). If those records are gone (retention, compaction) the batch
  can never be replayed: the topology stops, naming the partition and the offsets.
* ``KafkaOpaqueTransactionalSpout`` never re-reads a stored range: a replayed txid continues from where the
  previous txid ended, with what the log holds now; a partition whose broker is away sits the batch out. Use it
  with ``OpaqueValue`` state (the prevValue rule).

Tuples carry the ``TransactionAttempt`` first, then the translator's fields. The partitions of ``topic`` are
looked up where the coordinator runs (the driver), each time a batch begins; the records are read by the
emitter tasks, one consumer each, on the executors under ``LocalCluster`` and ``squall run``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from squall.connectors.kafka import client
from squall.connectors.kafka.spout import FirstPollOffsetStrategy, JsonTranslator, RecordTranslator, Routed
from squall.connectors.queue import MalformedMessage
from squall.model.errors import FatalError
from squall.model.fields import Fields
from squall.transactional.spouts import (
    DEFAULT_TAKE_PER_BATCH,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
)

log = logging.getLogger("squall.connectors.kafka")

READ_TIMEOUT = 30.0  # seconds to read a range the log holds before the batch fails (and is tried again)
STALL_SECS = 2.0  # seconds a new batch waits for records below the log's end before it ends without them


class _KafkaBatches:
    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        take_per_batch: int = DEFAULT_TAKE_PER_BATCH,
        fields: Sequence[str] | Fields | None = None,
        translator: RecordTranslator | None = None,
        first_offset: FirstPollOffsetStrategy = FirstPollOffsetStrategy.EARLIEST,
        group_id: str = "squall-transactional",
        consumer_config: dict | None = None,
    ) -> None:
        if not isinstance(take_per_batch, int) or isinstance(take_per_batch, bool) or take_per_batch < 1:
            raise ValueError(f"{type(self).__name__} take_per_batch must be an int >= 1, got {take_per_batch!r}")
        if not bootstrap_servers:
            raise ValueError(f"{type(self).__name__} needs bootstrap_servers")
        self.topic, self.bootstrap_servers, self.take_per_batch = topic, bootstrap_servers, take_per_batch
        self.translator = translator or (JsonTranslator(fields) if fields is not None else RecordTranslator())
        self.fields = Fields("tx", *self.translator.outputs["default"])
        self.first_offset = FirstPollOffsetStrategy(first_offset)
        self.group_id, self.consumer_config = group_id, dict(consumer_config or {})
        self._consumer: Any = None  # metadata and offsets
        self._readers: dict[int, tuple[Any, int]] = {}  # partition -> (its consumer, the offset it reads next)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_consumer": None, "_readers": {}}  # consumers are made where the spout runs

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = client.consumer(self.bootstrap_servers, self.group_id, self.consumer_config)
            client.check_reachable(self._consumer, self.bootstrap_servers, f"topic {self.topic}")
        return self._consumer

    def num_partitions(self) -> int:
        meta = client.check_reachable(self._client(), self.bootstrap_servers, f"topic {self.topic}")
        found = meta.topics.get(self.topic)
        return 0 if found is None or found.error is not None else len(found.partitions)

    def _start_of(self, partition: int, last_meta: Any) -> int:
        low, high = self._client().get_watermark_offsets(TopicPartition(self.topic, partition), timeout=30)
        if last_meta is None:
            return low if self.first_offset is not FirstPollOffsetStrategy.LATEST else high
        start = last_meta["next"]
        if start < low:
            log.warning(
                "topic %s partition %d: offsets %d to %d are gone; reading on from %d",
                *(self.topic, partition, start, low - 1, low),
            )
            return low
        return start

    def _reader(self, partition: int, start: int) -> Any:
        """The partition's own consumer, positioned at ``start``: one that read the batch before is there already,
        so consecutive batches of a partition stream on without a new fetch."""
        reader, position = self._readers.get(partition, (None, -1))
        if reader is None:
            reader = client.consumer(self.bootstrap_servers, self.group_id, self.consumer_config)
        if position != start:
            reader.assign([TopicPartition(self.topic, partition, start)])
        return reader

    def _read(self, partition: int, start: int, stop: int | None, take: int) -> tuple[list[Any], int]:
        """Records of ``partition`` from ``start``: exactly those below ``stop``, or (``stop`` None) up to ``take``
        of those below the log's end now. Also the offset after the range read."""
        tp = TopicPartition(self.topic, partition)
        end = stop if stop is not None else self._client().get_watermark_offsets(tp, timeout=30)[1]
        if end <= start:
            return [], start
        reader = self._reader(partition, start)
        records: list[Any] = []
        position, moved_at, streamed = start, time.monotonic(), True
        while position < end and len(records) < take:
            batch = reader.consume(min(take - len(records), 10_000), 0.2)
            for record in batch:
                if record.error() is not None:
                    continue
                if position <= record.offset() < end and len(records) < take:
                    records.append(record)
                    position = record.offset() + 1
                    moved_at = time.monotonic()
                elif record.offset() >= end:
                    streamed = False  # read past the range: the next read seeks
            if batch:
                continue
            at = reader.position([tp])[0].offset  # past transaction markers, which carry no record
            if at > position:
                position, moved_at = min(at, end), time.monotonic()
            stalled = time.monotonic() - moved_at
            if stop is None and stalled > STALL_SECS:
                break  # a new batch takes what the log delivers now (records past an open transaction wait)
            if stalled > READ_TIMEOUT:
                self._readers.pop(partition, None)
                raise KafkaException(
                    f"topic {self.topic} partition {partition}: offsets {position} to {end - 1} "
                    f"were not read within {READ_TIMEOUT:.0f}s"
                )
        after = end if stop is not None else position
        self._readers[partition] = (reader, after if streamed else -1)
        return records, after

    def _emit(self, tx: Any, collector: Any, partition: int, records: list[Any]) -> None:
        for record in records:
            try:
                result = self.translator(record)
            except (MalformedMessage, ValueError, UnicodeDecodeError) as exc:
                where = f"topic {self.topic} partition {partition} offset {record.offset()}"
                collector.report_malformed(f"{where}: {exc}; skipped")
                continue
            if result is None:
                continue
            values = result.values if isinstance(result, Routed) else result
            collector.emit([tx, *values])

    def _batch_after(self, tx: Any, collector: Any, partition: int, last_meta: Any) -> dict:
        start = self._start_of(partition, last_meta)
        records, after = self._read(partition, start, None, self.take_per_batch)
        self._emit(tx, collector, partition, records)
        return {"offset": start, "next": after, "count": len(records)}


class KafkaTransactionalSpout(_KafkaBatches, PartitionedTransactionalSpout):
    """A replayed txid re-reads exactly its stored offset range (see the module's docstring)."""

    def emit_partition_batch_new(self, tx, collector, partition: int, last_meta: Any) -> dict:
        return self._batch_after(tx, collector, partition, last_meta)

    def emit_partition_batch(self, tx, collector, partition: int, meta: Any) -> None:
        if meta["next"] <= meta["offset"]:
            return
        low = self._client().get_watermark_offsets(TopicPartition(self.topic, partition), timeout=30)[0]
        if low > meta["offset"]:
            raise FatalError(
                f"topic {self.topic} partition {partition}: batch {tx} needs offsets {meta['offset']} to "
                f"{meta['next'] - 1}, and the log now starts at {low}: the batch cannot be replayed "
                "(use KafkaOpaqueTransactionalSpout where records may be gone)"
            )
        records, _ = self._read(partition, meta["offset"], meta["next"], meta["next"] - meta["offset"])
        self._emit(tx, collector, partition, records)


class KafkaOpaqueTransactionalSpout(_KafkaBatches, OpaquePartitionedTransactionalSpout):
    """Each batch continues from the previous txid's end, with what the log holds now (see the docstring)."""

    def emit_partition_batch(self, tx, collector, partition: int, last_meta: Any) -> dict:
        try:
            return self._batch_after(tx, collector, partition, last_meta)
        except KafkaException as exc:
            start = last_meta["next"] if last_meta else 0
            log.warning("topic %s partition %d unavailable: %s; it sits this batch out", self.topic, partition, exc)
            return {"offset": start, "next": start, "count": 0}
