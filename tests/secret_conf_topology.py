"""A topology for ``squall run`` that writes down, from a bolt on a worker, the config values it was given:
``test.password``, ``squall.postgresql.url`` and ``test.level``, as JSON in the file ``test.out``.
Its spout emits three numbers, then nothing, so that the run stays up until it is killed."""

import json
from pathlib import Path

from squall import BasicBolt, Spout, TopologyBuilder

NAME = "secrets"
CONF = {"test.level": "topology", "topology.message.timeout.secs": 30}


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.left = collector, 3

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.collector.emit([self.left], msg_id=self.left)


class WriteConfig(BasicBolt):
    outputs = ()

    def prepare(self, conf, context):
        seen = {key: conf.get(key) for key in ("test.password", "squall.postgresql.url", "test.level")}
        Path(conf["test.out"]).write_text(json.dumps(seen))

    def execute(self, tup, collector):
        pass


def build_topology(conf):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("write", WriteConfig()).shuffle_grouping("numbers")
    return b.build()
