"""Trident map states in Redis and PostgreSQL, each of the three kinds (opaque, transactional,
non-transactional).

Each ``multi_put`` is one transaction (a Redis ``MULTI``/``EXEC``, a PostgreSQL transaction): a batch's writes on
a partition land whole or not at all, and the kind's stored txid makes a replayed batch count once. Keys and
values are stored as JSON text (never pickle), the value as ``{"v": current, "t": txid, "p": previous}``.

    RedisMapState.opaque("redis://127.0.0.1:6379/0", "word-counts")
    PostgresMapState.transactional("postgresql://127.0.0.1/db", "word_counts")
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import redis
from psycopg import sql

from squall.connectors.common import BrokerUnavailable, redact, with_retries
from squall.connectors.redis_streams import connect as connect_redis
from squall.trident.state import MAP_KINDS, StateFactory, StoredBackingMap, StoredMapState, current_of

_MAX_IDENTIFIER_BYTES = 63


def _kind(kind: str) -> str:
    if kind not in MAP_KINDS:
        raise ValueError(f"map state kind {kind!r} is not one of {MAP_KINDS}")
    return kind


class RedisBackingMap(StoredBackingMap):
    """A map's values in one Redis hash."""

    def __init__(self, url: str, name: str, kind: str) -> None:
        self.url, self.name, self.kind = url, name, _kind(kind)
        self.client = connect_redis(url)

    def _retrying(self, what: str, call: Any) -> Any:
        return with_retries(f"{what} on {self.name}", call, (redis.ConnectionError, redis.TimeoutError))

    def read(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        values = self._retrying("read", lambda: self.client.hmget(self.name, keys))
        return {k: v for k, v in zip(keys, values, strict=True) if v is not None}

    def write(self, rows: dict[str, str]) -> None:
        if not rows:
            return

        def write() -> None:
            with self.client.pipeline(transaction=True) as pipe:
                pipe.hset(self.name, mapping=rows)
                pipe.execute()

        self._retrying("write", write)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        yield from self._retrying("scan", lambda: self.client.hgetall(self.name)).items()

    def close(self) -> None:
        self.client.close()


class PostgresBackingMap(StoredBackingMap):
    """A map's values in one PostgreSQL table (``key TEXT PRIMARY KEY, value TEXT``), created if missing."""

    def __init__(self, url: str, table: str, kind: str) -> None:
        if not table.isidentifier() or len(table.encode()) > _MAX_IDENTIFIER_BYTES:
            raise ValueError(f"table name must be an identifier of at most 63 bytes, got {table!r}")
        self.url, self.table, self.kind = url, table, _kind(kind)
        self._t = sql.Identifier(table)
        self._conn: psycopg.Connection | None = None
        self._retrying("create table", self._create)

    def _live(self) -> psycopg.Connection:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            try:
                conn = self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
            except psycopg.OperationalError as exc:
                raise BrokerUnavailable(f"cannot reach PostgreSQL at {redact(self.url)}: {exc}") from None
        return conn

    def _retrying(self, what: str, call: Any) -> Any:
        retried = (psycopg.OperationalError, BrokerUnavailable)
        return with_retries(f"{what} on {self.table}", lambda: call(self._live()), retried)

    def _create(self, conn: psycopg.Connection) -> None:
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"squall.trident_state:{self.table}"])
                conn.execute(
                    sql.SQL("CREATE TABLE IF NOT EXISTS {} (key TEXT PRIMARY KEY, value TEXT)").format(self._t)
                )
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            pass

    def read(self, keys: list[str]) -> dict[str, str]:
        if not keys:
            return {}
        query = sql.SQL("SELECT key, value FROM {} WHERE key = ANY(%s)").format(self._t)
        return dict(self._retrying("read", lambda conn: conn.execute(query, [keys]).fetchall()))

    def write(self, rows: dict[str, str]) -> None:
        if not rows:
            return
        query = sql.SQL(
            "INSERT INTO {} (key, value) SELECT * FROM unnest(%s::text[], %s::text[])"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ).format(self._t)

        def write(conn: psycopg.Connection) -> None:
            with conn.transaction():
                conn.execute(query, [list(rows), list(rows.values())])

        self._retrying("write", write)

    def scan(self) -> Iterator[tuple[str, str]]:
        query = sql.SQL("SELECT key, value FROM {}").format(self._t)
        yield from self._retrying("scan", lambda conn: conn.execute(query).fetchall())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


class _Factory(StateFactory):
    def __init__(self, backing: type, url: str, name: str, kind: str, cache_size: int) -> None:
        self.backing, self.url, self.name, self.kind, self.cache_size = backing, url, name, _kind(kind), cache_size

    def make_state(self, conf: dict, metrics: Any, partition_index: int, num_partitions: int) -> StoredMapState:
        return StoredMapState(self.backing(self.url, self.name, self.kind), self.cache_size)


class _MapStates:
    """Factories of one store's map states, one per kind: ``opaque(url, name)`` and so on."""

    backing: type

    @classmethod
    def opaque(cls, url: str, name: str, cache_size: int = 1000) -> StateFactory:
        return _Factory(cls.backing, url, name, "opaque", cache_size)

    @classmethod
    def transactional(cls, url: str, name: str, cache_size: int = 1000) -> StateFactory:
        return _Factory(cls.backing, url, name, "transactional", cache_size)

    @classmethod
    def non_transactional(cls, url: str, name: str, cache_size: int = 1000) -> StateFactory:
        return _Factory(cls.backing, url, name, "non_transactional", cache_size)


class RedisMapState(_MapStates):
    """Factories of map states in a Redis hash: ``RedisMapState.opaque(url, name)`` and so on."""

    backing = RedisBackingMap

    @staticmethod
    def read(url: str, name: str) -> dict[tuple, Any]:
        """Each key (a tuple) in the hash with its current value."""
        client = connect_redis(url)
        try:
            return {tuple(json.loads(k)): current_of(v) for k, v in client.hgetall(name).items()}
        finally:
            client.close()


class PostgresMapState(_MapStates):
    """Factories of map states in a PostgreSQL table: ``PostgresMapState.opaque(url, table)`` and so on."""

    backing = PostgresBackingMap

    @staticmethod
    def read(url: str, table: str) -> dict[tuple, Any]:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(sql.SQL("SELECT key, value FROM {}").format(sql.Identifier(table))).fetchall()
        return {tuple(json.loads(k)): current_of(v) for k, v in rows}
