"""``SqliteMapState``: a durable map state in one SQLite file, for ``squall run`` on one machine.

Every partition writes its own keys (a ``group_by`` sends each key to one task) into one table of the file, each
``multi_put`` in one transaction; the file outlives the run, so counts go on where they stopped. Keys and values
are stored as JSON.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from squall.trident.state import (
    BackingMap,
    CachedMap,
    MapState,
    NonTransactionalMap,
    OpaqueMap,
    OpaqueValue,
    Snapshottable,
    SnapshottableMap,
    StateFactory,
    TransactionalMap,
    TransactionalValue,
    TupleCollection,
    ValueUpdater,
)

GLOBAL_KEY = ["$SQLITE-MAP-STATE-GLOBAL$"]
LOCK_TIMEOUT_SECS = 60
KINDS = ("opaque", "transactional", "non_transactional")


def _encode(kind: str, value: Any) -> str:
    if kind == "opaque":
        return json.dumps({"v": value.curr, "t": value.curr_txid, "p": value.prev})
    if kind == "transactional":
        return json.dumps({"v": value.val, "t": value.txid})
    return json.dumps({"v": value})


def _decode(kind: str, text: str) -> Any:
    data = json.loads(text)
    if kind == "opaque":
        return OpaqueValue(data["t"], data["v"], data["p"])
    if kind == "transactional":
        return TransactionalValue(data["t"], data["v"])
    return data["v"]


def _key(key: Sequence[Any]) -> str:
    return json.dumps(list(key), separators=(",", ":"))


class SqliteBackingMap(BackingMap):
    def __init__(self, path: str, table: str, kind: str) -> None:
        if not table.replace("_", "").isalnum():
            raise ValueError(f"SqliteMapState: table name {table!r} must be letters, digits and underscores")
        self.path, self.table, self.kind = path, table, kind
        self.db = sqlite3.connect(path, timeout=LOCK_TIMEOUT_SECS, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        encoded = [_key(k) for k in keys]
        found: dict[str, Any] = {}
        for start in range(0, len(encoded), 500):
            chunk = encoded[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(f"SELECT key, value FROM {self.table} WHERE key IN ({marks})", chunk)
            found.update((k, _decode(self.kind, v)) for k, v in rows)
        return [found.get(k) for k in encoded]

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        rows = [(_key(k), _encode(self.kind, v)) for k, v in zip(keys, vals, strict=True)]
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(
                f"INSERT INTO {self.table} VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", rows
            )

    def items(self) -> Iterator[tuple[list[Any], Any]]:
        for key, value in self.db.execute(f"SELECT key, value FROM {self.table}").fetchall():
            yield json.loads(key), _decode(self.kind, value)

    def close(self) -> None:
        self.db.close()


class SqliteMapState(MapState, Snapshottable, TupleCollection):
    """A map state in a SQLite file: ``SqliteMapState.opaque(path)``, ``.transactional(path)`` or
    ``.non_transactional(path)`` give its factory; ``SqliteMapState.read(path)`` what it holds."""

    def __init__(self, backing: SqliteBackingMap, cache_size: int) -> None:
        self.backing = backing
        cached = CachedMap(backing, cache_size) if cache_size else backing
        kind = {"opaque": OpaqueMap, "transactional": TransactionalMap, "non_transactional": NonTransactionalMap}
        self.delegate = SnapshottableMap(kind[backing.kind].build(cached), GLOBAL_KEY)

    class Factory(StateFactory):
        def __init__(self, path: str, kind: str, table: str = "trident", cache_size: int = 1000) -> None:
            if kind not in KINDS:
                raise ValueError(f"SqliteMapState: kind {kind!r} is not one of {KINDS}")
            self.path, self.kind, self.table, self.cache_size = str(path), kind, table, cache_size

        def make_state(self, conf: dict, metrics: Any, partition_index: int, num_partitions: int) -> SqliteMapState:
            return SqliteMapState(SqliteBackingMap(self.path, self.table, self.kind), self.cache_size)

    @classmethod
    def opaque(cls, path: str, table: str = "trident", cache_size: int = 1000) -> SqliteMapState.Factory:
        return cls.Factory(path, "opaque", table, cache_size)

    @classmethod
    def transactional(cls, path: str, table: str = "trident", cache_size: int = 1000) -> SqliteMapState.Factory:
        return cls.Factory(path, "transactional", table, cache_size)

    @classmethod
    def non_transactional(cls, path: str, table: str = "trident", cache_size: int = 1000) -> SqliteMapState.Factory:
        return cls.Factory(path, "non_transactional", table, cache_size)

    @staticmethod
    def read(path: str, table: str = "trident") -> dict[tuple, Any]:
        """What a state's file holds: each key (a tuple) with its current value."""
        db = sqlite3.connect(path, timeout=LOCK_TIMEOUT_SECS)
        try:
            rows = db.execute(f"SELECT key, value FROM {table}").fetchall()
        finally:
            db.close()
        return {tuple(json.loads(key)): json.loads(value)["v"] for key, value in rows}

    def begin_commit(self, txid: int | None) -> None:
        self.delegate.begin_commit(txid)

    def commit(self, txid: int | None) -> None:
        self.delegate.commit(txid)

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        return self.delegate.multi_get(keys)

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        self.delegate.multi_put(keys, vals)

    def multi_update(self, keys: list[Sequence[Any]], updaters: list[ValueUpdater]) -> list[Any]:
        return self.delegate.multi_update(keys, updaters)

    def get(self) -> Any:
        return self.delegate.get()

    def set(self, value: Any) -> None:
        self.delegate.set(value)

    def update(self, updater: ValueUpdater) -> Any:
        return self.delegate.update(updater)

    def get_tuples(self) -> Iterator[list[Any]]:
        kind = self.backing.kind
        for key, value in self.backing.items():
            if key != GLOBAL_KEY:
                current = value.curr if kind == "opaque" else value.val if kind == "transactional" else value
                yield [*key, current]

    def close(self) -> None:
        self.backing.close()
