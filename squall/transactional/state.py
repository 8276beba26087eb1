"""State helpers for exactly-once updates.

Store the txid next to the value, and let the strict commit order do the rest:

* ``TransactionalValue(value, txid)``: an update whose txid equals the stored
  one is already in the value and is skipped. For spouts that replay the same
  batch for a txid.
* ``OpaqueValue(value, prev_value, txid)``: an update whose txid equals the
  stored one is applied to ``prev_value`` instead (the batch may have changed);
  otherwise ``prev_value`` becomes the old value. For opaque spouts.

``KeyedState`` is the contract of a store of many such keys that applies a
batch's updates atomically; ``SqliteKeyedState`` keeps them in a SQLite table.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TransactionalValue:
    value: Any
    txid: int

    def updated(self, txid: int, delta: Any, combine: Callable[[Any, Any], Any] = operator.add) -> TransactionalValue:
        if txid == self.txid:
            return self
        return TransactionalValue(combine(self.value, delta), txid)

    @staticmethod
    def apply(current: TransactionalValue | None, txid: int, delta: Any, combine=operator.add, initial: Any = 0):
        return (current or TransactionalValue(initial, 0)).updated(txid, delta, combine)


@dataclass(frozen=True)
class OpaqueValue:
    value: Any
    prev_value: Any
    txid: int

    def updated(self, txid: int, delta: Any, combine: Callable[[Any, Any], Any] = operator.add) -> OpaqueValue:
        if txid == self.txid:
            return OpaqueValue(combine(self.prev_value, delta), self.prev_value, txid)
        return OpaqueValue(combine(self.value, delta), self.value, txid)

    @staticmethod
    def apply(current: OpaqueValue | None, txid: int, delta: Any, combine=operator.add, initial: Any = 0):
        return (current or OpaqueValue(initial, initial, 0)).updated(txid, delta, combine)


# an upsert's conflict clause: a stored key takes the new row's value, previous value, txid and writer
_REPLACING = (
    " ON CONFLICT (key) DO UPDATE SET"
    " value = excluded.value, prev = excluded.prev, txid = excluded.txid, writer = excluded.writer"
)
LOCK_TIMEOUT_SECS = 60  # how long an update waits for another writer of the same SQLite file
EXACT_IN_SQL = 2**52  # integer counts below this in size add up in SQLite's 64-bit integers exactly

_encode_str = json.encoder.encode_basestring_ascii  # C: what json.dumps gives a str


def encode_json(value: Any) -> str:
    """``json.dumps(value)``, with the common keys and values (str, int, None) at C speed."""
    kind = type(value)
    if kind is str:
        return _encode_str(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return json.dumps(value)


def decode_json(text: str) -> Any:
    """``json.loads(text)``, with plain integers and null read directly."""
    if text.isdigit() and text.isascii():
        return int(text)
    if text == "null":
        return None
    return json.loads(text)


def stored_row(key: str, value: TransactionalValue | OpaqueValue, writer: str | None) -> tuple:
    """What a keyed state stores for ``key`` (its JSON): ``(key, value, prev, txid, writer)``, values as JSON."""
    return key, encode_json(value.value), encode_json(getattr(value, "prev_value", None)), value.txid, writer


def _counts_document(encoded: dict[str, Any], deltas: Mapping[Any, Any]) -> str | None:
    """A batch of integer counts as one JSON object, each key's JSON to its count, for SQLite to add; None unless
    every count is a plain integer small enough to add exactly there."""
    counts = {}
    for text, key in encoded.items():
        delta = deltas[key]
        if type(delta) is not int or not -EXACT_IN_SQL < delta < EXACT_IN_SQL:
            return None
        counts[text] = delta
    return json.dumps(counts)


def as_key(value: Any) -> Any:
    """A JSON-decoded key, hashable again: lists become tuples."""
    return tuple(as_key(v) for v in value) if isinstance(value, list) else value


class KeyedState:
    """Keys to ``TransactionalValue``s or ``OpaqueValue``s (``opaque``) in a store.

    Keys and values are JSON (tuple keys come back as tuples). ``update`` applies
    one batch's deltas atomically. SQLite, Redis and PostgreSQL keep this contract.
    """

    opaque: bool

    def get_many(self, keys: Iterable[Any]) -> dict[Any, Any]:
        raise NotImplementedError

    def items(self) -> dict[Any, Any]:
        raise NotImplementedError

    def update(
        self,
        txid: int,
        deltas: Mapping[Any, Any],
        combine: Callable[[Any, Any], Any] = operator.add,
        initial: Any = 0,
        writer: str | None = None,
    ) -> dict[Any, Any]:
        """Apply one batch's ``deltas`` under ``txid`` atomically; returns the new values.

        Opaque state and a replayed txid: a key that an earlier attempt of ``txid``
        wrote, under the same ``writer``, and that this batch does not touch, goes
        back to its previous value: its tuples were not in this batch after all and
        will be counted in a later one. Give each committer task its own ``writer``
        (say ``f"{component}/{task_index}"``) and route keys to it with a fields
        grouping, so that a key always has the same writer.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's connection."""

    def get(self, key: Any) -> Any:
        return self.get_many([key]).get(key)

    def values(self) -> dict[Any, Any]:
        """``{key: value}`` without the txids."""
        return {k: v.value for k, v in self.items().items()}

    def _value(self, value: Any, prev: Any, txid: int) -> TransactionalValue | OpaqueValue:
        return OpaqueValue(value, prev, txid) if self.opaque else TransactionalValue(value, txid)

    def _applied(self, current: Mapping[Any, Any], txid: int, deltas: Mapping[Any, Any], combine, initial) -> dict:
        """The new value of each key of ``deltas``, given the ``current`` ones."""
        helper = OpaqueValue if self.opaque else TransactionalValue
        return {k: helper.apply(current.get(k), txid, d, combine, initial) for k, d in deltas.items()}


class _Connections:
    """Connections to SQLite files that a ``SqliteKeyedState`` closed, kept open for the next one of the same file
    in this process: a committer that opens its state for every batch then skips opening the file, setting it up,
    and the checkpoint SQLite runs when the last connection to a file closes (it copies the whole write-ahead log
    into the file, which the next connection then starts again). A kept connection is used again only while its
    file is the same file (same device and inode), in the process that opened it; at most ``KEEP`` are kept, none
    longer than ``IDLE_SECS``."""

    KEEP = 8
    IDLE_SECS = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[str, tuple[int, int], int, float, sqlite3.Connection, bool]] = []
        self._inherited: list[sqlite3.Connection] = []  # kept by the process this one was forked from: never closed

    def take(self, path: str) -> tuple[sqlite3.Connection, bool] | None:
        """A kept connection to ``path`` and whether its SQLite has the JSON functions, or None."""
        try:
            identity = _identity(path)
        except OSError:
            return None
        found = None
        with self._lock:
            stale = self._expire()
            for i, (kept_path, kept_identity, pid, _, db, json_each) in enumerate(self._idle):
                if kept_path == path and kept_identity == identity and pid == os.getpid():
                    del self._idle[i]
                    found = db, json_each
                    break
        _close_all(stale)
        return found

    def keep(self, path: str, db: sqlite3.Connection, json_each: bool) -> None:
        """Keep ``db`` for the next state of ``path``, or close it."""
        try:
            identity = _identity(path)
        except OSError:
            identity = None
        if identity is None or db.in_transaction:
            db.close()
            return
        with self._lock:
            stale = self._expire()
            self._idle.append((path, identity, os.getpid(), time.monotonic(), db, json_each))
            while len(self._idle) > self.KEEP:
                stale.append(self._idle.pop(0)[4])
        _close_all(stale)

    def _expire(self) -> list[sqlite3.Connection]:
        """Take out the connections kept too long, or kept by the process this one was forked from."""
        oldest, pid = time.monotonic() - self.IDLE_SECS, os.getpid()
        stale = [entry for entry in self._idle if entry[3] < oldest or entry[2] != pid]
        if stale:
            self._idle = [entry for entry in self._idle if not (entry[3] < oldest or entry[2] != pid)]
        # Closing a connection this process inherited could checkpoint and delete the write-ahead log the process
        # that opened it still uses (SQLite's locks are not inherited): it is only set aside.
        self._inherited.extend(entry[4] for entry in stale if entry[2] != pid)
        return [entry[4] for entry in stale if entry[2] == pid]


def _identity(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _close_all(connections: list[sqlite3.Connection]) -> None:
    for db in connections:
        with contextlib.suppress(sqlite3.Error):
            db.close()


_CONNECTIONS = _Connections()
_CLOSED = sqlite3.connect(":memory:", check_same_thread=False)  # a closed state's: using it raises
_CLOSED.close()


class SqliteKeyedState(KeyedState):
    """``KeyedState`` in a SQLite table; ``update`` is one SQLite transaction. Integer counts (the default
    ``combine``, ``operator.add`` from 0) are added by SQLite itself, in one statement for the whole batch.
    ``close`` keeps the connection for the next state of the same file in this process (``_Connections``)."""

    def __init__(self, path: str | os.PathLike, table: str, opaque: bool = False) -> None:
        if not table.isidentifier():
            raise ValueError(f"table name must be an identifier, got {table!r}")
        self.path, self.table, self.opaque = str(path), table, opaque
        self._quoted = f'"{table}"'  # a name SQL reserves, such as values, is a table name too
        kept = _CONNECTIONS.take(self.path)
        if kept is not None:
            self._db, self._json_each = kept
        else:
            self._db = sqlite3.connect(
                self.path, timeout=LOCK_TIMEOUT_SECS, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            try:  # SQLite's JSON functions, built in since 3.38: one query reads a batch's keys
                self._db.execute("SELECT count(*) FROM json_each('[]')")
                self._json_each = True
            except sqlite3.OperationalError:
                self._json_each = False
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {self._quoted} (key TEXT PRIMARY KEY, value TEXT, prev TEXT, txid INTEGER,"
            " writer TEXT)"
        )

    def _begin_writing(self) -> None:
        """``BEGIN IMMEDIATE``, waiting up to ``LOCK_TIMEOUT_SECS`` for another writer (another committer task) to
        finish. SQLite's own wait sleeps up to 100 ms at a time, long after the lock is free; this one looks again
        within a millisecond, since commits come one after the other in txid order."""
        deadline = time.monotonic() + LOCK_TIMEOUT_SECS
        pause = 0.0002
        self._db.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    self._db.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                time.sleep(pause)
                pause = min(2 * pause, 0.001)
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {int(LOCK_TIMEOUT_SECS * 1000)}")

    def _decode(self, row) -> TransactionalValue | OpaqueValue:
        return self._value(decode_json(row[0]), decode_json(row[1]), row[2])

    def get_many(self, keys: Iterable[Any]) -> dict[Any, Any]:
        return self._get_encoded({encode_json(k): k for k in keys})

    def _get_encoded(self, encoded: dict[str, Any]) -> dict[Any, Any]:
        """The values of the keys ``encoded`` maps their JSON to."""
        return {encoded[key]: self._decode(row) for key, row in self._stored(list(encoded)).items()}

    def _stored(self, texts: list[str]) -> dict[str, tuple]:
        """``{key JSON: (value JSON, prev JSON, txid)}`` of the stored keys among ``texts``, in one query where
        SQLite has its JSON functions."""
        if self._json_each:
            rows = self._db.execute(
                f"SELECT key, value, prev, txid FROM {self._quoted} WHERE key IN (SELECT value FROM json_each(?))",
                [json.dumps(texts)],
            )
            return {key: (value, prev, txid) for key, value, prev, txid in rows}
        found: dict[str, tuple] = {}
        for chunk in range(0, len(texts), 500):
            part = texts[chunk : chunk + 500]
            marks = ",".join("?" * len(part))
            for key, value, prev, txid in self._db.execute(
                f"SELECT key, value, prev, txid FROM {self._quoted} WHERE key IN ({marks})", part
            ):
                found[key] = (value, prev, txid)
        return found

    def update(
        self,
        txid: int,
        deltas: Mapping[Any, Any],
        combine: Callable[[Any, Any], Any] = operator.add,
        initial: Any = 0,
        writer: str | None = None,
    ) -> dict[Any, Any]:
        encoded = {encode_json(k): k for k in deltas}
        counts = document = None
        if not self.opaque and self._json_each and combine is operator.add and type(initial) is int and initial == 0:
            counts = _counts_document(encoded, deltas)  # before the lock: another writer may be waiting for it
        self._begin_writing()
        try:
            if self.opaque:
                new = self._applied(self._get_encoded(encoded), txid, deltas, combine, initial)
                if writer is not None:
                    touched = list(encoded)
                    self._db.execute(
                        f"UPDATE {self._quoted} SET value = prev WHERE txid = ? AND writer = ?"
                        f" AND key NOT IN ({','.join('?' * len(touched))})",
                        [txid, writer, *touched],
                    )
                self._db.executemany(
                    f"INSERT INTO {self._quoted} VALUES (?, ?, ?, ?, ?){_REPLACING}",
                    [stored_row(text, new[k], writer) for text, k in encoded.items()],
                )
            else:
                document = None if counts is None else self._add_counts(counts, len(encoded), txid, writer)
                if document is None:
                    new = self._update_transactional(encoded, txid, deltas, combine, initial, writer)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        if document is not None:  # decoded after the commit: the next writer goes on meanwhile
            return {encoded[text]: TransactionalValue(value, txid) for text, value in json.loads(document)}
        return new

    def _update_transactional(self, encoded: dict[str, Any], txid: int, deltas, combine, initial, writer) -> dict:
        """``TransactionalValue.apply`` to each key, inside ``update``'s transaction. With SQLite's JSON functions
        the batch's keys are read in one statement and written in another, so that a committer does not give up
        the GIL once per key (other batches' bolts run in this process meanwhile)."""
        texts = list(encoded)
        stored = self._stored_json(texts) if self._json_each else None
        if stored is None:
            stored = {text: (decode_json(value), at) for text, (value, _, at) in self._stored(texts).items()}
        new: dict[Any, Any] = {}
        written: list[list] = []
        for text, key in encoded.items():
            row = stored.get(text)
            if row is not None and row[1] == txid:  # this txid is in the value already
                value = row[0]
            else:
                value = combine(initial if row is None else row[0], deltas[key])
            new[key] = TransactionalValue(value, txid)
            written.append([text, encode_json(value)])
        if self._json_each:
            self._db.execute(
                f"INSERT INTO {self._quoted} (key, value, prev, txid, writer)"
                " SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), 'null', ?, ? FROM json_each(?)"
                f" WHERE true{_REPLACING}",
                [txid, writer, json.dumps(written)],
            )
        else:
            self._db.executemany(
                f"INSERT INTO {self._quoted} VALUES (?, ?, 'null', ?, ?){_REPLACING}",
                [(text, value, txid, writer) for text, value in written],
            )
        return new

    def _add_counts(self, counts: str, keys: int, txid: int, writer) -> str | None:
        """Integer counts added in SQLite itself, in one statement that inserts the new keys and adds to the
        stored ones (``counts``: ``_counts_document``, of ``keys`` keys), then one that reads the batch's keys back
        as one JSON document, ``[[key JSON, count], ...]``: the committer's thread gives up the GIL twice for all
        of it. A stored value that is not an integer small enough to add exactly is left as it is, and then
        None: the general path finishes the batch (the keys this statement wrote carry ``txid`` by then, which
        the general path leaves as they are)."""
        table = self._quoted
        written = self._db.execute(
            f"INSERT INTO {table} (key, value, prev, txid, writer)"
            " SELECT key, CAST(value AS TEXT), 'null', ?2, ?3 FROM json_each(?1) WHERE true"
            f" ON CONFLICT (key) DO UPDATE SET value = CASE WHEN {table}.txid = ?2 THEN {table}.value"  # in already
            f" ELSE CAST(CAST({table}.value AS INTEGER) + CAST(excluded.value AS INTEGER) AS TEXT) END,"
            " prev = 'null', txid = ?2, writer = ?3"
            f" WHERE CAST(CAST({table}.value AS INTEGER) AS TEXT) = {table}.value"
            f" AND abs(CAST({table}.value AS INTEGER)) < ?4",
            [counts, txid, writer, EXACT_IN_SQL],
        ).rowcount
        if written != keys:
            return None
        (document,) = self._db.execute(
            f"SELECT json_group_array(json_array(key, CAST(value AS INTEGER))) FROM {table}"
            " WHERE key IN (SELECT key FROM json_each(?))",
            [counts],
        ).fetchone()
        return document

    def _stored_json(self, texts: list[str]) -> dict[str, tuple] | None:
        """``{key JSON: (value, txid)}`` of the stored keys among ``texts``, read as one JSON document; None when
        a stored value is not JSON SQLite reads (``NaN``, which Python writes)."""
        try:
            (document,) = self._db.execute(
                f"SELECT json_group_array(json_array(key, json(value), txid)) FROM {self._quoted}"
                " WHERE key IN (SELECT value FROM json_each(?))",
                [json.dumps(texts)],
            ).fetchone()
        except sqlite3.OperationalError:
            return None
        return {text: (value, stored_txid) for text, value, stored_txid in json.loads(document)}

    def items(self) -> dict[Any, Any]:
        rows = self._db.execute(f"SELECT key, value, prev, txid FROM {self._quoted}")
        return {as_key(decode_json(k)): self._decode((v, p, t)) for k, v, p, t in rows}

    def close(self) -> None:
        db, self._db = self._db, _CLOSED
        if db is not _CLOSED:
            _CONNECTIONS.keep(self.path, db, self._json_each)
