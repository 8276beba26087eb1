"""Word count whose counts live in a stateful bolt's KeyValueState, read from the embedded reliable queue."""

from squall import StatefulBolt, TopologyBuilder
from squall.connectors import QueueSpout

NAME = "stateful-words"
PENDING = 200
CONF = {"topology.max.spout.pending": PENDING, "topology.state.checkpoint.interval.ms": 200}


class CountInState(StatefulBolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        word = tup[0]
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tup)


def build_topology(conf):
    b = TopologyBuilder()
    b.set_spout("queue", QueueSpout(conf["test.queue"], "q", fields=["word"]))
    b.set_bolt("count", CountInState(), 2).fields_grouping("queue", ["word"])
    return b.build()
