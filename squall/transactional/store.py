"""Durable state for transactional topologies, behind a small interface.

Values are JSON (never pickle). Keys are strings; a key ``prefix<txid>`` holds
per-transaction entries that ``delete_below`` cleans up once committed.
The embedded default is SQLite.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def txid_of(key: str) -> int | None:
    """The numeric last level of ``key`` (``meta/7`` -> 7), or None."""
    _, sep, last = key.rpartition("/")
    return int(last) if sep and last.isascii() and last.isdigit() else None


def encode_value(key: str, value: Any) -> str:
    """``value`` as JSON; a TypeError naming ``key`` if it is not JSON-serializable."""
    try:
        return json.dumps(value)
    except TypeError as exc:
        raise TypeError(f"coordinator state {key!r} must be JSON-serializable: {exc}") from None


class CoordinatorStore:
    """Where a transactional topology keeps its progress."""

    def get(self, key: str, default: Any = None) -> Any:
        raise NotImplementedError

    def put(self, key: str, value: Any) -> None:
        raise NotImplementedError

    def delete_below(self, prefix: str, txid: int) -> None:
        """Delete every ``prefix<n>`` with ``n < txid``."""
        raise NotImplementedError

    def keys(self, prefix: str = "") -> list[str]:
        raise NotImplementedError

    @contextmanager
    def transaction(self) -> Iterator[None]:
        yield

    def close(self) -> None:
        """Release the store's connection."""


class SqliteCoordinatorStore(CoordinatorStore):
    """A coordinator store in a SQLite file, namespaced by the transactional topology's id."""

    def __init__(self, path: str | os.PathLike, topology_id: str) -> None:
        self.path, self.topology_id = str(path), topology_id
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS coordinator (topology TEXT, key TEXT, txid INTEGER, value TEXT,"
            " PRIMARY KEY (topology, key))"
        )
        self._depth = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")
        finally:
            self._depth = 0

    def get(self, key: str, default: Any = None) -> Any:
        row = self._db.execute(
            "SELECT value FROM coordinator WHERE topology = ? AND key = ?", (self.topology_id, key)
        ).fetchone()
        return default if row is None else json.loads(row[0])

    def put(self, key: str, value: Any) -> None:
        self._db.execute(
            "INSERT INTO coordinator VALUES (?, ?, ?, ?)"
            " ON CONFLICT (topology, key) DO UPDATE SET value = excluded.value",
            (self.topology_id, key, txid_of(key), encode_value(key, value)),
        )

    def delete_below(self, prefix: str, txid: int) -> None:
        self._db.execute(
            "DELETE FROM coordinator WHERE topology = ? AND key LIKE ? AND txid < ?",
            (self.topology_id, prefix.replace("%", r"\%") + "%", txid),
        )

    def keys(self, prefix: str = "") -> list[str]:
        rows = self._db.execute(
            "SELECT key FROM coordinator WHERE topology = ? AND key LIKE ? ORDER BY txid, key",
            (self.topology_id, prefix + "%"),
        )
        return [k for (k,) in rows]

    def close(self) -> None:
        self._db.close()
