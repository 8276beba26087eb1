"""The word count that ``benchmarks/soak.py`` runs under faults, with ``squall run``.

    queue (QueueSpout) --\\
                          +--shuffle--> split (3) --fields(word)--> count (3, StatefulBolt) --shuffle--> sink (3)
    stream (Redis) ------/

Sentences are ``{"id": n, "sentence": "..."}``: even ids come from the embedded queue, odd ids from the Redis
Stream. ``split`` emits ``(id, position, word)`` for each word. ``count`` keeps each word's count in its
``KeyValueState`` (checkpointed to Redis), and beside it which ``(id, position)`` it has counted, so that a word
replayed after it was counted (its tree failed further on) is not counted twice: the counts are exact, as an
idempotent sink makes them. What it has counted is kept as bitmaps of ``CHUNK`` sentences; those more than
``soak.dedup.window`` sentences behind the newest go, and a word that comes after its chunk went is counted under
the key ``LATE`` (so a check can tell why a count is high). ``sink`` writes every ``(id, position, word)`` to a
SQLite table, one row per word with the number of times it came, and acks what it wrote once it is committed.

Config (``--conf``): ``soak.queue`` (the queue's SQLite file), ``soak.stream`` (the stream's name), ``soak.sink``
(the sink's SQLite file), ``soak.dedup.window`` (sentences), ``soak.claim.idle.ms`` (the Redis spout's
``claim_idle_ms``), and ``squall.redis.url``.
"""

from __future__ import annotations

import sqlite3

from squall import BasicBolt, Bolt, StatefulBolt, TopologyBuilder
from squall.connectors import QueueSpout
from squall.connectors.redis_streams import RedisStreamSpout

NAME = "soak"
CONF = {
    "topology.message.timeout.secs": 10,
    "topology.max.spout.pending": 4000,
    "topology.state.provider": "redis",
    "topology.state.checkpoint.interval.ms": 1000,
    "squall.wave.spout.batch": 2000,
}
MAX_WORDS = 8  # words in a sentence, at most
CHUNK = 4096  # sentences per bitmap of what ``count`` has counted
LATE = ("late",)  # words counted after their chunk went: each may have been counted twice
SINK_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS words (sentence INTEGER, position INTEGER, word TEXT, deliveries INTEGER,"
    " PRIMARY KEY (sentence, position)) WITHOUT ROWID"
)


class SplitSentence(BasicBolt):
    outputs = ("id", "position", "word")

    def execute(self, tup, collector):
        for position, word in enumerate(tup["sentence"].split(" ")):
            collector.emit([tup["id"], position, word])


class CountOnce(StatefulBolt):
    """Counts each ``(id, position)`` once; emits every word it is sent, anchored, for the sink."""

    outputs = ("id", "position", "word")

    def __init__(self, window: int) -> None:
        self.keep = window // CHUNK + 1  # chunks kept behind the newest

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state
        self.newest = max((key[1] for key in state if isinstance(key, tuple) and key[0] == "seen"), default=0)

    def execute(self, tup):
        sentence, position, word = tup.values
        chunk = sentence // CHUNK
        key = ("seen", chunk)
        seen = self.state.get(key)
        if seen is None:
            seen = bytearray(CHUNK * MAX_WORDS // 8)
            if chunk < self.newest - self.keep:
                self.state.put(LATE, self.state.get(LATE, 0) + 1)
        bit = (sentence % CHUNK) * MAX_WORDS + position
        if not seen[bit >> 3] & (1 << (bit & 7)):
            seen[bit >> 3] |= 1 << (bit & 7)
            self.state.put(key, seen)
            self.state.put(word, self.state.get(word, 0) + 1)
        if chunk > self.newest:
            self.newest = chunk
            for old in [k for k in self.state if isinstance(k, tuple) and k[0] == "seen" and k[1] < chunk - self.keep]:
                self.state.delete(old)
        self.collector.emit([sentence, position, word], anchors=tup)
        self.collector.ack(tup)


class RecordWords(Bolt):
    """Writes ``(id, position, word)`` rows to SQLite, a transaction per tick or per ``FLUSH`` rows, and acks them
    once committed."""

    outputs = ()
    FLUSH = 2000

    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.db = sqlite3.connect(self.path, timeout=60)
        self.held = []

    def execute(self, tup):
        if not tup.is_tick:
            self.held.append(tup)
        if self.held and (tup.is_tick or len(self.held) >= self.FLUSH):
            with self.db:
                self.db.executemany(
                    "INSERT INTO words VALUES (?, ?, ?, 1)"
                    " ON CONFLICT (sentence, position) DO UPDATE SET deliveries = deliveries + 1",
                    [t.values for t in self.held],
                )
            for held in self.held:
                self.collector.ack(held)
            self.held = []


def build_topology(conf):
    b = TopologyBuilder()
    b.set_spout("queue", QueueSpout(conf["soak.queue"], "sentences", fields=["id", "sentence"]))
    claim_idle_ms = int(conf["soak.claim.idle.ms"])
    b.set_spout(
        "stream", RedisStreamSpout(None, conf["soak.stream"], fields=["id", "sentence"], claim_idle_ms=claim_idle_ms)
    )
    b.set_bolt("split", SplitSentence(), 3).shuffle_grouping("queue").shuffle_grouping("stream")
    b.set_bolt("count", CountOnce(int(conf["soak.dedup.window"])), 3).fields_grouping("split", ["word"])
    sink = b.set_bolt("sink", RecordWords(conf["soak.sink"]), 3).shuffle_grouping("count")
    sink.add_configuration("topology.tick.tuple.freq.secs", 1)
    return b.build()
