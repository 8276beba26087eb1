"""Throughput by source: word count from memory, the embedded queue, RabbitMQ and Redis Streams; and Kafka.

All squall runs share one local Spark context, the same sentences and the same
settings (acked, waves of 5,000, max pending 5,000). Figures are ratios within
this run: each source against the in-memory spout, and each broker's own drain
rate (a plain consumer that reads and acks, no squall) for scale. Prints one
``name=value`` per line.

Kafka is measured as storm-kafka-client's users measure their spout: a ``KafkaSpout`` (2 tasks, acked, on the
workers under ``LocalCluster``) feeding a no-op bolt, in messages per second until every message is acked, beside a
bare confluent-kafka consumer loop that reads the same topic, decodes each value and commits, in the same run.
Without ``--kafka-servers`` a broker is started for the run (``LocalKafkaBroker``; ``scripts/ensure-kafka.sh``
fetches its jars).

    python benchmarks/sources.py [--sentences 20000] [--master local[2]] \\
        [--amqp-url amqp://guest:guest@127.0.0.1:5672/%2F] [--redis-url redis://127.0.0.1:6379/0] \\
        [--kafka-servers 127.0.0.1:9092] [--kafka-messages 200000] [--only kafka]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

from squall import BasicBolt, LocalCluster, TopologyBuilder
from squall.connectors import QueueSpout, ReliableQueue
from squall.connectors.kafka import KafkaSpout, create_topic, produce
from squall.connectors.kafka.client import consumer as kafka_consumer
from squall.connectors.kafka.local_broker import LocalKafkaBroker
from squall.connectors.rabbitmq import RabbitMQSpout, connect, publish
from squall.connectors.redis_streams import RedisStreamSpout, append
from squall.connectors.redis_streams import connect as redis_connect
from squall.runner import load_module
from squall.spark.context import spark_context
from squall.testing import FeederSpout, TestCluster

# The example's sentences and split bolt; its count bolt writes to SQLite, this one only counts.
EXAMPLE = load_module(Path(__file__).parent.parent / "examples" / "word_count.py")
SENTENCES, Split = EXAMPLE.SENTENCES, EXAMPLE.SplitSentence


class Count(BasicBolt):
    outputs = ("word", "count")

    def prepare(self, conf, context):
        self.counts = {}

    def execute(self, tup, collector):
        word = tup[0]
        self.counts[word] = self.counts.get(word, 0) + 1


CONF = {"topology.max.spout.pending": 5000, "squall.wave.spout.batch": 5000}


def squall_rate(spout, n: int) -> float:
    """Sentences per second through split and count, from the first wave until all ``n`` are acked."""
    b = TopologyBuilder()
    b.set_spout("sentences", spout)
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    with TestCluster() as cluster:
        run = cluster.submit_topology("bench", CONF, b.build())
        stats = run.stats.of("sentences")
        started = time.perf_counter()
        while stats.acked < n:
            run.step()
        return n / (time.perf_counter() - started)


class NoOp(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


KAFKA_CONF = {"topology.max.spout.pending": 5000, "squall.wave.spout.batch": 5000}


def kafka_spout_rate(servers: str, topic: str, n: int) -> float:
    """Messages per second from a ``KafkaSpout`` (2 tasks, on the workers) through a no-op bolt under
    ``LocalCluster``, from the first ack until all ``n`` are acked."""
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(topic, servers, f"bench-{uuid.uuid4().hex[:8]}", fields=["sentence"]), 2)
    b.set_bolt("noop", NoOp(), 2).shuffle_grouping("kafka")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("bench-kafka", dict(KAFKA_CONF), b.build())
        stats = run.stats.of("kafka")
        while stats.acked == 0:
            time.sleep(0.005)
        started, first = time.perf_counter(), stats.acked
        while stats.acked < n:
            time.sleep(0.005)
        return (n - first) / (time.perf_counter() - started)


def kafka_consumer_rate(servers: str, topic: str, n: int) -> float:
    """The same topic read by a bare confluent-kafka consumer loop (``consume`` in batches of 500, each value
    decoded as JSON, offsets committed at the end), from the first record to the last."""
    reader = kafka_consumer(servers, f"drain-{uuid.uuid4().hex[:8]}")
    reader.subscribe([topic])
    started, done = None, 0
    while done < n:
        for record in reader.consume(500, 1.0):
            if record.error() is None:
                started = started or time.perf_counter()
                json.loads(record.value())
                done += 1
    reader.commit(offsets=reader.position(reader.assignment()), asynchronous=False)
    rate = n / (time.perf_counter() - started)
    reader.close()
    return rate


def kafka_rates(servers: str | None, n: int, sentences: list[list[str]]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        broker = LocalKafkaBroker(Path(tmp)) if servers is None else None
        servers = servers or broker.servers
        try:
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            create_topic(servers, topic, 4)
            produce(servers, topic, (sentences[i % len(sentences)] for i in range(n)), partitions=4)
            kafka_spout_rate(servers, topic, n // 10)  # warm-up: the workers start, imports load
            rates = {"kafka_spout": kafka_spout_rate(servers, topic, n)}
            rates["kafka_plain_consumer"] = kafka_consumer_rate(servers, topic, n)
            return rates
        finally:
            if broker is not None:
                broker.stop()


def rabbitmq_drain_rate(url: str, queue: str, n: int) -> float:
    connection = connect(url)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=5000)
    got = []
    channel.basic_consume(queue, lambda ch, method, props, body: got.append((method.delivery_tag, body)))
    started, done = time.perf_counter(), 0
    while done < n:
        connection.process_data_events(time_limit=0.01)
        for tag, body in got:
            json.loads(body)
            channel.basic_ack(tag)
        done += len(got)
        got.clear()
    rate = n / (time.perf_counter() - started)
    channel.queue_delete(queue)
    connection.close()
    return rate


def redis_drain_rate(url: str, stream: str, n: int) -> float:
    client = redis_connect(url)
    client.xgroup_create(stream, "drain", id="0")
    started, done = time.perf_counter(), 0
    while done < n:
        for _, entries in client.xreadgroup("drain", "c", {stream: ">"}, count=100) or []:
            for entry_id, data in entries:
                json.loads(data[b"data"])
                client.xack(stream, "drain", entry_id)
            done += len(entries)
    return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--kafka-servers", default=None, help="a running broker; else one is started for the run")
    parser.add_argument("--kafka-messages", type=int, default=200_000)
    parser.add_argument("--only", choices=["kafka"], default=None, help="only the Kafka figures")
    args = parser.parse_args()
    n = args.sentences
    sentences = [[SENTENCES[i % len(SENTENCES)]] for i in range(n)]
    spark_context(args.master, app_name="squall-bench-sources")
    tag = uuid.uuid4().hex[:8]
    rates: dict[str, float] = {}
    if args.only == "kafka":
        print_kafka(kafka_rates(args.kafka_servers, args.kafka_messages, sentences), args.kafka_messages)
        return

    def memory_spout(count: int) -> FeederSpout:
        feeder = FeederSpout(["sentence"])
        for i, values in enumerate(sentences[:count]):
            feeder.feed(values, msg_id=i)
        return feeder

    squall_rate(memory_spout(n // 4), n // 4)  # warm-up: Spark's Python workers start, imports load
    rates["memory"] = squall_rate(memory_spout(n), n)

    with tempfile.TemporaryDirectory() as tmp:
        queue = ReliableQueue(Path(tmp, "q.sqlite"), "s")
        queue.put_many(sentences)
        queue.close()
        rates["embedded_queue"] = squall_rate(QueueSpout(Path(tmp, "q.sqlite"), "s", fields=["sentence"]), n)

    publish(args.amqp_url, f"bench-{tag}", sentences)
    rates["rabbitmq"] = squall_rate(RabbitMQSpout(f"bench-{tag}", args.amqp_url, fields=["sentence"]), n)
    publish(args.amqp_url, f"drain-{tag}", sentences)
    rates["rabbitmq_plain_consumer"] = rabbitmq_drain_rate(args.amqp_url, f"drain-{tag}", n)
    with connect(args.amqp_url) as connection:
        for name in (f"bench-{tag}", f"bench-{tag}.dead"):
            connection.channel().queue_delete(name)
        connection.channel().exchange_delete(f"bench-{tag}.dead")

    for stream in (f"bench-{tag}", f"drain-{tag}"):
        append(args.redis_url, stream, sentences)
    rates["redis_streams"] = squall_rate(RedisStreamSpout(args.redis_url, f"bench-{tag}", fields=["sentence"]), n)
    rates["redis_plain_consumer"] = redis_drain_rate(args.redis_url, f"drain-{tag}", n)
    redis_connect(args.redis_url).delete(f"bench-{tag}", f"drain-{tag}")

    print(f"sentences={n}")
    for name, rate in rates.items():
        print(f"{name}_sentences_per_second={rate:,.0f}")
    for name in ("embedded_queue", "rabbitmq", "redis_streams"):
        print(f"{name}_ratio_to_memory={rates[name] / rates['memory']:.2f}")
    print(f"rabbitmq_ratio_to_plain_consumer={rates['rabbitmq'] / rates['rabbitmq_plain_consumer']:.3f}")
    print(f"redis_streams_ratio_to_plain_consumer={rates['redis_streams'] / rates['redis_plain_consumer']:.3f}")
    print_kafka(kafka_rates(args.kafka_servers, args.kafka_messages, sentences), args.kafka_messages)


def print_kafka(rates: dict[str, float], n: int) -> None:
    print(f"kafka_messages={n}")
    for name, rate in rates.items():
        print(f"{name}_messages_per_second={rate:,.0f}")
    print(f"kafka_spout_ratio_to_plain_consumer={rates['kafka_spout'] / rates['kafka_plain_consumer']:.3f}")


if __name__ == "__main__":
    main()
