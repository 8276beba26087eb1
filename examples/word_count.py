"""Word count, the topology of Storm's "Guaranteeing message processing".

    sentences (queue) --shuffle--> split --fields("word")--> count --> SQLite

Sentences come from squall's embedded reliable queue, or from a RabbitMQ queue
or a Redis stream, filled with sample sentences on the first run. ``count``
keeps its counts as task state and, on each tick, writes the counts that changed
to a SQLite table and only then acks the tuples it held: a word is acked once
its count is stored.

    squall run examples/word_count.py [--conf example.dir=PATH] [--conf example.sentences=N]
    squall run examples/word_count.py --conf example.source=rabbitmq \
        --conf squall.amqp.url=amqp://guest:guest@127.0.0.1:5672/%2F
    squall run examples/word_count.py --conf example.source=redis --conf squall.redis.url=redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from squall import BasicBolt, Bolt, Fields, TopologyBuilder
from squall.connectors import QueueSpout, ReliableQueue
from squall.connectors.rabbitmq import RabbitMQSpout, publish, queue_depth
from squall.connectors.redis_streams import RedisStreamSpout, append, connect

NAME = "word-count"
CONF = {
    "example.source": "queue",  # or rabbitmq, redis
    "example.dir": ".squall-data",
    "example.sentences": 2000,
    "topology.message.timeout.secs": 30,
    # Sentences in flight at once. The count bolt acks a word only once its count is stored, at its next tick,
    # so the spout must have at least a tick's worth of sentences in flight to keep going between ticks.
    "topology.max.spout.pending": 5000,
}

# How often ``count`` stores the counts that changed and acks the words it held: a word's complete latency is
# about this long. Longer writes SQLite less often; shorter acks sooner.
FLUSH_SECS = 0.1

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


class WordCount(Bolt):
    """Counts words; every tick, stores the changed counts and acks what it held."""

    outputs = ("word", "count")

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts: dict[str, int] = {}
        self.dirty: set[str] = set()
        self.held = []
        self.db = sqlite3.connect(self.db_path, timeout=30)  # rebuilt wherever the task runs
        for attempt in range(50):  # WAL is kept in the file: one task switches it, others may find it locked
            try:
                if self.db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self.db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError:
                if attempt == 49:
                    raise
                time.sleep(0.1)

    def execute(self, tup):
        if tup.is_tick:
            self.flush()
            return
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.dirty.add(word)
        self.held.append(tup)
        self.collector.emit([word, self.counts[word]], anchors=tup)

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


def paths(conf) -> tuple[str, str]:
    base = Path(conf["example.dir"])
    base.mkdir(parents=True, exist_ok=True)
    return str(base / "sentences.sqlite"), str(base / "word_counts.sqlite")


def fill_once(conf, count: int) -> int:
    """Put ``count`` sample sentences on the source, the first time only (per ``example.dir``)."""
    queue_path, db_path = paths(conf)
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS filled (n INTEGER)")
        if db.execute("SELECT count(*) FROM filled").fetchone()[0]:
            return 0
        db.execute("INSERT INTO filled VALUES (?)", (count,))
    sentences = [[SENTENCES[i % len(SENTENCES)]] for i in range(count)]
    source = conf["example.source"]
    if source == "rabbitmq":
        publish(conf["squall.amqp.url"], "sentences", sentences)
    elif source == "redis":
        append(conf["squall.redis.url"], "sentences", sentences)
    else:
        queue = ReliableQueue(queue_path, "sentences")
        queue.put_many(sentences)
        queue.close()
    return count


def sentence_spout(conf):
    source = conf["example.source"]
    if source == "rabbitmq":
        return RabbitMQSpout("sentences", fields=["sentence"])  # the URL is config squall.amqp.url
    if source == "redis":
        return RedisStreamSpout(None, "sentences", fields=["sentence"])  # the URL is config squall.redis.url
    if source == "queue":
        return QueueSpout(paths(conf)[0], "sentences", fields=["sentence"])
    raise ValueError(f"example.source must be queue, rabbitmq or redis, got {source!r}")


def build_topology(conf):
    _, db_path = paths(conf)
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS word_counts (word TEXT PRIMARY KEY, count INTEGER NOT NULL)")
    spout = sentence_spout(conf)
    fill_once(conf, int(conf["example.sentences"]))
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout)
    builder.set_bolt("split", SplitSentence(), 4).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(os.path.abspath(db_path)), 4).fields_grouping(
        "split", Fields("word")
    ).add_configuration("topology.tick.tuple.freq.secs", FLUSH_SECS)
    return builder.build()


def summary(conf, console):
    queue_path, db_path = paths(conf)
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT word, count FROM word_counts ORDER BY count DESC, word LIMIT 8").fetchall()
        total = db.execute("SELECT coalesce(sum(count), 0) FROM word_counts").fetchone()[0]
    console.print(f"words counted in {db_path}: {total}; top: " + ", ".join(f"{w}={c}" for w, c in rows))
    source = conf["example.source"]
    if source == "rabbitmq":
        console.print(f"RabbitMQ queue sentences: {queue_depth(conf['squall.amqp.url'], 'sentences')} left")
    elif source == "redis":
        pending = connect(conf["squall.redis.url"]).xpending("sentences", "squall")["pending"]
        console.print(f"Redis stream sentences: {pending} pending")
    else:
        queue = ReliableQueue(queue_path, "sentences")
        left = queue.counts()
        queue.close()
        console.print(f"queue {queue_path}: {left['ready']} ready, {left['pending']} pending, {left['dead']} set aside")
