"""An embedded reliable queue with Kestrel's semantics, on SQLite, and a spout that reads it.

``ReliableQueue`` needs no server: any number of processes on one machine share
it through a SQLite file.

* ``put(payload)`` appends a JSON-serializable payload.
* ``open()`` hands out the oldest ready message and marks it pending for this
  consumer, with a unique id; no other consumer sees it while it is pending.
* ``ack(id)`` removes it; ``abort(id)`` puts it back at the head of the queue.
* ``open_many``, ``ack_many`` and ``abort_many`` do the same for many messages in one transaction.
* When a consumer closes, or its process dies, its pending messages go back on
  the queue. A consumer on this host is dead when its process is gone; a
  consumer elsewhere is dead when it has not been heard from for ``lease_secs``.

Payloads are JSON, never pickle: a queue file is outside the process tree.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from squall.model.components import Spout
from squall.model.fields import Fields, as_fields

log = logging.getLogger("squall.queue")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    body TEXT NOT NULL,
    consumer TEXT,            -- NULL: ready; else the consumer holding it pending
    deliveries INTEGER NOT NULL DEFAULT 0,
    dead_reason TEXT          -- set when the message was moved aside as malformed
);
CREATE INDEX IF NOT EXISTS ready ON messages (queue, consumer, id) WHERE dead_reason IS NULL;
CREATE TABLE IF NOT EXISTS consumers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_started TEXT,
    heartbeat REAL NOT NULL
);
"""


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` (to tell a reused pid apart), where /proc has it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive_here(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or _process_start(pid) in (None, started)


class ReliableQueue:
    """One consumer's connection to a named queue in a SQLite file.

    ``consumer`` names a consumer that outlives its processes (a spout task): a new connection under that name
    takes over at once what an earlier one left pending under it (it died, or is being replaced), and puts it
    back on the queue ahead of the newer messages. Without a name, the consumer is this connection alone, and
    what a dead one left pending goes back once its process is seen gone (or its lease has run out)."""

    def __init__(
        self, path: str | os.PathLike, queue: str = "default", lease_secs: float = 60.0, consumer: str | None = None
    ) -> None:
        self.path, self.queue, self.lease_secs = str(path), queue, lease_secs
        # This connection's own id; a named consumer's carries its name, so its next instance finds what it left.
        self.consumer = uuid.uuid4().hex if consumer is None else f"{consumer}#{uuid.uuid4().hex}"
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._pid = os.getpid()
        self._pid_started = _process_start(self._pid)
        self._last_reclaim = 0.0
        if consumer is not None:
            with self._tx():  # what earlier instances of this consumer left pending: first in line again
                earlier = (len(consumer) + 1, f"{consumer}#")
                self._db.execute("UPDATE messages SET consumer = NULL WHERE substr(consumer, 1, ?) = ?", earlier)
                self._db.execute("DELETE FROM consumers WHERE substr(id, 1, ?) = ?", earlier)
        self.reclaim()

    # -- producing -----------------------------------------------------------
    def put(self, payload: Any) -> int:
        return self.put_many([payload])[0]

    def put_many(self, payloads: Iterable[Any]) -> list[int]:
        bodies = [json.dumps(p) for p in payloads]
        with self._tx():
            return [
                self._db.execute("INSERT INTO messages (queue, body) VALUES (?, ?)", (self.queue, b)).lastrowid
                for b in bodies
            ]

    def put_raw(self, body: str) -> int:
        """Append a body as it is, unchecked (as a foreign producer might)."""
        with self._tx():
            return self._db.execute("INSERT INTO messages (queue, body) VALUES (?, ?)", (self.queue, body)).lastrowid

    # -- consuming -----------------------------------------------------------
    def open(self) -> tuple[int, str] | None:
        """The oldest ready message as ``(id, body)``, now pending for this consumer; None if empty.

        ``body`` is the stored JSON text; decode it with ``json.loads``.
        """
        messages = self.open_many(1)
        return messages[0] if messages else None

    def open_many(self, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` of the oldest ready messages, oldest first, now pending for this consumer: one
        transaction for them all."""
        if time.time() - self._last_reclaim > 1.0:
            self.reclaim()
        with self._tx():
            self._heartbeat()
            rows = self._db.execute(
                "SELECT id, body FROM messages WHERE queue = ? AND consumer IS NULL AND dead_reason IS NULL"
                " ORDER BY id LIMIT ?",
                (self.queue, limit),
            ).fetchall()
            self._db.executemany(
                "UPDATE messages SET consumer = ?, deliveries = deliveries + 1 WHERE id = ?",
                [(self.consumer, message_id) for message_id, _ in rows],
            )
        return rows

    def _heartbeat(self) -> None:
        """Say this consumer is alive (and register it again should another have judged it dead)."""
        self._db.execute(
            "INSERT OR REPLACE INTO consumers VALUES (?, ?, ?, ?, ?)",
            (self.consumer, socket.gethostname(), self._pid, self._pid_started, time.time()),
        )

    def ack(self, message_id: int) -> None:
        self.ack_many([message_id])

    def ack_many(self, message_ids: Iterable[int]) -> None:
        """Remove these messages of this consumer, in one transaction."""
        with self._tx():
            self._db.executemany(
                "DELETE FROM messages WHERE id = ? AND consumer = ?", [(i, self.consumer) for i in message_ids]
            )

    def abort(self, message_id: int) -> None:
        self.abort_many([message_id])

    def abort_many(self, message_ids: Iterable[int]) -> None:
        """Put these messages of this consumer back on the queue, in one transaction."""
        with self._tx():
            self._db.executemany(
                "UPDATE messages SET consumer = NULL WHERE id = ? AND consumer = ?",
                [(i, self.consumer) for i in message_ids],
            )

    def dead_letter(self, message_id: int, reason: str) -> None:
        """Set a malformed message aside for good: it is never handed out again."""
        with self._tx():
            self._db.execute("UPDATE messages SET consumer = NULL, dead_reason = ? WHERE id = ?", (reason, message_id))

    def close(self) -> None:
        """Put this consumer's pending messages back on the queue and leave."""
        with self._tx():
            self._db.execute("UPDATE messages SET consumer = NULL WHERE consumer = ?", (self.consumer,))
            self._db.execute("DELETE FROM consumers WHERE id = ?", (self.consumer,))
        self._db.close()

    def reclaim(self) -> int:
        """Put back the pending messages of consumers that died; returns how many."""
        self._last_reclaim = now = time.time()
        host = socket.gethostname()
        with self._tx():
            self._heartbeat()
            dead = [
                cid
                for cid, chost, pid, started, heartbeat in self._db.execute("SELECT * FROM consumers").fetchall()
                if cid != self.consumer
                and (not _alive_here(pid, started) if chost == host else now - heartbeat > self.lease_secs)
            ]
            moved = 0
            for cid in dead:
                moved += self._db.execute("UPDATE messages SET consumer = NULL WHERE consumer = ?", (cid,)).rowcount
                self._db.execute("DELETE FROM consumers WHERE id = ?", (cid,))
        if moved:
            log.info(
                "queue %s: %d pending message(s) of %d dead consumer(s) back on the queue", self.queue, moved, len(dead)
            )
        return moved

    # -- inspection ----------------------------------------------------------
    def counts(self) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT CASE WHEN dead_reason IS NOT NULL THEN 'dead' WHEN consumer IS NULL THEN 'ready'"
            " ELSE 'pending' END, count(*) FROM messages WHERE queue = ? GROUP BY 1",
            (self.queue,),
        ).fetchall()
        return {"ready": 0, "pending": 0, "dead": 0, **dict(rows)}

    def _tx(self):
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")


class MalformedMessage(ValueError):
    pass


def decode_values(body: str, fields: Fields) -> tuple:
    """A JSON message as tuple values: a list of them, an object keyed by field, or a lone value."""
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedMessage(f"invalid JSON: {exc}") from None
    except (RecursionError, ValueError, TypeError) as exc:  # nested too deep, say: still not a tuple
        raise MalformedMessage(f"undecodable JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if isinstance(payload, dict):
        missing = [f for f in fields if f not in payload]
        if missing:
            raise MalformedMessage(f"object lacks field(s) {missing}; expected {list(fields)}")
        return tuple(payload[f] for f in fields)
    if isinstance(payload, list):
        if len(payload) != len(fields):
            raise MalformedMessage(f"{len(payload)} value(s) for {len(fields)} field(s) {list(fields)}")
        return tuple(payload)
    if len(fields) == 1:
        return (payload,)
    raise MalformedMessage(f"a lone value for {len(fields)} fields {list(fields)}")


class QueueSpout(Spout):
    """Emits each message of a ``ReliableQueue`` with the queue's message id as its msg id.

    Guarantee: at-least-once. ``ack`` removes the message; ``fail`` aborts it, so
    the queue hands it out again, before the newer messages this spout had
    claimed and not yet emitted (they go back with it): what is replayed comes
    out in the queue's order. Each spout task is one consumer of the queue, named
    by the topology, the component and the task: when its process dies, the
    task's next instance puts what it left pending back on the queue as it
    opens, so the oldest messages come out first again (an event-time window
    downstream would otherwise take them for late ones). Malformed messages (invalid JSON, the wrong number of
    fields) are reported, set aside in the queue (``dead``) and never emitted.

    Reads and acks go to the queue in batches, as a Kafka consumer polls: each
    claim takes up to ``prefetch`` messages in one transaction (they are pending
    for this spout from then on, and go back on the queue on ``deactivate`` and
    ``close``), and acks are removed together at the spout's next call, or once
    ``prefetch`` of them wait. A message acked but not yet removed when the
    spout's process dies is delivered again, as at-least-once allows.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        queue: str = "default",
        fields: Sequence[str] | Fields = ("value",),
        prefetch: int = 100,
    ) -> None:
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 1:
            raise ValueError(f"QueueSpout prefetch must be an int >= 1, got {prefetch!r}")
        self.path, self.queue, self.prefetch = str(path), queue, prefetch
        self.outputs = as_fields(fields)

    def open(self, conf, context, collector) -> None:
        self._collector = collector
        consumer = None  # a spout opened by hand, with no task: a consumer of its own
        if context is not None:
            consumer = f"{conf.get('topology.name') or ''}/{context.component_id}/{context.task_id}"
        self._queue = ReliableQueue(self.path, self.queue, consumer=consumer)
        self._claimed: deque[tuple[int, str]] = deque()  # pending for this spout, not emitted yet
        self._acked: list[int] = []  # acked, not yet removed from the queue

    def next_tuple(self) -> None:
        self._remove_acked()
        while True:
            if not self._claimed:
                self._claimed.extend(self._queue.open_many(self.prefetch))
                if not self._claimed:
                    return
            message_id, body = self._claimed.popleft()
            try:
                values = decode_values(body, self.outputs)
            except MalformedMessage as exc:
                self._collector.report_malformed(f"queue {self.queue} message {message_id}: {exc}; set aside")
                self._queue.dead_letter(message_id, str(exc))
                continue
            self._collector.emit(values, msg_id=message_id)
            return

    def ack(self, msg_id: int) -> None:
        self._acked.append(msg_id)
        if len(self._acked) >= self.prefetch:
            self._remove_acked()

    def fail(self, msg_id: int) -> None:
        """Back on the queue, with what is claimed and not emitted: the queue hands out the oldest first, so the
        failed message comes out again before newer ones (an event-time window downstream would otherwise take
        it for a late one once the newer ones had moved its watermark on)."""
        self._give_back(msg_id)

    def deactivate(self) -> None:
        """Acked messages are removed, and those claimed but not emitted go back for other consumers."""
        self._remove_acked()
        self._give_back()

    def _give_back(self, *message_ids: int) -> None:
        """``message_ids`` and every message claimed and not yet emitted, back on the queue in one transaction."""
        self._queue.abort_many([*message_ids, *(message_id for message_id, _ in self._claimed)])
        self._claimed.clear()

    def close(self) -> None:
        self._remove_acked()
        self._queue.close()  # every message still pending here goes back on the queue

    def _remove_acked(self) -> None:
        if self._acked:
            self._queue.ack_many(self._acked)
            self._acked = []
