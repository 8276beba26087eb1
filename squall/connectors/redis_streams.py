"""A reliable spout over a Redis Stream consumer group.

Guarantee: at-least-once. Each entry is read with XREADGROUP and emitted with its
entry id as the msg id; ``ack`` is XACK. A failed entry is emitted again. Entries
left pending by a consumer that died (or that stayed unacked longer than
``claim_idle_ms``) are taken over with XAUTOCLAIM and emitted again.

Entries carry their tuple as JSON in one field (``data`` by default): a list of
values, an object keyed by field name, or a lone value for a single field. A
malformed entry is never emitted: it is copied to a dead-letter stream with the
reason, and acked, so it cannot loop. Never pickle.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import Any, TypeVar

import redis

from squall.connectors import common
from squall.connectors.common import BrokerUnavailable, redact, url_from
from squall.connectors.queue import MalformedMessage, decode_values
from squall.model.components import Spout
from squall.model.config import SQUALL_REDIS_URL
from squall.model.fields import Fields, as_fields

__all__ = ["BrokerUnavailable", "RedisStreamSpout", "append", "connect", "with_retries"]

T = TypeVar("T")
LOST = (redis.ConnectionError, redis.TimeoutError)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def connect(url: str) -> redis.Redis:
    """A client for ``url``, checked with a PING; a clear error naming the URL if it is down."""
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise BrokerUnavailable(f"cannot reach Redis at {redact(url)}: {exc}") from None
    return client


def append(url: str, stream: str, payloads: Iterable[Any], data_field: str = "data") -> list[str]:
    """Append each payload to ``stream`` as JSON in ``data_field``, pipelined; returns the entry ids."""
    client = connect(url)
    ids: list[str] = []
    payloads = iter(payloads)
    try:
        while chunk := list(islice(payloads, 5000)):
            pipe = client.pipeline(transaction=False)
            for payload in chunk:
                pipe.xadd(stream, {data_field: json.dumps(payload)})
            ids += [_text(entry_id) for entry_id in pipe.execute()]
    finally:
        client.close()
    return ids


def with_retries(what: str, call: Callable[[], T]) -> T:
    """Run a Redis ``call``, retrying a lost connection with backoff."""
    return common.with_retries(what, call, LOST)


class RedisStreamSpout(Spout):
    """Reads ``stream`` of the Redis server at ``url`` (else config ``squall.redis.url``) in ``group``."""

    def __init__(
        self,
        url: str | None,
        stream: str,
        group: str = "squall",
        fields: Sequence[str] | Fields = ("value",),
        data_field: str = "data",
        dead_letter_stream: str | None = None,
        claim_idle_ms: int = 60_000,
        read_count: int = 100,
    ) -> None:
        self.url, self.stream, self.group = url, stream, group
        self.outputs = as_fields(fields)
        self.data_field = data_field
        self.dead_letter_stream = dead_letter_stream or f"{stream}:dead"
        self.claim_idle_ms, self.read_count = claim_idle_ms, read_count

    def open(self, conf, context, collector) -> None:
        self._collector = collector
        self._component = context.component_id
        self._client = connect(url_from(self.url, conf, SQUALL_REDIS_URL, f"spout {self._component}"))
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            self._client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._buffer: deque[tuple[str, dict]] = deque()
        self._in_flight: dict[str, tuple] = {}  # entry id -> values, until acked
        self._retry: deque[str] = deque()
        self._unacked: list[str] = []  # acks to send again after a lost connection
        self._last_claim = 0.0

    # -- reading -------------------------------------------------------------
    def _read_new(self) -> None:
        reply = with_retries(
            f"XREADGROUP {self.stream}",
            lambda: self._client.xreadgroup(self.group, self.consumer, {self.stream: ">"}, count=self.read_count),
        )
        for _, entries in reply or []:
            self._buffer.extend((_text(entry_id), data) for entry_id, data in entries)

    def _claim_abandoned(self) -> None:
        self._last_claim = time.monotonic()
        start = "0-0"
        while True:
            reply = with_retries(
                f"XAUTOCLAIM {self.stream}",
                lambda s=start: self._client.xautoclaim(
                    self.stream, self.group, self.consumer, self.claim_idle_ms, start_id=s, count=self.read_count
                ),
            )
            start, entries = reply[0], reply[1]
            buffered = {entry_id for entry_id, _ in self._buffer}
            for entry_id, data in entries:
                entry_id = _text(entry_id)
                if entry_id not in self._in_flight and entry_id not in buffered and data:
                    self._buffer.append((entry_id, data))
            if _text(start) == "0-0":  # the whole pending list was scanned
                return

    def next_tuple(self) -> None:
        self._send_acks()
        while self._retry:
            entry_id = self._retry.popleft()
            if entry_id in self._in_flight:
                self._collector.emit(self._in_flight[entry_id], msg_id=entry_id)
                return
        if time.monotonic() - self._last_claim > max(self.claim_idle_ms / 2000.0, 0.05):
            self._claim_abandoned()
        if not self._buffer:
            self._read_new()
        while self._buffer:
            entry_id, data = self._buffer.popleft()
            values = self._decode(entry_id, data)
            if values is not None:
                self._in_flight[entry_id] = values
                self._collector.emit(values, msg_id=entry_id)
                return

    def _decode(self, entry_id: str, data: dict) -> tuple | None:
        raw = data.get(self.data_field.encode(), data.get(self.data_field))
        try:
            if raw is None:
                raise MalformedMessage(f"no {self.data_field!r} field")
            return decode_values(_text(raw), self.outputs)
        except (MalformedMessage, UnicodeDecodeError) as exc:
            self._collector.report_malformed(
                f"stream {self.stream} entry {entry_id}: {exc}; moved to {self.dead_letter_stream}"
            )
            body = {"id": entry_id, "reason": str(exc), "data": raw if raw is not None else b""}
            with_retries("dead-letter", lambda: self._dead_letter(entry_id, body))
            return None

    def _dead_letter(self, entry_id: str, body: dict) -> None:
        pipe = self._client.pipeline(transaction=True)
        pipe.xadd(self.dead_letter_stream, body)
        pipe.xack(self.stream, self.group, entry_id)
        pipe.execute()

    # -- acking --------------------------------------------------------------
    def _send_acks(self) -> None:
        if not self._unacked:
            return
        ids, self._unacked = self._unacked, []
        try:
            self._client.xack(self.stream, self.group, *ids)
        except LOST:
            self._unacked = ids + self._unacked

    def ack(self, msg_id: str) -> None:
        self._in_flight.pop(msg_id, None)
        self._unacked.append(msg_id)
        self._send_acks()

    def fail(self, msg_id: str) -> None:
        if msg_id in self._in_flight and msg_id not in self._retry:
            self._retry.append(msg_id)

    def close(self) -> None:
        """Send the acks still owed, if the server is there, and close the connection."""
        with contextlib.suppress(redis.RedisError):
            self._send_acks()
        self._client.close()

    def pending(self) -> int:
        """Entries of the group delivered and not yet acked, across consumers."""
        return self._client.xpending(self.stream, self.group)["pending"]
