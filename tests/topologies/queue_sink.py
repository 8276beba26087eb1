"""Reads the reliable queue and records every message it processes in a SQLite table."""

import sqlite3

from squall import BasicBolt, TopologyBuilder
from squall.connectors import QueueSpout

CONF = {"topology.message.timeout.secs": 5, "topology.max.spout.pending": 20}


class Record(BasicBolt):
    outputs = ()

    def __init__(self, db_path):
        self.db_path = db_path

    def prepare(self, conf, context):
        self.db = sqlite3.connect(self.db_path, timeout=30)

    def execute(self, tup, collector):
        with self.db:
            self.db.execute("INSERT INTO seen (value) VALUES (?)", (tup[0],))


def build_topology(conf):
    with sqlite3.connect(conf["test.sink"]) as db:
        db.execute("CREATE TABLE IF NOT EXISTS seen (value TEXT)")
    b = TopologyBuilder()
    b.set_spout("queue", QueueSpout(conf["test.queue"], "q", fields=["v"]))
    b.set_bolt("record", Record(conf["test.sink"]), 2).shuffle_grouping("queue")
    return b.build()
