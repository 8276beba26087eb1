"""Writing to Kafka: ``KafkaBolt`` for plain topologies, ``KafkaCommitter`` for transactional ones.

``KafkaBolt`` (storm-kafka-client's bolt): the producer is idempotent with ``acks=all``; each tuple is acked
only once the broker's delivery report says it is written, and failed (so its tree replays) on a delivery
error. Delivery reports are collected at each tuple and at the bolt's tick (every ``flush_interval_secs``), so
the last tuples of a burst are acked within that interval. ``fire_and_forget=True`` acks at once instead.

``KafkaCommitter`` (a transactional topology's committer): each batch's tuples are written in one Kafka
transaction, at the batch's commit, in txid order. Beside the records, the transaction commits the batch's txid
as an offset of a guard group of the committer's own; a replayed txid that the guard already holds is not
written again. A ``read_committed`` consumer therefore sees each batch exactly once, across replays, worker
kills and driver kills.

Both take the user's client settings: ``producer_config`` over config ``squall.kafka.client.config``. The
committer's guard consumer gets the connection's settings of those (security.protocol, sasl.*, ssl.*:
``client.connection_config``), so that on a secured cluster it reads the txid with the same credentials.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from squall.connectors.kafka import client
from squall.model.components import Bolt
from squall.model.config import TOPOLOGY_NAME, TOPOLOGY_TICK_TUPLE_FREQ_SECS
from squall.transactional.bolts import BatchBolt, Committer

log = logging.getLogger("squall.connectors.kafka")

Mapper = Callable[[Any], tuple[Any, Any]]


def field_name_mapper(tup: Any) -> tuple[Any, Any]:
    """Storm's ``FieldNameBasedTupleToKafkaMapper``: the key is field ``key`` (if any), the value field ``message``
    (if any), else the whole tuple as a JSON object."""
    fields = list(tup.fields)
    key = tup["key"] if "key" in fields else None
    value = tup["message"] if "message" in fields else dict(zip(fields, tup.values, strict=True))
    return key, value


def _encode(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value).encode()


def _topic_of(topic: str | Callable[[Any], str | None], tup: Any) -> str | None:
    return topic(tup) if callable(topic) else topic


class KafkaBolt(Bolt):
    """Writes each tuple to ``topic`` (a name, or a function of the tuple: Storm's topic selector; None skips the
    tuple, acked). ``mapper`` gives ``(key, value)``: bytes as they are, str as UTF-8, anything else as JSON."""

    outputs = ()

    def __init__(
        self,
        topic: str | Callable[[Any], str | None],
        bootstrap_servers: str | None = None,
        mapper: Mapper = field_name_mapper,
        producer_config: dict | None = None,
        fire_and_forget: bool = False,
        flush_interval_secs: float = 0.5,
    ) -> None:
        self.topic, self.bootstrap_servers, self.mapper = topic, bootstrap_servers, mapper
        self.producer_config, self.fire_and_forget = dict(producer_config or {}), fire_and_forget
        self.flush_interval_secs = flush_interval_secs

    def get_component_configuration(self) -> dict:
        return {TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.flush_interval_secs}  # delivery reports collected on ticks

    def prepare(self, conf, context, collector) -> None:
        self._collector = collector
        self._name = f"bolt {context.component_id} task {context.task_id}"
        self._servers = client.servers_from(self.bootstrap_servers, conf, self._name)
        settings = {**client.topology_client_config(conf), **self.producer_config}
        self._producer = client.producer(self._servers, settings)
        client.check_reachable(self._producer, self._servers, self._name)
        self._delivered: list[tuple[Any, Any]] = []  # (tuple, error or None), from delivery reports

    def execute(self, tup) -> None:
        if not tup.is_tick:
            self._send(tup)
        self._producer.poll(0)
        self._settle()

    def _send(self, tup: Any) -> None:
        topic = _topic_of(self.topic, tup)
        if topic is None:
            log.warning("%s: no topic for %r; skipped", self._name, tup)
            self._collector.ack(tup)
            return
        key, value = self.mapper(tup)
        done = None if self.fire_and_forget else (lambda error, _m, t=tup: self._delivered.append((t, error)))
        while True:
            try:
                self._producer.produce(topic, value=_encode(value), key=_encode(key), on_delivery=done)
                break
            except BufferError:  # the producer's queue is full: wait for deliveries
                self._producer.poll(0.1)
                self._settle()
        if self.fire_and_forget:
            self._collector.ack(tup)

    def _settle(self) -> None:
        delivered, self._delivered = self._delivered, []
        for tup, error in delivered:
            if error is None:
                self._collector.ack(tup)
            else:
                log.warning("%s: delivery of %r failed: %s", self._name, tup, error)
                self._collector.fail(tup)

    def cleanup(self) -> None:
        self._producer.flush(30)
        self._settle()


class KafkaCommitter(BatchBolt, Committer):
    """Writes each batch's tuples to ``topic`` in one Kafka transaction, once per txid (see the docstring).

    ``topic`` is a name or a function of the tuple; ``mapper`` as for ``KafkaBolt``. The transactional id is
    ``<topology>-<component>-<task>`` unless ``transactional_id_prefix`` is given; the guard group is
    ``<transactional id>.txid``, and its offset lives on ``guard_topic`` partition 0 (by default the topic
    itself, which must then be a name). ``producer_config`` adds librdkafka settings, security ones included;
    the guard consumer gets its connection settings."""

    outputs = ()

    def __init__(
        self,
        topic: str | Callable[[Any], str | None],
        bootstrap_servers: str,
        mapper: Mapper = field_name_mapper,
        guard_topic: str | None = None,
        transactional_id_prefix: str | None = None,
        producer_config: dict | None = None,
    ) -> None:
        if guard_topic is None and callable(topic):
            raise ValueError("KafkaCommitter: a topic chosen per tuple needs a guard_topic for the committed txids")
        self.topic, self.bootstrap_servers, self.mapper = topic, bootstrap_servers, mapper
        self.guard_topic = guard_topic or topic
        self.transactional_id_prefix = transactional_id_prefix
        self.producer_config = dict(producer_config or {})

    def prepare(self, conf, context, collector, batch_id) -> None:
        prefix = self.transactional_id_prefix or f"{conf.get(TOPOLOGY_NAME) or 'squall'}-{context.component_id}"
        self._id = f"{prefix}-{context.task_id}"
        self._txid, self._rows = batch_id.txid, []
        self._settings = {**client.topology_client_config(conf), **self.producer_config}

    def execute(self, tup) -> None:
        self._rows.append((_topic_of(self.topic, tup), *self.mapper(tup)))

    def finish_batch(self) -> None:
        writer = _TransactionalWriter.of(self.bootstrap_servers, self._id, self._settings)
        writer.write_once(self._txid, self.guard_topic, self._rows)


class _TransactionalWriter:
    """One transactional producer per transactional id and process; its guard consumer reads the last txid."""

    _live: dict[str, _TransactionalWriter] = {}

    @classmethod
    def of(cls, servers: str, transactional_id: str, extra: dict) -> _TransactionalWriter:
        writer = cls._live.get(transactional_id)
        if writer is None:
            writer = cls._live[transactional_id] = cls(servers, transactional_id, extra)
        return writer

    def __init__(self, servers: str, transactional_id: str, extra: dict) -> None:
        self.servers, self.id = servers, transactional_id
        self.producer = client.producer(servers, {"transactional.id": transactional_id, **extra})
        client.check_reachable(self.producer, servers, f"committer {transactional_id}")
        self.producer.init_transactions(30)  # fences an older producer of this id and aborts what it left open
        self.guard = client.consumer(servers, f"{transactional_id}.txid", client.connection_config(extra))
        client.check_reachable(self.guard, servers, f"committer {transactional_id}: its txid guard")

    def last_txid(self, guard_topic: str) -> int:
        asked = [TopicPartition(guard_topic, 0)]
        got = client.with_retries(f"{self.id}: last txid", lambda: self.guard.committed(asked, 30))[0]
        return got.offset if got.offset >= 0 else 0

    def write_once(self, txid: int, guard_topic: str, rows: list[tuple[str | None, Any, Any]]) -> None:
        if self.last_txid(guard_topic) >= txid:
            log.info("%s: txid %d is already in Kafka; not written again", self.id, txid)
            return
        try:
            self.producer.begin_transaction()
            for topic, key, value in rows:
                if topic is not None:
                    self._produce(topic, _encode(key), _encode(value))
            offsets = [TopicPartition(guard_topic, 0, txid)]
            self.producer.send_offsets_to_transaction(offsets, self.guard.consumer_group_metadata(), 30)
            self.producer.commit_transaction(60)
        except KafkaException as exc:
            self._abort(exc)
            raise

    def _produce(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _abort(self, error: KafkaException) -> None:
        """Abort what is open; a producer that cannot go on (fenced, fatal) is made again for the next try."""
        kafka_error = error.args[0] if error.args else None
        try:
            if kafka_error is not None and kafka_error.txn_requires_abort():
                self.producer.abort_transaction(30)
                return
        except KafkaException:
            pass
        type(self)._live.pop(self.id, None)
