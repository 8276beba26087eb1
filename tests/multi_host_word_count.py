"""Word count for the multi-host test: three spout tasks read the embedded queue on the hosts that run them,
``split`` and ``count`` have three tasks each, and ``count`` stores its counts in SQLite on every tick, acking
the words it held only then."""

from __future__ import annotations

import os
import sqlite3
import time

from squall import BasicBolt, Bolt, Fields, TopologyBuilder
from squall.connectors import QueueSpout

NAME = "multi-host-words"
CONF = {"topology.max.spout.pending": 4000, "topology.message.timeout.secs": 30}


class HostRecordingQueueSpout(QueueSpout):
    """The embedded queue's spout, recording in the counts database where each of its tasks opens: the host's
    address, as its Spark worker was started with it (``SPARK_LOCAL_IP``), and when."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        with sqlite3.connect(conf["test.counts"], timeout=60) as db:
            db.execute(
                "INSERT INTO spout_opens (task_index, host, opened_at) VALUES (?, ?, ?)",
                (context.task_index, os.environ.get("SPARK_LOCAL_IP", ""), time.time()),
            )


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup["sentence"].split(" "):
            collector.emit([word])


class CountToSqlite(Bolt):
    """Counts words in a dict; every tick, stores the changed counts and acks what it held."""

    outputs = ()

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: dict[str, int] = {}
        self.dirty: set[str] = set()
        self.held = []
        self.db = sqlite3.connect(self.db_path, timeout=60)

    def execute(self, tup):
        if tup.is_tick:
            self.flush()
            return
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.dirty.add(word)
        self.held.append(tup)

    def flush(self):
        if self.dirty:
            with self.db:
                self.db.executemany(
                    "INSERT INTO word_counts (word, count) VALUES (?, ?)"
                    " ON CONFLICT(word) DO UPDATE SET count = excluded.count",
                    [(w, self.counts[w]) for w in sorted(self.dirty)],
                )
        for tup in self.held:
            self.collector.ack(tup)
        self.dirty.clear()
        self.held = []


def build_topology(conf):
    db_path = conf["test.counts"]
    with sqlite3.connect(db_path, timeout=60) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS word_counts (word TEXT PRIMARY KEY, count INTEGER NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS spout_opens (task_index INTEGER, host TEXT, opened_at REAL)")
    builder = TopologyBuilder()
    builder.set_spout("sentences", HostRecordingQueueSpout(conf["test.queue"], "sentences", fields=["sentence"]), 3)
    builder.set_bolt("split", Split(), 3).shuffle_grouping("sentences")
    builder.set_bolt("count", CountToSqlite(db_path), 3).fields_grouping("split", Fields("word")).add_configuration(
        "topology.tick.tuple.freq.secs", 1
    )
    return builder.build()
