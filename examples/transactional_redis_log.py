"""Exactly-once word counts from a Redis Streams log into a database of your choice.

    log (Redis streams words:0 .. words:3, one per partition) --shuffle--> partial (per batch)
        --fields("word")--> commit (committer: adds the batch's counts, in txid order)

The counts are ``TransactionalValue``s (or ``OpaqueValue``s with
``example.opaque=true``, read by the opaque spout) in the store at
``example.state``: a SQLite path, ``redis://...`` or ``postgresql://...``.
Transactional progress goes to ``squall.transactional.store``: a SQLite path or
``zookeeper://host:port/root``. The log is filled with sample words on the first
run.

    squall run examples/transactional_redis_log.py --conf squall.redis.url=redis://127.0.0.1:6379/0 \\
        --conf example.state=postgresql://postgres@127.0.0.1:5432/postgres \\
        --conf squall.transactional.store=zookeeper://127.0.0.1:2181/squall
"""

from __future__ import annotations

import random

from squall.connectors.keyed_state import open_keyed_state
from squall.connectors.redis_log import RedisLogOpaqueSpout, RedisLogTransactionalSpout
from squall.connectors.redis_streams import append, connect
from squall.transactional import BatchBolt, Committer, TransactionalTopologyBuilder

NAME = "redis-log-words"
CONF = {
    "example.state": ".squall-data/redis-log-words.sqlite",
    "example.opaque": False,
    "example.words": 20_000,
    "squall.transactional.store": ".squall-data/redis-log-words-coordinator.sqlite",
    "topology.max.spout.pending": 3,  # batches processed at once; their commits stay in txid order
}
PARTITIONS = 4
TAKE_PER_BATCH = 1000
WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "kiwi", "lemon", "mango"]


def sample_words(count: int) -> list[str]:
    rnd = random.Random(42)
    return [rnd.choice(WORDS) for _ in range(count)]


class PartialCount(BatchBolt):
    outputs = ("id", "word", "count")

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.counts = collector, attempt, {}

    def execute(self, tup):
        self.counts[tup[1]] = self.counts.get(tup[1], 0) + 1

    def finish_batch(self):
        for word, n in sorted(self.counts.items()):
            self.collector.emit([self.attempt, word, n])


class StoreCounts(BatchBolt, Committer):
    """Adds the batch's counts to the keyed state, as one atomic update under the txid."""

    outputs = ()

    def __init__(self, state_url: str, opaque: bool) -> None:
        self.state_url, self.opaque = state_url, opaque

    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.counts = attempt, {}
        self.writer = f"{context.component_id}/{context.task_index}"  # each key has one writer: fields grouping

    def execute(self, tup):
        self.counts[tup[1]] = self.counts.get(tup[1], 0) + tup[2]

    def finish_batch(self):
        state = open_keyed_state(self.state_url, "word_counts", opaque=self.opaque)
        try:
            state.update(self.attempt.txid, self.counts, writer=self.writer)
        finally:
            state.close()


def fill_once(url: str, count: int) -> None:
    """Append ``count`` sample words across the partitions, if the log is empty."""
    client = connect(url)
    if any(client.xlen(f"words:{p}") for p in range(PARTITIONS)):
        return
    words = sample_words(count)
    for p in range(PARTITIONS):
        append(url, f"words:{p}", ([word] for word in words[p::PARTITIONS]))


def build_topology(conf):
    url = conf["squall.redis.url"]
    fill_once(url, int(conf["example.words"]))
    partitions = [(url, f"words:{p}") for p in range(PARTITIONS)]
    opaque = bool(conf["example.opaque"])
    spout_class = RedisLogOpaqueSpout if opaque else RedisLogTransactionalSpout
    builder = TransactionalTopologyBuilder(NAME, "log", spout_class(partitions, ["word"], TAKE_PER_BATCH), 2)
    builder.set_bolt("partial", PartialCount(), 2).shuffle_grouping("log")
    builder.set_bolt("commit", StoreCounts(conf["example.state"], opaque), 2).fields_grouping("partial", ["word"])
    return builder.build()


def summary(conf, console):
    state = open_keyed_state(conf["example.state"], "word_counts", opaque=bool(conf["example.opaque"]))
    counts = state.values()
    state.close()
    console.print(f"words counted: {sum(counts.values())}; " + ", ".join(f"{w}={c}" for w, c in sorted(counts.items())))
