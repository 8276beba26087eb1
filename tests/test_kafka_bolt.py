"""KafkaBolt against a real broker: each tuple acked after the broker's delivery report, failed on a delivery error;
the transactional spouts replay a txid's offset range exactly, or stop the topology when it is gone."""

import json
import sqlite3
import time
import uuid
from collections import Counter

import pytest

from squall import TopologyBuilder
from squall.connectors.kafka import KafkaBolt, KafkaTransactionalSpout, create_topic, produce, read_all
from squall.testing import FeederSpout, TestCluster
from squall.transactional import BatchBolt, Committer, TransactionalTopologyBuilder


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def settle(cluster, spout, n: int, timeout: float = 60) -> None:
    """Advance the topology's clock (ticks collect delivery reports) until ``n`` tuples are acked or failed."""
    deadline = time.monotonic() + timeout
    while len(spout.acked | spout.failed) < n:
        assert time.monotonic() < deadline, f"{len(spout.acked)} acked, {len(spout.failed)} failed of {n}"
        cluster.advance_time(0.5)
        time.sleep(0.05)


def test_each_tuple_is_acked_once_the_broker_has_it(kafka_server, spark):
    topic = unique("out")
    create_topic(kafka_server.servers, topic, 2)
    spout = FeederSpout(["key", "message"])
    b = TopologyBuilder()
    b.set_spout("in", spout)
    b.set_bolt("kafka", KafkaBolt(topic, kafka_server.servers), 2).shuffle_grouping("in")
    with TestCluster() as cluster:
        cluster.submit_topology("kafka-bolt", {}, b.build())
        ids = [spout.feed([f"k{i % 7}", {"n": i}], msg_id=i) for i in range(300)]
        settle(cluster, spout, 300)
    assert spout.acked == set(ids) and spout.failed == set()
    records = read_all(kafka_server.servers, topic)
    assert sorted(json.loads(m.value())["n"] for m in records) == list(range(300))
    by_key = {m.key().decode(): m.partition() for m in records}  # a key always lands on the same partition
    assert all(m.partition() == by_key[m.key().decode()] for m in records)


def test_a_delivery_error_fails_the_tuple_and_a_topic_selector_routes(kafka_server, spark):
    good = unique("good")
    create_topic(kafka_server.servers, good, 1)
    missing = unique("missing")  # the broker does not create topics on demand here

    def topic_of(tup):
        return good if tup["message"] % 2 == 0 else missing

    spout = FeederSpout(["message"])
    b = TopologyBuilder()
    b.set_spout("in", spout)
    bolt = KafkaBolt(topic_of, kafka_server.servers, producer_config={"message.timeout.ms": 1500})
    b.set_bolt("kafka", bolt).shuffle_grouping("in")
    with TestCluster() as cluster:
        cluster.submit_topology("kafka-errors", {}, b.build())
        for i in range(10):
            spout.feed([i], msg_id=i)
        settle(cluster, spout, 10)
    assert spout.acked == {0, 2, 4, 6, 8} and spout.failed == {1, 3, 5, 7, 9}
    assert sorted(int(m.value()) for m in read_all(kafka_server.servers, good)) == [0, 2, 4, 6, 8]


class Collect(BatchBolt, Committer):
    """Writes each committed batch's values to SQLite, once per txid."""

    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, conf, context, collector, batch_id):
        self.txid, self.values = batch_id.txid, []

    def execute(self, tup):
        self.values.append((self.txid, tup[1]))

    def finish_batch(self):
        db = sqlite3.connect(self.path, timeout=60)
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS seen (txid INTEGER, n INTEGER)")
            db.execute("CREATE TABLE IF NOT EXISTS done (txid INTEGER PRIMARY KEY)")
            if db.execute("SELECT 1 FROM done WHERE txid = ?", (self.txid,)).fetchone() is None:
                db.executemany("INSERT INTO seen VALUES (?, ?)", self.values)
                db.execute("INSERT INTO done VALUES (?)", (self.txid,))
        db.close()


def test_a_transactional_kafka_batch_is_an_offset_range_replayed_exactly(kafka_server, spark, tmp_path):
    topic = unique("tx")
    create_topic(kafka_server.servers, topic, 2)
    produce(kafka_server.servers, topic, list(range(100)), partitions=2)
    spout = KafkaTransactionalSpout(topic, kafka_server.servers, take_per_batch=20, fields=["n"])
    meta = spout.emit_partition_batch_new(None, _Emits(), 0, None)
    assert meta == {"offset": 0, "next": 20, "count": 20}
    again = _Emits()
    spout.emit_partition_batch(None, again, 0, meta)  # a replay: the same records
    assert again.values == [n for n in range(0, 40, 2)]
    assert spout.emit_partition_batch_new(None, _Emits(), 0, meta) == {"offset": 20, "next": 40, "count": 20}

    b = TransactionalTopologyBuilder("kafka-tx", "spout", spout, 2)
    b.set_committer_bolt("collect", Collect(str(tmp_path / "seen.sqlite"))).global_grouping("spout")
    with TestCluster() as cluster:
        cluster.submit_topology("kafka-tx", {"topology.max.spout.pending": 2}, b.build())
        cluster.wait_idle()
    rows = sqlite3.connect(tmp_path / "seen.sqlite").execute("SELECT txid, n FROM seen").fetchall()
    assert sorted(n for _, n in rows) == list(range(100))
    assert max(Counter(txid for txid, _ in rows).values()) == 40  # 20 a partition a batch


def test_a_transactional_batch_whose_records_are_gone_stops_the_topology(kafka_server):
    from squall.model.errors import FatalError

    topic = unique("gone")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, list(range(10)))
    spout = KafkaTransactionalSpout(topic, kafka_server.servers, take_per_batch=5, fields=["n"])
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_server.servers})
    admin.delete_records([TopicPartition(topic, 0, 5)])[TopicPartition(topic, 0, 5)].result(timeout=30)
    with pytest.raises(FatalError, match=rf"topic {topic} partition 0: batch .* needs offsets 0 to 4.*starts at 5"):
        spout.emit_partition_batch(None, _Emits(), 0, {"offset": 0, "next": 5, "count": 5})


class _Emits:
    def __init__(self):
        self.values = []

    def emit(self, values, stream="default"):
        self.values.append(values[1])

    def report_malformed(self, what):
        raise AssertionError(what)
