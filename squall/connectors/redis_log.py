"""Redis Streams as a replayable partitioned log (the role Kafka plays in Storm's seeds),
and transactional state kept in Redis.

Each partition is one stream key, on the server of its URL: ``partitions`` is a
list of ``(url, key)``. A batch's metadata per partition is the exclusive start
id and the last id it took, so a txid can be read again exactly (entries are
immutable while the stream is not trimmed).

* ``RedisLogTransactionalSpout``: the same entry-id range for the same txid.
  Exactly-once with ``TransactionalValue`` state.
* ``RedisLogOpaqueSpout``: each batch continues after the previous one; a
  partition whose server cannot be reached contributes nothing to the batch and
  is read on from the same place later. Exactly-once with ``OpaqueValue`` state.

Entries carry their values as JSON in the ``data`` field, as for
``RedisStreamSpout``; malformed entries are skipped, logged and counted.
"""

from __future__ import annotations

import json
import logging
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import redis

from squall.connectors.queue import MalformedMessage, decode_values
from squall.connectors.redis_streams import connect
from squall.model.fields import Fields, as_fields
from squall.transactional.spouts import OpaquePartitionedTransactionalSpout, PartitionedTransactionalSpout
from squall.transactional.state import KeyedState, OpaqueValue, TransactionalValue, as_key

log = logging.getLogger("squall.redis")

_CLIENTS: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10)
    return client


class _RedisLog:
    def __init__(self, partitions: Sequence[tuple[str, str]], fields, take_per_batch: int) -> None:
        self.partition_keys = [tuple(p) for p in partitions]
        self.fields: Fields = Fields("tx", *as_fields(fields))
        self.take_per_batch = take_per_batch

    def num_partitions(self) -> int:
        return len(self.partition_keys)

    def _read(self, partition: int, after: str, last: str | None = None) -> list[tuple[str, Any]]:
        url, key = self.partition_keys[partition]
        if last is None:
            entries = _client(url).xrange(key, min=f"({after}" if after != "0-0" else "-", count=self.take_per_batch)
        else:
            entries = _client(url).xrange(key, min=f"({after}" if after != "0-0" else "-", max=last)
        return [(eid.decode(), data) for eid, data in entries]

    def _emit(self, tx, collector, partition: int, entries) -> None:
        user_fields = Fields(*list(self.fields)[1:])
        for entry_id, data in entries:
            raw = data.get(b"data")
            try:
                values = decode_values(raw.decode() if raw is not None else "", user_fields)
            except (MalformedMessage, UnicodeDecodeError) as exc:
                collector.report_malformed(f"{self.partition_keys[partition][1]} entry {entry_id}: {exc}; skipped")
                continue
            collector.emit([tx, *values])

    def _batch_after(self, tx, collector, partition: int, last_meta: Any) -> dict:
        after = last_meta["last"] if last_meta else "0-0"
        entries = self._read(partition, after)
        self._emit(tx, collector, partition, entries)
        return {"after": after, "last": entries[-1][0] if entries else after, "count": len(entries)}


class RedisLogTransactionalSpout(_RedisLog, PartitionedTransactionalSpout):
    def emit_partition_batch_new(self, tx, collector, partition: int, last_meta: Any) -> dict:
        return self._batch_after(tx, collector, partition, last_meta)

    def emit_partition_batch(self, tx, collector, partition: int, meta: Any) -> None:
        if meta["count"]:
            self._emit(tx, collector, partition, self._read(partition, meta["after"], meta["last"]))


class RedisLogOpaqueSpout(_RedisLog, OpaquePartitionedTransactionalSpout):
    def emit_partition_batch(self, tx, collector, partition: int, last_meta: Any) -> dict:
        try:
            return self._batch_after(tx, collector, partition, last_meta)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            after = last_meta["last"] if last_meta else "0-0"
            log.warning(
                "partition %d (%s) unavailable: %s; it sits this batch out",
                partition,
                self.partition_keys[partition][0],
                exc,
            )
            return {"after": after, "last": after, "count": 0}


class RedisKeyedState(KeyedState):
    """``KeyedState`` in one Redis hash; ``update`` runs under WATCH/MULTI/EXEC: all of a batch or none of it."""

    def __init__(self, url: str, name: str, opaque: bool = False) -> None:
        self.client, self.name, self.opaque = connect(url), name, opaque

    def _decode(self, raw: bytes) -> TransactionalValue | OpaqueValue:
        d = json.loads(raw)
        return self._value(d["v"], d["p"], d["t"])

    def _read(self, client: redis.Redis, fields: Mapping[str, Any]) -> dict[Any, Any]:
        """The values of ``fields`` (JSON-encoded key -> key) that exist, read through ``client``."""
        raw = client.hmget(self.name, list(fields)) if fields else []
        return {k: self._decode(r) for k, r in zip(fields.values(), raw, strict=True) if r is not None}

    def update(
        self,
        txid: int,
        deltas: Mapping[Any, Any],
        combine: Callable[[Any, Any], Any] = operator.add,
        initial: Any = 0,
        writer: str | None = None,
    ) -> dict[Any, Any]:
        fields = {json.dumps(k): k for k in deltas}
        while True:
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.name)
                    stored = dict(pipe.hgetall(self.name)) if self.opaque and writer else {}
                    new = self._applied(self._read(pipe, fields), txid, deltas, combine, initial)
                    writes = {}
                    for f, r in stored.items():  # opaque replay: revert this writer's keys it no longer touches
                        d = json.loads(r)
                        if f.decode() not in fields and d["t"] == txid and d.get("w") == writer:
                            writes[f.decode()] = json.dumps({**d, "v": d["p"]})
                    for k, v in new.items():
                        writes[json.dumps(k)] = json.dumps(
                            {"v": v.value, "p": getattr(v, "prev_value", None), "t": v.txid, "w": writer}
                        )
                    pipe.multi()
                    if writes:
                        pipe.hset(self.name, mapping=writes)
                    pipe.execute()
                    return new
                except redis.WatchError:
                    continue

    def close(self) -> None:
        self.client.close()

    def get_many(self, keys: Iterable[Any]) -> dict[Any, Any]:
        return self._read(self.client, {json.dumps(k): k for k in keys})

    def items(self) -> dict[Any, Any]:
        return {as_key(json.loads(f)): self._decode(r) for f, r in self.client.hgetall(self.name).items()}
