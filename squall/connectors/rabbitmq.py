"""A reliable spout over a RabbitMQ queue (AMQP 0-9-1, through pika).

Guarantee: at-least-once, as Storm's RabbitMQ spouts give it. Each message is
consumed with manual acknowledgement and emitted with ``(connection generation,
delivery tag)`` as its msg id.

* ``ack`` is ``basic.ack``; ``fail`` is ``basic.nack`` with requeue, so the
  broker delivers the message again.
* Messages left unacknowledged by a consumer that died (its connection closed)
  are requeued by the broker and delivered again. That covers a killed driver.
* The broker sends at most ``prefetch`` unacknowledged messages, which is
  ``topology.max.spout.pending`` when that is set.
* A lost connection is retried with backoff. The trees still in flight from
  the old connection cannot be acked any more: the broker delivers their
  messages again, so they may be processed twice, never lost. Messages survive
  a broker restart when the queue is durable and they were published persistent
  (``publish`` does both).
* A malformed message (not UTF-8 JSON, or the wrong fields) is never emitted:
  it is published to the dead-letter exchange with its reason in the
  ``x-squall-reason`` header and, once the broker has confirmed that, acked, so
  it cannot loop. A queue of the same name is bound to that exchange and keeps
  them.
* pika's connection is serviced (heartbeats) from a background thread while
  the driver runs a Spark wave, so a long wave does not cost the connection.

Payloads are JSON: a list of values, an object keyed by field name, or a lone
value for a single field. Never pickle.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import pika
from pika.exceptions import AMQPError, ChannelClosedByBroker

from squall.connectors.common import RETRY_DELAYS, BrokerUnavailable, redact, url_from
from squall.connectors.queue import MalformedMessage, decode_values
from squall.model.components import Spout
from squall.model.config import SQUALL_AMQP_URL, TOPOLOGY_MAX_SPOUT_PENDING
from squall.model.errors import InvalidConfigError
from squall.model.fields import Fields, as_fields

log = logging.getLogger("squall.rabbitmq")

MAX_PREFETCH = 65_535  # AMQP's prefetch-count is a 16-bit field
PERSISTENT = 2
HEARTBEAT_PUMP_SECS = 1.0


def connect(url: str) -> pika.BlockingConnection:
    """A connection to ``url``; a clear error naming the URL (password masked) if the broker is down."""
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 10
    params.blocked_connection_timeout = 60
    try:
        return pika.BlockingConnection(params)
    except AMQPError as exc:
        raise BrokerUnavailable(f"cannot reach RabbitMQ at {redact(url)}: {exc!r}") from None


def publish(url: str, queue: str, payloads: Iterable[Any]) -> int:
    """Publish each payload as a persistent JSON message to a durable ``queue``; returns how many."""
    connection = connect(url)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        properties = pika.BasicProperties(content_type="application/json", delivery_mode=PERSISTENT)
        count = 0
        for payload in payloads:
            channel.basic_publish("", queue, json.dumps(payload).encode(), properties)
            count += 1
        channel.queue_declare(queue, passive=True)  # a round trip: the broker has routed everything before it
        return count
    finally:
        connection.close()


def queue_depth(url: str, queue: str) -> int:
    """Messages ready in ``queue`` (not counting those delivered and not yet acked)."""
    connection = connect(url)
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


class RabbitMQSpout(Spout):
    """Emits the messages of ``queue`` on the broker at ``url`` (else config ``squall.amqp.url``).

    ``declare`` declares the queue durable; without it the queue must exist.
    ``dead_letter_exchange`` defaults to ``<queue>.dead``. ``prefetch`` applies
    when ``topology.max.spout.pending`` is not set.
    """

    def __init__(
        self,
        queue: str,
        url: str | None = None,
        fields: Sequence[str] | Fields = ("value",),
        dead_letter_exchange: str | None = None,
        declare: bool = True,
        prefetch: int = 1000,
    ) -> None:
        self.queue, self.url = queue, url
        self.outputs = as_fields(fields)
        self.dead_letter_exchange = dead_letter_exchange or f"{queue}.dead"
        self.declare, self.prefetch = declare, prefetch

    def open(self, conf, context, collector) -> None:
        self._collector = collector
        self._component = context.component_id
        self._url = url_from(self.url, conf, SQUALL_AMQP_URL, f"spout {self._component}")
        self._prefetch = min(conf.get(TOPOLOGY_MAX_SPOUT_PENDING) or self.prefetch, MAX_PREFETCH)
        self._buffer: deque[tuple[int, bytes]] = deque()
        self._generation = 0
        self._connection: pika.BlockingConnection | None = None
        self._retry_at, self._failures = 0.0, 0
        self._lock = threading.Lock()  # pika is not thread-safe: the heartbeat pump and the driver take turns
        self._closed = threading.Event()
        self._start(connect(self._url))
        threading.Thread(target=self._pump, name=f"squall-amqp-{self._component}", daemon=True).start()

    def _pump(self) -> None:
        """Let pika send and check heartbeats while the driver is busy elsewhere (a long Spark wave)."""
        while not self._closed.wait(HEARTBEAT_PUMP_SECS):
            with self._lock:
                if self._connection is not None:
                    try:
                        self._connection.process_data_events(time_limit=0)
                    except Exception as exc:  # only I/O happens here: any error means the connection is gone
                        self._lost(exc)

    # -- the connection ------------------------------------------------------
    def _start(self, connection: pika.BlockingConnection) -> None:
        """Set up channels on a new connection: queues, QoS, the consumer, confirmed dead-lettering."""
        try:
            channel = connection.channel()
            if self.declare:
                channel.queue_declare(self.queue, durable=True)
            else:
                channel.queue_declare(self.queue, passive=True)
            channel.exchange_declare(self.dead_letter_exchange, "fanout", durable=True)
            channel.queue_declare(self.dead_letter_exchange, durable=True)
            channel.queue_bind(self.dead_letter_exchange, self.dead_letter_exchange)
            channel.basic_qos(prefetch_count=self._prefetch)
            channel.basic_consume(self.queue, self._on_message, auto_ack=False)
            dead_letters = connection.channel()
            dead_letters.confirm_delivery()
        except ChannelClosedByBroker as exc:
            _close_quietly(connection)
            raise InvalidConfigError(
                f"spout {self._component}: cannot consume queue {self.queue!r} at {redact(self._url)}: {exc}"
            ) from None
        except BaseException:
            _close_quietly(connection)
            raise
        self._connection, self._channel, self._dead_letters = connection, channel, dead_letters
        self._generation += 1
        self._failures = 0

    def _on_message(self, channel, method, properties, body: bytes) -> None:
        self._buffer.append((method.delivery_tag, body))

    def _lost(self, exc: BaseException) -> None:
        """Drop a broken connection; the broker requeues what it had delivered to it."""
        log.warning("spout %s: connection to %s lost (%r); reconnecting", self._component, redact(self._url), exc)
        if self._connection is not None:
            _close_quietly(self._connection)
        self._connection = None
        self._buffer.clear()
        self._retry_at = time.monotonic()

    def _reconnect(self) -> bool:
        if time.monotonic() < self._retry_at:
            return False
        try:
            self._start(connect(self._url))
        except (BrokerUnavailable, InvalidConfigError, AMQPError) as exc:
            delay = RETRY_DELAYS[min(self._failures, len(RETRY_DELAYS) - 1)]
            self._failures += 1
            self._retry_at = time.monotonic() + delay
            log.warning("spout %s: %s; next try in %.2fs", self._component, exc, delay)
            return False
        log.info("spout %s: reconnected to %s", self._component, redact(self._url))
        return True

    # -- the spout -----------------------------------------------------------
    def next_tuple(self) -> None:
        with self._lock:
            if self._connection is None and not self._reconnect():
                return
            try:
                if not self._buffer:
                    self._connection.process_data_events(time_limit=0)
                while self._buffer:
                    tag, body = self._buffer.popleft()
                    values = self._decode(tag, body)
                    if values is not None:
                        self._collector.emit(values, msg_id=(self._generation, tag))
                        return
            except AMQPError as exc:
                self._lost(exc)

    def _decode(self, tag: int, body: bytes) -> tuple | None:
        try:
            return decode_values(body.decode("utf-8"), self.outputs)
        except (MalformedMessage, UnicodeDecodeError) as exc:
            headers = {"x-squall-reason": str(exc), "x-squall-queue": self.queue}
            properties = pika.BasicProperties(headers=headers, delivery_mode=PERSISTENT)
            # confirmed and routed (mandatory), or an AMQPError: then it is not acked and comes again
            self._dead_letters.basic_publish(self.dead_letter_exchange, "", body, properties, mandatory=True)
            self._channel.basic_ack(tag)
            self._collector.report_malformed(
                f"queue {self.queue} delivery {tag}: {exc}; sent to exchange {self.dead_letter_exchange}"
            )
            return None

    def _settle(self, msg_id: tuple[int, int], settle) -> None:
        generation, tag = msg_id
        with self._lock:
            if generation != self._generation or self._connection is None:
                return  # delivered on a lost connection: the broker has requeued it
            try:
                settle(tag)
            except AMQPError as exc:
                self._lost(exc)

    def ack(self, msg_id: tuple[int, int]) -> None:
        self._settle(msg_id, lambda tag: self._channel.basic_ack(tag))

    def fail(self, msg_id: tuple[int, int]) -> None:
        self._settle(msg_id, lambda tag: self._channel.basic_nack(tag, requeue=True))

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._connection is not None:
                _close_quietly(self._connection)
            self._connection = None


def _close_quietly(connection: pika.BlockingConnection) -> None:
    """Close a connection that may already be broken; the broker requeues what it had delivered."""
    if connection.is_open:
        with contextlib.suppress(Exception):
            connection.close()
