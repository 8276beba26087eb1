"""Word count from Kafka to Kafka, at least once: storm-kafka-client's topology in squall.

    sentences (Kafka, 4 partitions) --> KafkaSpout x2 --shuffle--> split --fields("word")--> count
        --> KafkaBolt --> word-counts (Kafka, keyed by word: the last record of a word is its count)

The spout commits each partition's offsets only past its contiguous acked prefix, and the bolt acks a count only
once the broker has it, so a sentence is acked only when every count it changed is in Kafka. The sentences topic
is filled with sample sentences on the first run.

    squall run examples/kafka_word_count.py --conf squall.kafka.bootstrap.servers=127.0.0.1:9092

Without ``squall.kafka.bootstrap.servers``, a single-node broker is started for the run in
``example.dir`` (its jars: ``scripts/ensure-kafka.sh``).
"""

from __future__ import annotations

import atexit
from collections import Counter
from pathlib import Path

from squall import BasicBolt, Fields, TopologyBuilder
from squall.connectors.kafka import (
    KafkaBolt,
    KafkaSpout,
    committed_offsets,
    create_topic,
    end_offsets,
    produce,
    read_all,
)

NAME = "kafka-word-count"
CONF = {
    "example.dir": ".squall-data",
    "example.sentences": 2000,
    "topology.max.spout.pending": 1000,  # sentences in flight per spout task: enough to keep the bolts busy
}
SENTENCES_TOPIC, COUNTS_TOPIC, GROUP = "sentences", "word-counts", "kafka-word-count"

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SplitSentence(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup["sentence"].split(" "):
            collector.emit([word])


class WordCount(BasicBolt):
    """Counts words in task state; emits each word's new count, anchored, for the KafkaBolt to write."""

    outputs = ("key", "message")

    def prepare(self, conf, context):
        self.counts: dict[str, int] = {}

    def execute(self, tup, collector):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        collector.emit([word, self.counts[word]])


_started: list = []  # the broker this run started, if it started one


def servers(conf) -> str:
    """The brokers to use: config ``squall.kafka.bootstrap.servers``, else one started for this run."""
    if conf.get("squall.kafka.bootstrap.servers"):
        return conf["squall.kafka.bootstrap.servers"]
    if not _started:
        from squall.connectors.kafka.local_broker import LocalKafkaBroker

        _started.append(LocalKafkaBroker(Path(conf["example.dir"]) / "kafka"))
        atexit.register(_started[0].stop)
    return _started[0].servers


def fill_once(conf, count: int) -> int:
    """Create the topics and write ``count`` sample sentences, the first time only."""
    brokers = servers(conf)
    if sum(end_offsets(brokers, SENTENCES_TOPIC).values()):
        return 0
    create_topic(brokers, SENTENCES_TOPIC, 4)
    create_topic(brokers, COUNTS_TOPIC, 2)
    return produce(brokers, SENTENCES_TOPIC, ([SENTENCES[i % len(SENTENCES)]] for i in range(count)), partitions=4)


def build_topology(conf):
    fill_once(conf, int(conf["example.sentences"]))
    brokers = servers(conf)
    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSpout(SENTENCES_TOPIC, brokers, GROUP, fields=["sentence"]), 2)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("to-kafka", KafkaBolt(COUNTS_TOPIC, brokers)).shuffle_grouping("count")
    return builder.build()


def final_counts(brokers: str) -> dict[str, int]:
    """The last count written for each word."""
    counts: dict[str, int] = {}
    for record in read_all(brokers, COUNTS_TOPIC):
        word, count = record.key().decode(), int(record.value())
        counts[word] = max(counts.get(word, 0), count)
    return counts


def summary(conf, console):
    brokers = servers(conf)
    counts = Counter(final_counts(brokers))
    top = ", ".join(f"{w}={c}" for w, c in counts.most_common(8))
    console.print(f"words counted: {sum(counts.values())}; top: {top}")
    ends, committed = end_offsets(brokers, SENTENCES_TOPIC), committed_offsets(brokers, GROUP, SENTENCES_TOPIC)
    console.print(f"offsets committed: {committed} of {ends}")
