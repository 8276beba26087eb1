"""A Kafka word count written as a user writes one: a broker of its own, components defined here, LocalCluster,
results read from SQLite. Needs nothing from conftest."""

import sqlite3
import time
from collections import Counter

from squall import BasicBolt, LocalCluster, TopologyBuilder
from squall.connectors.kafka import KafkaSpout, committed_offsets, create_topic, end_offsets, produce
from squall.connectors.kafka.local_broker import LocalKafkaBroker

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away", "snow white"]


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


class Store(BasicBolt):
    """Adds each word to SQLite before its tuple is acked (a connection opened in prepare)."""

    outputs = ()

    def __init__(self, path):
        self.path = path

    def prepare(self, conf, context):
        self.db = sqlite3.connect(self.path, timeout=60)
        with self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS words (word TEXT)")

    def execute(self, tup, collector):
        with self.db:
            self.db.execute("INSERT INTO words VALUES (?)", (tup["word"],))


def test_a_users_kafka_word_count(tmp_path):
    broker = LocalKafkaBroker(tmp_path / "kafka")
    try:
        create_topic(broker.servers, "sentences", 2)
        produce(broker.servers, "sentences", [[SENTENCES[i % 3]] for i in range(300)], partitions=2)
        db = tmp_path / "words.sqlite"
        b = TopologyBuilder()
        b.set_spout("kafka", KafkaSpout("sentences", broker.servers, "wc", fields=["sentence"]), 2)
        b.set_bolt("split", Split(), 2).shuffle_grouping("kafka")
        b.set_bolt("store", Store(str(db)), 1).shuffle_grouping("split")
        with LocalCluster() as cluster:
            run = cluster.submit_topology("kafka-wc", {}, b.build())
            deadline = time.monotonic() + 180
            while run.stats.of("kafka").acked < 300:
                assert time.monotonic() < deadline, f"{run.stats.of('kafka').acked} of 300 acked"
                time.sleep(0.1)
        counted = Counter(w for (w,) in sqlite3.connect(db).execute("SELECT word FROM words"))
        assert counted == Counter(w for i in range(300) for w in SENTENCES[i % 3].split())
        assert committed_offsets(broker.servers, "wc", "sentences") == end_offsets(broker.servers, "sentences")
    finally:
        broker.stop()
