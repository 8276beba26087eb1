"""``SqliteMapState``: a durable map state in one SQLite file, for ``squall run`` on one machine.

Every partition writes its own keys (a ``group_by`` sends each key to one task) into one table of the file, each
``multi_put`` in one transaction; the file outlives the run, so counts go on where they stopped. Keys and values
are stored as JSON.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from squall.trident.state import MAP_KINDS, StateFactory, StoredBackingMap, StoredMapState, current_of

LOCK_TIMEOUT_SECS = 60


def _table(table: str) -> str:
    if not table.replace("_", "").isalnum():
        raise ValueError(f"SqliteMapState: table name {table!r} must be letters, digits and underscores")
    return table


class SqliteBackingMap(StoredBackingMap):
    def __init__(self, path: str, table: str, kind: str) -> None:
        self.path, self.table, self.kind = path, _table(table), kind
        self.db = sqlite3.connect(path, timeout=LOCK_TIMEOUT_SECS, check_same_thread=False, isolation_level=None)
        deadline = time.monotonic() + LOCK_TIMEOUT_SECS
        while True:  # the partitions open the file at once: turning WAL on may find it locked, without waiting
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def read(self, keys: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(self.db.execute(f"SELECT key, value FROM {self.table} WHERE key IN ({marks})", chunk))
        return found

    def write(self, rows: dict[str, str]) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(
                f"INSERT INTO {self.table} VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                rows.items(),
            )

    def scan(self) -> Iterator[tuple[str, str]]:
        yield from self.db.execute(f"SELECT key, value FROM {self.table}").fetchall()

    def close(self) -> None:
        self.db.close()


class SqliteMapState(StoredMapState):
    """A map state in a SQLite file: ``SqliteMapState.opaque(path)``, ``.transactional(path)`` or
    ``.non_transactional(path)`` give its factory; ``SqliteMapState.read(path)`` what it holds."""

    class Factory(StateFactory):
        def __init__(self, path: str, kind: str, table: str = "trident", cache_size: int = 1000) -> None:
            if kind not in MAP_KINDS:
                raise ValueError(f"SqliteMapState: kind {kind!r} is not one of {MAP_KINDS}")
            self.path, self.kind, self.table, self.cache_size = str(path), kind, _table(table), cache_size

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
            rows = db.execute(f"SELECT key, value FROM {_table(table)}").fetchall()
        finally:
            db.close()
        return {tuple(json.loads(key)): current_of(value) for key, value in rows}
