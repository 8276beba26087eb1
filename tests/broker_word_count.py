"""Word count from a broker (RabbitMQ, Redis Streams or Kafka) that writes down every word it counts.

Messages are ``{"id": n, "sentence": "..."}``. Each count task appends a line
``<message id> <word>`` to a file of its own before the tuple is acked, so a
test can tell which messages were counted, and how many times. The broker's URL
comes from the config key ``squall.amqp.url``, ``squall.redis.url`` or ``squall.kafka.bootstrap.servers``.
"""

import os
from pathlib import Path

from squall import BasicBolt, TopologyBuilder
from squall.connectors.kafka import KafkaSpout
from squall.connectors.rabbitmq import RabbitMQSpout
from squall.connectors.redis_streams import RedisStreamSpout

CONF = {
    "topology.max.spout.pending": 5000,
    "topology.message.timeout.secs": 60,
    "squall.wave.spout.batch": 5000,
}


class SplitWords(BasicBolt):
    """Splits a sentence; with a ``crash_marker``, kills its Python worker once, mid-wave."""

    outputs = ("id", "word")

    def __init__(self, crash_marker: str | None = None, crash_after: int = 0) -> None:
        self.crash_marker, self.crash_after = crash_marker, crash_after

    def prepare(self, conf, context):
        self.executed = 0

    def execute(self, tup, collector):
        self.executed += 1
        if self.crash_marker and self.executed >= self.crash_after and not Path(self.crash_marker).exists():
            Path(self.crash_marker).write_text(str(os.getpid()))
            os._exit(1)
        for word in tup["sentence"].split():
            collector.emit([tup["id"], word])


class CountWords(BasicBolt):
    """Counts words, writing ``<message id> <word>`` down first."""

    outputs = ()

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def prepare(self, conf, context):
        self.counts = {}
        path = Path(self.out_dir, f"counted-{context.task_id}-{os.getpid()}.log")
        self.out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the task's life; a line per write

    def execute(self, tup, collector):
        self.out.write(f"{tup['id']} {tup['word']}\n")
        self.counts[tup["word"]] = self.counts.get(tup["word"], 0) + 1


def build_topology(conf):
    spouts = 1
    if conf["test.source"] == "rabbitmq":
        spout = RabbitMQSpout(conf["test.queue"], fields=["id", "sentence"])
    elif conf["test.source"] == "kafka":
        spout = KafkaSpout(
            conf["test.queue"], None, "word-count", fields=["id", "sentence"], offset_commit_period_ms=1000
        )
        spouts = 2
    else:
        spout = RedisStreamSpout(
            None, conf["test.queue"], fields=["id", "sentence"], claim_idle_ms=int(conf["test.claim_idle_ms"])
        )
    b = TopologyBuilder()
    b.set_spout("broker", spout, spouts)
    split = SplitWords(conf.get("test.crash_marker"), int(conf.get("test.crash_after", 0)))
    b.set_bolt("split", split, 2).shuffle_grouping("broker")
    b.set_bolt("count", CountWords(str(conf["test.out"])), 2).fields_grouping("split", ["word"])
    return b.build()
