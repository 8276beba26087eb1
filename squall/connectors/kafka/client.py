"""Kafka clients as squall's Kafka components make them, and helpers for scripts and tests: create a topic,
produce JSON values, read a group's committed offsets and a topic's end offsets.

Every client takes the user's librdkafka settings. The connection's own (``connection_config``: security.protocol,
sasl.*, ssl.*, socket and identity settings) are what a component's consumer and producer share: a spout's
dead-letter producer gets those of its ``consumer_config``, a committer's guard consumer those of its
``producer_config``, and config ``squall.kafka.client.config`` goes to every client a component makes. The
helpers take ``client_config`` for a secured cluster."""

from __future__ import annotations

import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from squall.connectors import common
from squall.connectors.common import BrokerUnavailable
from squall.model.config import SQUALL_KAFKA_BOOTSTRAP_SERVERS, SQUALL_KAFKA_CLIENT_CONFIG
from squall.model.errors import InvalidConfigError

CONNECT_TIMEOUT = 10.0  # seconds to wait for the brokers' metadata before saying they cannot be reached

log = logging.getLogger("squall.connectors.kafka")  # librdkafka's own log lines go here too

T = TypeVar("T")


def with_retries(what: str, call: Callable[[], T]) -> T:
    """Run a Kafka ``call``, retrying with backoff while the broker is away or its coordinator is loading."""
    return common.with_retries(what, call, (KafkaException,))


def servers_from(explicit: str | None, conf: Mapping[str, Any], component: str) -> str:
    """The bootstrap servers given, else config ``squall.kafka.bootstrap.servers``; an error naming both."""
    servers = explicit or conf.get(SQUALL_KAFKA_BOOTSTRAP_SERVERS)
    if not servers:
        raise InvalidConfigError(
            f"{component}: no Kafka bootstrap servers given, and config {SQUALL_KAFKA_BOOTSTRAP_SERVERS!r} is not set"
        )
    return servers


# librdkafka's settings of the connection itself, as opposed to a consumer's or a producer's: what every client
# squall makes for a component gets (exact names, and prefixes ending in . or _)
CONNECTION_KEYS = (
    "security.protocol",
    "sasl.",
    "ssl.",
    "ssl_",
    "enable.ssl.certificate.verification",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "oauth_cb",
    "https.",
    "socket.",
    "broker.address.",
    "client.dns.lookup",
    "client.id",
    "client.rack",
    "connections.max.idle.ms",
    "reconnect.backoff.",
    "api.version.",
    "broker.version.fallback",
    "error_cb",
)


def connection_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The settings of ``config`` that are the connection's (``CONNECTION_KEYS``): those a producer made for a
    consumer's component (or the other way round) must share to reach the same cluster."""
    return {
        k: v
        for k, v in (config or {}).items()
        if any(k == name or (name[-1] in "._" and k.startswith(name)) for name in CONNECTION_KEYS)
    }


def topology_client_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Config ``squall.kafka.client.config``: librdkafka settings for every Kafka client of the topology."""
    return dict(conf.get(SQUALL_KAFKA_CLIENT_CONFIG) or {})


class _Errors:
    """A client's ``error_cb``: keeps the last errors librdkafka reported (a refused login says why there, not in
    the request that timed out), and passes each on to the user's own ``error_cb``. librdkafka logs the
    connection failures behind them either way."""

    def __init__(self, chained: Callable[[Any], None] | None) -> None:
        self.seen: deque[Any] = deque(maxlen=3)
        self.chained = chained

    def __call__(self, error: Any) -> None:
        self.seen.append(error)
        if self.chained is not None:
            self.chained(error)


class _Consumer(Consumer):
    errors: _Errors


class _Producer(Producer):
    errors: _Errors


class _AdminClient(AdminClient):
    errors: _Errors


def _made(kind: type[T], conf: dict[str, Any]) -> T:
    errors = _Errors(conf.get("error_cb"))
    made = kind({**conf, "error_cb": errors})
    made.errors = errors
    return made


def check_reachable(client: Consumer | Producer | AdminClient, servers: str, what: str) -> Any:
    """The cluster's metadata; ``BrokerUnavailable`` naming the servers if none answers in time, with the
    client's last error (a refused login, a wrong security.protocol) when it reported one."""
    try:
        return client.list_topics(timeout=CONNECT_TIMEOUT)
    except KafkaException as exc:
        errors = getattr(client, "errors", None)
        if errors is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                client.poll(0)  # serves the error callbacks
        why = f"; last error: {errors.seen[-1].str()}" if errors is not None and errors.seen else ""
        raise BrokerUnavailable(f"{what}: cannot reach Kafka at {servers}: {exc.args[0]}{why}") from None


def consumer(servers: str, group_id: str, extra: Mapping[str, Any] | None = None) -> Consumer:
    """A consumer that never commits by itself: the caller decides what is committed."""
    conf = {
        "bootstrap.servers": servers,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "logger": log,
    }
    return _made(_Consumer, {**conf, **(extra or {})})


def producer(servers: str, extra: Mapping[str, Any] | None = None) -> Producer:
    """An idempotent producer: ``acks=all``, no duplicates from its own retries."""
    conf = {"bootstrap.servers": servers, "enable.idempotence": True, "acks": "all", "linger.ms": 5, "logger": log}
    return _made(_Producer, {**conf, **(extra or {})})


def _admin(servers: str, client_config: Mapping[str, Any] | None = None) -> AdminClient:
    admin = _made(_AdminClient, {"bootstrap.servers": servers, "logger": log, **(client_config or {})})
    check_reachable(admin, servers, "admin")
    return admin


def create_topic(
    servers: str,
    topic: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    client_config: Mapping[str, Any] | None = None,
) -> None:
    """Create ``topic`` (replication 1 unless the broker says otherwise) with topic ``config``; nothing if it
    exists."""
    admin = _admin(servers, client_config)  # held until the future completes: a collected client never completes it
    future = admin.create_topics([NewTopic(topic, partitions, config=dict(config or {}))])[topic]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
            raise


def add_partitions(servers: str, topic: str, total: int, client_config: Mapping[str, Any] | None = None) -> None:
    """Grow ``topic`` to ``total`` partitions."""
    admin = _admin(servers, client_config)
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=30)


def produce(
    servers: str,
    topic: str,
    values: Iterable[Any],
    keys: Iterable[Any] | None = None,
    partitions: int | None = None,
    client_config: Mapping[str, Any] | None = None,
) -> int:
    """Write each value as JSON to ``topic`` and wait for every delivery; returns how many were written.

    With ``partitions``, value *i* goes to partition *i* mod ``partitions``; with ``keys``, each key (JSON) picks
    its partition; otherwise the producer's partitioner does."""
    out = producer(servers, client_config)
    errors: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))

    keys_iter = iter(keys) if keys is not None else None
    count = 0
    for i, value in enumerate(values):
        kwargs: dict[str, Any] = {"value": json.dumps(value).encode(), "on_delivery": delivered}
        if keys_iter is not None:
            kwargs["key"] = json.dumps(next(keys_iter)).encode()
        if partitions:
            kwargs["partition"] = i % partitions
        while True:
            try:
                out.produce(topic, **kwargs)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                out.poll(0.1)
        count += 1
        if count % 10_000 == 0:
            out.poll(0)
    left = out.flush(60)
    if errors or left:
        raise KafkaException(f"producing to {topic}: {left} not delivered; errors: {errors[:3]}")
    return count


def end_offsets(servers: str, topic: str, client_config: Mapping[str, Any] | None = None) -> dict[int, int]:
    """Each partition's end offset (its high watermark): where the next record will go."""
    probe = consumer(servers, "squall-probe", client_config)
    try:
        meta = check_reachable(probe, servers, "end offsets")
        partitions = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
        return {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    finally:
        probe.close()


def committed_offsets(
    servers: str, group_id: str, topic: str, client_config: Mapping[str, Any] | None = None
) -> dict[int, int]:
    """The offsets ``group_id`` committed on ``topic``'s partitions (partitions with none are left out)."""
    probe = consumer(servers, group_id, client_config)
    try:
        meta = check_reachable(probe, servers, "committed offsets")
        partitions = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
        got = with_retries(
            "committed offsets", lambda: probe.committed([TopicPartition(topic, p) for p in partitions], 30)
        )
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        probe.close()


def read_all(
    servers: str,
    topic: str,
    isolation: str = "read_committed",
    idle: float = 2.0,
    client_config: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Every record now in ``topic`` (as ``confluent_kafka.Message``), partition by partition, in offset order."""
    ends = end_offsets(servers, topic, client_config)
    reader = consumer(servers, "squall-reader", {**(client_config or {}), "isolation.level": isolation})
    records: list[Any] = []
    try:
        reader.assign([TopicPartition(topic, p, 0) for p in ends])
        while True:
            positions = reader.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions if ends[tp.partition] > 0):
                break
            batch = reader.consume(10_000, idle)
            if not batch:
                break
            records += [m for m in batch if m.error() is None]
    finally:
        reader.close()
    records.sort(key=lambda m: (m.partition(), m.offset()))
    return records
