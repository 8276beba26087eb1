"""Storm-starter's TransactionalWords: exactly-once word counts, and how many words
fall in each bucket of ten counts, on the data of the global-count example.

    spout --fields("word")--> count (committer: per-word counts in SQLite)
          --none--> bucketize --fields("bucket")--> buckets (committer: words per bucket)

Both stores keep the txid next to each value (``TransactionalValue``), so a
replayed batch never counts twice.

    squall run examples/transactional_words.py
"""

from __future__ import annotations

from pathlib import Path

from squall import BasicBolt
from squall.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    SqliteKeyedState,
    TransactionalTopologyBuilder,
)

NAME = "transactional-words"
# Up to 3 batches are processed at once; their commits stay in txid order. Tiny batches (3 tuples a partition)
# so that storm-starter's data makes several; a real source takes thousands.
CONF = {"example.dir": ".squall-data/transactional-words", "topology.max.spout.pending": 3}
BUCKET_SIZE = 10
PARTITION_TAKE_PER_BATCH = 3
DATA = {
    0: [["cat"], ["dog"], ["chicken"], ["cat"], ["dog"], ["apple"]],
    1: [["cat"], ["dog"], ["apple"], ["banana"]],
    2: [["cat"], ["cat"], ["cat"], ["cat"], ["cat"], ["dog"], ["dog"], ["dog"], ["dog"]],
}


def _counted(old, delta):
    """A word's stored record: its count, and its count before this batch (None if new)."""
    return {"count": (old["count"] if old else 0) + delta, "prev": old["count"] if old else None}


class KeyedCountUpdater(BatchBolt, Committer):
    outputs = ("id", "key", "count", "prev_count")

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.counts = collector, attempt, {}

    def execute(self, tup):
        word = tup[1]
        self.counts[word] = self.counts.get(word, 0) + 1

    def finish_batch(self):
        if not self.counts:
            return
        database = SqliteKeyedState(self.db_path, "word_counts")
        updated = database.update(self.attempt.txid, self.counts, combine=_counted, initial=None)
        database.close()
        for word in sorted(updated):
            record = updated[word].value
            self.collector.emit([self.attempt, word, record["count"], record["prev"]])


class Bucketize(BasicBolt):
    outputs = ("attempt", "bucket", "delta")

    def execute(self, tup, collector):
        attempt, count, prev = tup[0], tup[2], tup[3]
        bucket = count // BUCKET_SIZE
        if prev is None:
            collector.emit([attempt, bucket, 1])
        elif bucket != prev // BUCKET_SIZE:
            collector.emit([attempt, bucket, 1])
            collector.emit([attempt, prev // BUCKET_SIZE, -1])


class BucketCountUpdater(BatchBolt, Committer):
    outputs = ("id", "bucket", "count")

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.deltas = collector, attempt, {}

    def execute(self, tup):
        self.deltas[tup[1]] = self.deltas.get(tup[1], 0) + tup[2]

    def finish_batch(self):
        if not self.deltas:
            return
        database = SqliteKeyedState(self.db_path, "bucket_counts")
        updated = database.update(self.attempt.txid, self.deltas)
        database.close()
        for bucket in sorted(updated):
            self.collector.emit([self.attempt, bucket, updated[bucket].value])


def db_path(conf) -> str:
    base = Path(conf["example.dir"])
    base.mkdir(parents=True, exist_ok=True)
    return str((base / "counts.sqlite").resolve())


def build_topology(conf):
    conf.setdefault("squall.transactional.store", str(Path(conf["example.dir"]) / "coordinator.sqlite"))
    spout = MemoryTransactionalSpout(DATA, ["word"], PARTITION_TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder("top-n-words", "spout", spout, 2)
    builder.set_bolt("count", KeyedCountUpdater(db_path(conf)), 5).fields_grouping("spout", ["word"])
    builder.set_bolt("bucketize", Bucketize()).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(db_path(conf)), 5).fields_grouping("bucketize", ["bucket"])
    return builder.build()


def on_commit(attempt, tuples, captured, console):
    if not tuples:
        return  # the source is drained; empty batches change nothing
    counts = ", ".join(f"{w}={c}" for _, w, c, _ in sorted(captured.get("count", []), key=lambda r: r[1]))
    buckets = ", ".join(f"{b}={c}" for _, b, c in sorted(captured.get("buckets", []), key=lambda r: r[1]))
    console.print(f"txid {attempt.txid}: counts {counts or '-'}; buckets {buckets or '-'}")


def summary(conf, console):
    words = SqliteKeyedState(db_path(conf), "word_counts")
    buckets = SqliteKeyedState(db_path(conf), "bucket_counts")
    counts = {w: v["count"] for w, v in words.values().items()}
    console.print("word counts: " + ", ".join(f"{w}={c}" for w, c in sorted(counts.items())))
    console.print("words per bucket: " + ", ".join(f"{b}={c}" for b, c in sorted(buckets.values().items())))
    words.close()
    buckets.close()
