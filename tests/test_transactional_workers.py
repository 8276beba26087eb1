"""Transactional batches through the long-lived workers: emitters on the workers, no Spark job per batch, and a
batch that waits on something external holds up no other batch."""

import os
import sqlite3
import time
from pathlib import Path

from squall import Fields, LocalCluster
from squall.transactional import BatchBolt, Committer, MemoryTransactionalSpout, TransactionalTopologyBuilder
from squall.transactional.coordinator import Phase


class PidSpout(MemoryTransactionalSpout):
    """Each tuple carries the process id of the emitter that emitted it."""

    def __init__(self, partitions, take):
        super().__init__(partitions, ["n"], take)
        self.fields = Fields("tx", "n", "pid")

    def _emit(self, tx, collector, partition, start, count):
        for (n,) in self.partitions.get(partition, [])[start : start + count]:
            collector.emit([tx, n, os.getpid()])


class Record(BatchBolt, Committer):
    """Writes each batch's ``(txid, n, emitter pid, bolt pid)`` rows to SQLite, once per txid."""

    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, conf, context, collector, batch_id):
        self.txid, self.task, self.rows = batch_id.txid, context.task_id, []

    def execute(self, tup):
        self.rows.append((self.txid, tup[1], tup[2], os.getpid()))

    def finish_batch(self):
        db = sqlite3.connect(self.path, timeout=60)
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS seen (txid INTEGER, n INTEGER, emitter INTEGER, bolt INTEGER)")
            db.execute("CREATE TABLE IF NOT EXISTS done (txid INTEGER, task INTEGER, PRIMARY KEY (txid, task))")
            if db.execute("SELECT 1 FROM done WHERE txid = ? AND task = ?", (self.txid, self.task)).fetchone() is None:
                db.executemany("INSERT INTO seen VALUES (?, ?, ?, ?)", self.rows)
                db.execute("INSERT INTO done VALUES (?, ?)", (self.txid, self.task))
        db.close()


def last_spark_job(sc) -> int:
    """Runs a one-task job and returns its id: job ids are numbered in the order jobs start."""
    sc.parallelize([0], 1).count()
    return max(sc.statusTracker().getJobIdsForGroup())


def test_batches_are_emitted_and_processed_on_the_workers_with_no_spark_job_per_batch(spark, tmp_path):
    data = {p: [[p * 1000 + i] for i in range(60)] for p in range(3)}
    builder = TransactionalTopologyBuilder("on-workers", "spout", PidSpout(data, 4), 2)
    builder.set_committer_bolt("record", Record(str(tmp_path / "seen.sqlite")), 2).shuffle_grouping("spout")
    with LocalCluster() as cluster:
        before = last_spark_job(spark)
        run = cluster.submit_topology("on-workers", {"topology.max.spout.pending": 3}, builder.build())
        deadline = time.monotonic() + 120
        while sum(tuples for _, tuples, _ in list(run.commits)) < 180:
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, "the batches did not commit"
            time.sleep(0.05)
        committed = run.coordinator.last_committed
    jobs = last_spark_job(spark) - before  # the workers hold every core while the topology runs
    assert committed >= 15  # 15 batches of tuples, then empty ones
    assert jobs == 2  # the run's worker job, and the count above: none per batch or per phase
    rows = sqlite3.connect(tmp_path / "seen.sqlite").execute("SELECT n, emitter, bolt FROM seen").fetchall()
    assert sorted(n for n, _, _ in rows) == sorted(n for part in data.values() for (n,) in part)
    assert os.getpid() not in {emitter for _, emitter, _ in rows} | {bolt for _, _, bolt in rows}


class Gate(BatchBolt):
    """txid 1's ``finish_batch`` waits until the test creates ``release``: an external call that hangs."""

    outputs = ("tx", "count")

    def __init__(self, release: str) -> None:
        self.release = release

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.tx, self.count = collector, batch_id, 0

    def execute(self, tup):
        self.count += 1

    def finish_batch(self):
        deadline = time.monotonic() + 120
        while self.tx.txid == 1 and not Path(self.release).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.collector.emit([self.tx, self.count])


class Total(BatchBolt, Committer):
    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, conf, context, collector, batch_id):
        self.txid, self.count = batch_id.txid, 0

    def execute(self, tup):
        self.count += tup[1]

    def finish_batch(self):
        db = sqlite3.connect(self.path, timeout=60)
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS totals (txid INTEGER PRIMARY KEY, count INTEGER)")
            db.execute("INSERT OR IGNORE INTO totals VALUES (?, ?)", (self.txid, self.count))
        db.close()


def test_a_batch_waiting_on_something_external_holds_up_no_other_batch(spark, tmp_path):
    release = tmp_path / "release"
    data = {0: [[i] for i in range(40)]}
    builder = TransactionalTopologyBuilder("gate", "spout", MemoryTransactionalSpout(data, ["n"], 10))
    builder.set_bolt("gate", Gate(str(release))).shuffle_grouping("spout")  # one task: every batch on it
    builder.set_bolt("total", Total(str(tmp_path / "totals.sqlite"))).global_grouping("gate")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("gate", {"topology.max.spout.pending": 4}, builder.build())
        deadline = time.monotonic() + 120
        while not all(run.coordinator.phase_of(txid) is Phase.PROCESSED for txid in (2, 3, 4)):
            assert time.monotonic() < deadline, "later batches were not processed while the first one waited"
            time.sleep(0.02)
        # Batches 2 to 4 were processed on the same bolt task while batch 1 waited; none committed before it.
        assert run.coordinator.phase_of(1) is Phase.PROCESSING
        assert run.coordinator.last_committed == 0
        release.touch()
        while run.coordinator.last_committed < 4:
            assert time.monotonic() < deadline, "the batches did not commit once the first was released"
            time.sleep(0.02)
    totals = sqlite3.connect(tmp_path / "totals.sqlite").execute("SELECT txid, count FROM totals").fetchall()
    assert sorted(totals)[:4] == [(1, 10), (2, 10), (3, 10), (4, 10)]


class SetsAsideNegatives(MemoryTransactionalSpout):
    """A negative number is malformed: set aside and counted, never emitted."""

    def _emit(self, tx, collector, partition, start, count):
        for (n,) in self.partitions.get(partition, [])[start : start + count]:
            if n < 0:
                collector.report_malformed(f"partition {partition}: {n} is negative; skipped")
            else:
                collector.emit([tx, n])


def test_malformed_entries_are_counted_once_from_every_emitter_task(spark, tmp_path):
    data = {p: [[-1 - p]] + [[p * 100 + i] for i in range(20)] for p in range(4)}
    builder = TransactionalTopologyBuilder("aside", "spout", SetsAsideNegatives(data, ["n"], 5), 2)
    builder.set_committer_bolt("total", Total(str(tmp_path / "totals.sqlite")), 1).global_grouping("spout")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("aside", {"topology.max.spout.pending": 3}, builder.build())
        deadline = time.monotonic() + 120
        while sum(tuples for _, tuples, _ in list(run.commits)) < 80:
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, "the batches did not commit"
            time.sleep(0.05)
        hosts = set(run.scheduler.spout_workers.values())
        spout = run.stats.of("spout")
    assert len(hosts) == 2  # the two emitter tasks report from two workers
    assert (spout.emitted, spout.malformed) == (80, 4)
