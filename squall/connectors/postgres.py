"""Keyed transactional state in a PostgreSQL table.

Guarantee: exactly-once state updates when used from the committer of a
transactional topology, with the same semantics as ``SqliteKeyedState``:

* each key holds a ``TransactionalValue`` (a replayed txid is skipped) or, with
  ``opaque=True``, an ``OpaqueValue`` (a replayed txid is applied to ``prev_value``);
* ``update`` applies one batch's deltas in ONE SQL transaction: all of them or
  none of them, the opaque ``writer`` revert included;
* committers updating the same table concurrently (overlapping keys or not) stay
  correct: an update locks every row it reads until it commits.

Keys and values are stored as JSON text (never pickle); tuple keys come back as tuples.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from squall.connectors.common import BrokerUnavailable, redact, with_retries
from squall.transactional.state import (
    KeyedState,
    OpaqueValue,
    TransactionalValue,
    as_key,
    decode_json,
    encode_json,
    stored_row,
)

_MAX_IDENTIFIER_BYTES = 63  # PostgreSQL silently truncates longer names
# A lost connection; also deadlocks and serialization failures, after which the transaction was rolled back.
_RETRIED = (psycopg.OperationalError, BrokerUnavailable)

T = TypeVar("T")


class PostgresKeyedState(KeyedState):
    """``KeyedState`` in a PostgreSQL table.

    The table (``key TEXT PRIMARY KEY, value TEXT, prev TEXT, txid BIGINT, writer TEXT``)
    is created if missing. One instance holds one connection: use it from one
    thread at a time.

    Lost connections: every call is retried with backoff on
    ``psycopg.OperationalError``, reconnecting first if the connection is gone.
    A failed transaction either committed or did not, except when the connection
    drops during COMMIT: then the outcome is unknown, and ``update`` runs the batch
    again. That is safe: the txid stored with each value makes a retried update of
    an already-committed batch a no-op for ``TransactionalValue``, and for
    ``OpaqueValue`` the replay is applied to ``prev_value``, giving the same result.
    """

    def __init__(self, url: str, table: str, opaque: bool = False) -> None:
        if not table.isidentifier() or len(table.encode()) > _MAX_IDENTIFIER_BYTES:
            raise ValueError(f"table name must be an identifier of at most 63 bytes, got {table!r}")
        self.url, self.table, self.opaque = url, table, opaque
        self._t = sql.Identifier(table)
        self._conn: psycopg.Connection | None = None
        self._connect()
        self._retrying("create table", self._create_table)

    # -- connection -------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        try:
            # Autocommit: reads are single statements; updates open explicit transactions.
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            self._conn = None
            raise BrokerUnavailable(f"cannot reach PostgreSQL at {redact(self.url)}: {exc}") from None
        return self._conn

    def _live(self) -> psycopg.Connection:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._connect()
        return conn

    def _retrying(self, what: str, call: Callable[[psycopg.Connection], T]) -> T:
        """``call(connection)``, retried with backoff on connection errors; the last error is raised."""
        return with_retries(f"{what} on {self.table}", lambda: call(self._live()), _RETRIED)

    def _create_table(self, conn: psycopg.Connection) -> None:
        try:
            with conn.transaction():
                # CREATE TABLE IF NOT EXISTS can race with itself (a unique violation in the
                # catalog): serialize creators on an advisory lock held until commit.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"squall.keyed_state:{self.table}"])
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (key TEXT PRIMARY KEY, value TEXT, prev TEXT, txid BIGINT,"
                        " writer TEXT)"
                    ).format(self._t)
                )
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            pass  # created at the same moment by someone not taking the lock: it exists now

    # -- reads ------------------------------------------------------------

    def _decode(self, value: str, prev: str | None, txid: int) -> TransactionalValue | OpaqueValue:
        return self._value(decode_json(value), decode_json(prev) if prev is not None else None, txid)

    def _select(
        self, conn: psycopg.Connection, encoded: Mapping[str, Any], lock: bool = False, also: tuple | None = None
    ) -> dict[Any, Any]:
        """Rows of the keys in ``encoded`` (JSON text to key), decoded and keyed by the caller's keys.

        ``lock``: lock the rows until commit, in key order (so that concurrent updates
        cannot deadlock); ``also`` (``(txid, writer)``) locks that writer's rows of that
        txid too.
        """
        query = sql.SQL("SELECT key, value, prev, txid FROM {} WHERE key = ANY(%s)").format(self._t)
        params: list[Any] = [list(encoded)]
        if also is not None:
            query += sql.SQL(" OR (txid = %s AND writer = %s)")
            params += also
        if lock:
            query += sql.SQL(" ORDER BY key FOR UPDATE")
        found: dict[Any, Any] = {}
        for key, value, prev, txid in conn.execute(query, params):
            if key in encoded and value is not None:  # NULL value: a placeholder this update inserted
                found[encoded[key]] = self._decode(value, prev, txid)
        return found

    def get_many(self, keys: Iterable[Any]) -> dict[Any, Any]:
        encoded = {encode_json(k): k for k in keys}
        return self._retrying("get_many", lambda conn: self._select(conn, encoded))

    def items(self) -> dict[Any, Any]:
        def read(conn: psycopg.Connection) -> dict[Any, Any]:
            rows = conn.execute(
                sql.SQL("SELECT key, value, prev, txid FROM {} WHERE value IS NOT NULL").format(self._t)
            )
            return {as_key(decode_json(k)): self._decode(v, p, t) for k, v, p, t in rows}

        return self._retrying("items", read)

    # -- update -----------------------------------------------------------

    def update(
        self,
        txid: int,
        deltas: Mapping[Any, Any],
        combine: Callable[[Any, Any], Any] = operator.add,
        initial: Any = 0,
        writer: str | None = None,
    ) -> dict[Any, Any]:
        """One SQL transaction (see ``KeyedState.update``); an exception from ``combine`` rolls it back."""
        encoded = {encode_json(k): k for k in deltas}
        revert = self.opaque and writer is not None

        def attempt(conn: psycopg.Connection) -> dict[Any, Any]:
            with conn.transaction():
                # Lock the batch's rows. Missing keys get a placeholder row first (value NULL,
                # never committed as such): a concurrent update of the same new key then waits
                # for this one instead of computing from ``initial`` and overwriting it.
                # Both steps go in key order, so two updates cannot deadlock each other.
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (key) SELECT k FROM unnest(%s::text[]) AS k ORDER BY k"
                        " ON CONFLICT (key) DO NOTHING"
                    ).format(self._t),
                    [sorted(encoded)],
                )
                current = self._select(conn, encoded, lock=True, also=(txid, writer) if revert else None)
                new = self._applied(current, txid, deltas, combine, initial)
                if revert:  # keys this writer's earlier attempt of txid wrote, absent from this batch
                    conn.execute(
                        sql.SQL(
                            "UPDATE {} SET value = prev WHERE txid = %s AND writer = %s AND NOT (key = ANY(%s))"
                        ).format(self._t),
                        [txid, writer, list(encoded)],
                    )
                if new:
                    with conn.cursor() as cur:
                        cur.executemany(
                            sql.SQL(
                                "INSERT INTO {} (key, value, prev, txid, writer) VALUES (%s, %s, %s, %s, %s)"
                                " ON CONFLICT (key) DO UPDATE SET value = excluded.value, prev = excluded.prev,"
                                " txid = excluded.txid, writer = excluded.writer"
                            ).format(self._t),
                            [stored_row(text, new[k], writer) for text, k in encoded.items()],
                        )
            return new

        return self._retrying(f"update of txid {txid}", attempt)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
