"""Reads the reliable queue and records every message it processes in a SQLite table."""

from components import RecordValues

from squall import TopologyBuilder
from squall.connectors import QueueSpout

CONF = {"topology.message.timeout.secs": 5, "topology.max.spout.pending": 20}


def build_topology(conf):
    b = TopologyBuilder()
    b.set_spout("queue", QueueSpout(conf["test.queue"], "q", fields=["v"]))
    pause = float(conf.get("test.record.pause.secs", 0))  # a slow sink keeps messages pending for a while
    b.set_bolt("record", RecordValues(conf["test.sink"], pause), 2).shuffle_grouping("queue")
    return b.build()
