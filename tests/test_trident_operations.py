"""Trident's operations through the real runtime: several topologies on one LocalCluster, each batch's results
recorded once per txid in SQLite, and compared with what Storm's semantics give."""

import itertools
import json
import os
import sqlite3
import time
from collections import Counter
from pathlib import Path

from squall import LocalCluster
from squall.connectors import QueueSpout, ReliableQueue
from squall.transactional import MemoryTransactionalSpout
from squall.trident import BaseFunction, BaseStateUpdater, State, StateFactory, TridentTopology
from squall.trident.builtin import Count, Sum
from squall.trident.sqlite_state import SqliteMapState
from squall.trident.testing import CountAsAggregator, FixedBatchSpout, Split, StringLength

SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
]


class Recorded(State):
    """Appends each batch's tuples to a SQLite table, once per (txid, partition)."""

    def __init__(self, path, partition):
        self.path, self.partition, self.txid = path, partition, None

    def begin_commit(self, txid):
        self.txid = txid

    def record(self, rows):
        db = sqlite3.connect(self.path, timeout=60)
        key = (self.txid, self.partition)
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS rows (txid INTEGER, part INTEGER, row TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS done (txid INTEGER, part INTEGER, PRIMARY KEY (txid, part))")
            if db.execute("SELECT 1 FROM done WHERE txid=? AND part=?", key).fetchone() is None:
                db.executemany("INSERT INTO rows VALUES (?, ?, ?)", [(*key, json.dumps(r)) for r in rows])
                db.execute("INSERT INTO done VALUES (?, ?)", key)
        db.close()


class RecordFactory(StateFactory):
    def __init__(self, path):
        self.path = str(path)

    def make_state(self, conf, metrics, partition_index, num_partitions):
        return Recorded(self.path, partition_index)


class RecordRows(BaseStateUpdater):
    def update_state(self, state, tuples, collector):
        state.record([list(t) for t in tuples])


def settle(cluster, run, timeout=120):
    """Wait, while the cluster drives the run, until an empty batch committed after everything emitted."""
    deadline = time.monotonic() + timeout
    while not run.settled():
        assert not cluster.failures, cluster.failures
        assert time.monotonic() < deadline, "the batches did not settle"
        time.sleep(0.05)


def recorded(path):
    db = sqlite3.connect(path)
    rows = db.execute("SELECT txid, row FROM rows").fetchall()
    db.close()
    by_txid = {}
    for txid, row in rows:
        by_txid.setdefault(txid, []).append(json.loads(row))
    return by_txid


def record(stream, path):
    return stream.partition_persist(RecordFactory(path), stream.fields, RecordRows())


class FailsOncePerTxid(BaseFunction):
    """Splits like Split, but raises the first time it meets each txid's batch (a marker file per sentence)."""

    def __init__(self, marks):
        self.marks = str(marks)

    def execute(self, tup, collector):
        mark = Path(self.marks) / str(abs(hash(tup[0])))
        if not mark.exists():
            mark.touch()
            raise RuntimeError("failing this batch once")
        for word in tup[0].split():
            collector.emit([word])


def test_aggregations_merge_and_join_per_batch(cluster, tmp_path):
    spout = FixedBatchSpout(["sentence"], 2, *SENTENCES)
    batches = [SENTENCES[i : i + 2] for i in range(0, len(SENTENCES), 2)]

    counts = TridentTopology()
    words = counts.new_stream("agg", spout).each(["sentence"], Split(), ["word"])
    record(words.aggregate(Count(), ["count"]), tmp_path / "count.sqlite")
    record(
        words.each(["word"], StringLength(), ["len"])
        .chained_agg()
        .aggregate(CountAsAggregator(), ["n"])
        .aggregate(["len"], Sum(), ["letters"])
        .chain_end(),
        tmp_path / "chained.sqlite",
    )
    record(words.group_by(["word"]).aggregate(Count(), ["c"]).parallelism_hint(2), tmp_path / "grouped.sqlite")

    merged = TridentTopology()
    s = merged.new_stream("merge", FixedBatchSpout(["sentence"], 2, *SENTENCES))
    split = s.each(["sentence"], Split(), ["word"]).project(["word"])
    lengths = s.each(["sentence"], StringLength(), ["len"]).project(["len"])
    record(merged.merge(split, lengths), tmp_path / "merged.sqlite")
    first_letters = s.each(["sentence"], Split(), ["word"]).map(lambda t: [t[1], t[1][0]], ["word", "first"])
    lengths_by_word = (
        s.each(["sentence"], Split(), ["word"]).each(["word"], StringLength(), ["len"]).project(["word", "len"])
    )
    record(
        merged.join(first_letters, ["word"], lengths_by_word, ["word"], ["word", "first", "len"]),
        tmp_path / "joined.sqlite",
    )

    one_core_each = {"squall.workers": 1}  # two topologies side by side on the tests' two cores
    cluster.submit_topology("trident-agg", one_core_each, counts.build())
    cluster.submit_topology("trident-merge", one_core_each, merged.build())
    cluster.wait_idle()
    assert not cluster.failures, cluster.failures

    def per_batch(path, empty=None):
        """Each txid's rows, txid 1 first: the batches with sentences, and then (``empty``) what each empty
        batch gave, which a whole-batch aggregate gives too: its zero."""
        by_txid = recorded(path)
        rows = [by_txid[txid] for txid in sorted(by_txid)]
        if empty is not None:
            assert all(r == empty for r in rows[len(batches) :]), rows[len(batches) :]
        return rows[: len(batches)]

    assert per_batch(tmp_path / "count.sqlite", [[0]]) == [[[sum(len(s.split()) for s in b)]] for b in batches]
    assert per_batch(tmp_path / "chained.sqlite", [[0, 0]]) == [
        [[sum(len(s.split()) for s in b), sum(len(w) for s in b for w in s.split())]] for b in batches
    ]
    assert [sorted(rows) for rows in per_batch(tmp_path / "grouped.sqlite")] == [
        sorted([w, n] for w, n in Counter(w for s in b for w in s.split()).items()) for b in batches
    ]
    assert [sorted(rows, key=str) for rows in per_batch(tmp_path / "merged.sqlite")] == [
        sorted([[w] for s in b for w in s.split()] + [[len(s)] for s in b], key=str) for b in batches
    ]
    joined = [sorted(rows) for rows in per_batch(tmp_path / "joined.sqlite")]
    expected = []
    for b in batches:
        ws = [w for s in b for w in s.split()]
        expected.append(sorted([w, w[0], len(w)] for w in ws for other in ws if other == w))
    assert joined == expected


def test_a_failed_batch_is_replayed_and_counts_once_from_a_transactional_partitioned_spout(tmp_path):
    lines = [[s] for s in SENTENCES * 4]
    spout = MemoryTransactionalSpout({0: lines[:10], 1: lines[10:]}, ["sentence"], take_per_batch=3)
    marks = tmp_path / "marks"
    os.makedirs(marks)
    path = str(tmp_path / "counts.sqlite")
    topology = TridentTopology()
    (
        topology.new_stream("partitioned", spout)
        .parallelism_hint(2)
        .each(["sentence"], FailsOncePerTxid(marks), ["word"])
        .group_by(["word"])
        .persistent_aggregate(SqliteMapState.transactional(path), Count(), ["count"])
        .parallelism_hint(3)
    )
    with LocalCluster() as cluster:
        run = cluster.submit_topology("trident-replay", {"topology.max.spout.pending": 3}, topology.build())
        settle(cluster, run)
        assert run.stats.failed_waves > 0
    expected = Counter(w for (s,) in lines for w in s.split())
    assert SqliteMapState.read(path) == {(w,): n for w, n in expected.items()}


def test_batches_begin_no_more_often_than_the_emit_interval(tmp_path):
    topology = TridentTopology()
    spout = FixedBatchSpout(["sentence"], 1, *SENTENCES)
    record(topology.new_stream("paced", spout).each(["sentence"], Split(), ["word"]), tmp_path / "words.sqlite")
    conf = {"topology.trident.batch.emit.interval.millis": 300, "topology.max.spout.pending": 5}
    with LocalCluster() as cluster:
        run = cluster.submit_topology("paced", conf, topology.build())
        settle(cluster, run)
        began = [began for _, _, _, began in sorted(run.recent_commits(), key=lambda c: c[0].txid)]
    assert len(began) >= len(SENTENCES) + 1  # a batch a sentence, then an empty one
    assert min(b - a for a, b in itertools.pairwise(began)) >= 0.3 - 0.002


def test_a_plain_spout_feeds_a_trident_stream_at_least_once_and_its_tuples_are_acked(tmp_path):
    queue_path = str(tmp_path / "queue.sqlite")
    queue = ReliableQueue(queue_path, "sentences")
    lines = SENTENCES * 4
    queue.put_many([[s] for s in lines])
    marks = tmp_path / "marks"
    os.makedirs(marks)
    path = str(tmp_path / "counts.sqlite")
    topology = TridentTopology()
    (
        topology.new_stream("queued", QueueSpout(queue_path, "sentences", ["sentence"]))
        .each(["sentence"], FailsOncePerTxid(marks), ["word"])
        .group_by(["word"])
        .persistent_aggregate(SqliteMapState.opaque(path), Count(), ["count"])
    )
    conf = {"topology.spout.max.batch.size": 7}
    with LocalCluster() as cluster:
        run = cluster.submit_topology("trident-queue", conf, topology.build())
        settle(cluster, run)
        assert run.stats.failed_waves > 0
    assert queue.counts() == {"ready": 0, "pending": 0, "dead": 0}  # every sentence acked, once committed
    assert SqliteMapState.read(path) == {(w,): n for w, n in Counter(w for s in lines for w in s.split()).items()}
