"""Spouts, ackers and bolt state on the workers (``LocalCluster``): a Python worker killed mid-run loses nothing.

The bolt tasks snapshot their state every ``squall.snapshot.interval.ms``, written by the workers; the spout
tasks log what they emit. A worker that dies takes its tasks' state since their last snapshot with it (and the
spout task and acker task it hosted); the run starts again from the last complete snapshot and replays the waves
since from the logs, so no count falls below exact, and the source redelivers what was not acked.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import sqlite3
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from squall import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder

MESSAGES = 3000
WORDS = [f"w{i % 50}" for i in range(MESSAGES)]
CRASH_AT = 1500


class Numbered(Spout):
    """A reliable source in SQLite: emits message ``i`` as word ``WORDS[i]``, records acks, and redelivers on
    ``fail``; an instance opened again (its worker lost) redelivers every message not acked yet."""

    outputs = ("id", "word")

    def __init__(self, path: str) -> None:
        self.path = path
        with closing(sqlite3.connect(path)) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS acked (id INTEGER)")
            db.execute("CREATE TABLE IF NOT EXISTS failed (id INTEGER)")

    def open(self, conf, context, collector):
        with open(self.path + ".pids", "a") as pids:  # where it runs: a bolt in the same process may end it
            pids.write(f"{os.getpid()}\n")
        self.collector, self.db = collector, sqlite3.connect(self.path)
        acked = {i for (i,) in self.db.execute("SELECT id FROM acked")}
        self.queue = [i for i in range(MESSAGES) if i not in acked]

    def next_tuple(self):
        if self.queue:
            i = self.queue.pop(0)
            self.collector.emit([i, WORDS[i]], msg_id=i)

    def ack(self, msg_id):
        with self.db:
            self.db.execute("INSERT INTO acked VALUES (?)", (msg_id,))

    def fail(self, msg_id):
        with self.db:
            self.db.execute("INSERT INTO failed VALUES (?)", (msg_id,))
        self.queue.append(msg_id)


class CrashOnce(BasicBolt):
    """Kills its Python worker, the one that hosts the spout task, at the first message from ``CRASH_AT`` on that
    reaches it there (once per marker file): the spout task, its acker and a bolt task of each kind go with it."""

    outputs = ("word",)

    def __init__(self, marker: str, spout_pids: str) -> None:
        self.marker, self.spout_pids = marker, spout_pids

    def execute(self, tup, collector):
        crash = tup["id"] >= CRASH_AT and not Path(self.marker).exists()
        if crash and Path(self.spout_pids).read_text().split() == [str(os.getpid())]:
            Path(self.marker).write_text("crashed")
            os._exit(1)
        collector.emit([tup["word"]])


class Count(Bolt):
    """A plain bolt: its counts live in a dict attribute, saved only by the workers' snapshots."""

    outputs = ("word", "count")

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)


class Sink(BasicBolt):
    """Records every (word, count) it sees in SQLite."""

    outputs = ()

    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, conf, context):
        self.db = sqlite3.connect(self.path, timeout=30)
        with self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS counts (word TEXT, count INTEGER)")

    def execute(self, tup, collector):
        with self.db:
            self.db.execute("INSERT INTO counts VALUES (?, ?)", (tup["word"], tup["count"]))


def acked_ids(source: str) -> list[int]:
    with closing(sqlite3.connect(source, timeout=30)) as db:
        return [i for (i,) in db.execute("SELECT id FROM acked")]


def test_the_spout_tasks_worker_killed_mid_run_leaves_no_count_below_exact_and_every_message_acked_once(
    spark, tmp_path
):
    source, sink = str(tmp_path / "source.sqlite"), str(tmp_path / "sink.sqlite")
    b = TopologyBuilder()
    b.set_spout("numbers", Numbered(source))
    b.set_bolt("crash", CrashOnce(str(tmp_path / "crashed"), source + ".pids"), 2).shuffle_grouping("numbers")
    b.set_bolt("count", Count(), 2).fields_grouping("crash", ["word"])
    b.set_bolt("sink", Sink(sink), 2).shuffle_grouping("count")
    conf = {"squall.snapshot.interval.ms": 100, "topology.max.spout.pending": 200}
    with LocalCluster() as cluster:
        run = cluster.submit_topology("snapshots", conf, b.build())
        deadline = time.monotonic() + 240
        while len(acked_ids(source)) < MESSAGES and time.monotonic() < deadline and not cluster.failures:
            time.sleep(0.1)
        assert not cluster.failures
        # The run's counters lose what the killed worker's spout task did since its last report, as Storm's
        # metrics lose a dead worker's since its last heartbeat: the source's own record is the truth.
        assert run.stats.restarts >= 1 and (tmp_path / "crashed").exists()

    acked = acked_ids(source)
    assert sorted(acked) == list(range(MESSAGES))  # every message acked, none twice
    opened_in = Path(source + ".pids").read_text().split()
    assert len(opened_in) == 2 and opened_in[0] != opened_in[1]  # the spout task, lost with its worker, reopened
    with closing(sqlite3.connect(sink)) as db:
        counted = dict(db.execute("SELECT word, MAX(count) FROM counts GROUP BY word").fetchall())
    exact = Counter(WORDS)
    below = {w: (counted.get(w, 0), n) for w, n in exact.items() if counted.get(w, 0) < n}
    assert below == {}, f"counts below exact after the worker loss: {below}"
    print(
        f"\nthe spout task's worker killed from message {CRASH_AT} on: restarts={run.stats.restarts} words over exact="
        f"{sum(counted[w] - n for w, n in exact.items())}"
    )


def test_snapshots_are_spaced_out_when_writing_them_is_costly():
    from squall.spark.snapshots import snapshot_spacing

    assert snapshot_spacing(1.0, {}) == 1.0
    assert snapshot_spacing(1.0, {0: 0.004, 1: 0.009}) == 1.0  # under 1% of a second: the interval
    assert snapshot_spacing(1.0, {0: 0.05, 1: 0.02}) == pytest.approx(5.0)  # the busiest worker's 50 ms: 5 s apart


def test_a_costly_snapshot_spaces_out_the_snapshot_wave_that_follows_it():
    from squall.spark.snapshots import SnapshotTimer

    timer = SnapshotTimer(1.0, now=0.0)
    assert timer.due(0.0)  # the first wave is a snapshot wave
    timer.sent(0.0, 0)
    timer.written({})  # nothing executed yet: nothing written
    assert not timer.due(0.9) and timer.due(1.0)
    timer.sent(1.0, 5)
    assert not timer.due(1.5)
    timer.written({0: 0.05, 1: 0.02})  # the busiest worker took 50 ms: the next one 5 s after this one was sent
    assert not timer.due(2.0) and not timer.due(5.9) and timer.due(6.0)
    timer.sent(6.0, 30)
    timer.written({0: 0.001})  # cheap again: the interval
    assert not timer.due(6.9) and timer.due(7.0)


def test_a_snapshot_wave_is_due_once_a_spout_task_emitted_half_its_max_spout_pending():
    from squall.spark.snapshots import SnapshotTimer

    timer = SnapshotTimer(1.0, now=0.0, emits_between=2500)  # topology.max.spout.pending 5000
    timer.sent(0.0, 3)
    timer.emitted(2, {7: 4000})  # a wave sent before the snapshot wave: already in its snapshot
    timer.emitted(3, {7: 100})  # the snapshot wave itself
    timer.emitted(4, {7: 1200, 8: 2400})
    assert not timer.due(0.1)  # no spout task has emitted 2,500 since
    timer.emitted(5, {7: 1300, 8: 0})
    assert timer.due(0.1)  # task 7 has: 2,500
    timer.sent(0.1, 6)
    timer.written({0: 0.002})  # 2 ms a snapshot: no closer than 0.2 s, whatever was emitted
    timer.emitted(7, {7: 2600})
    assert not timer.due(0.29) and timer.due(0.31)
    timer.sent(0.31, 8)
    timer.written({0: 0.05})  # 50 ms: 5 s apart, the cost rules
    timer.emitted(9, {7: 10_000})
    assert not timer.due(5.3) and timer.due(5.32)


def test_without_max_spout_pending_only_the_interval_makes_a_snapshot_wave_due():
    from squall.spark.snapshots import SnapshotTimer

    timer = SnapshotTimer(1.0, now=0.0)
    timer.sent(0.0, 0)
    timer.emitted(1, {7: 1_000_000})
    assert not timer.due(0.99) and timer.due(1.0)


DISTINCT = 100_000


class DistinctWords(Spout):
    """Emits ``DISTINCT`` different words once each, msg id = their number: a count bolt's dict grows to hold
    them all."""

    outputs = ("word",)

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        if self.next < DISTINCT:
            self.collector.emit([f"word-{self.next:06d}"], msg_id=self.next)
            self.next += 1


def test_a_plain_bolts_state_is_written_by_its_worker_and_never_sent_to_the_driver(spark, caplog):
    b = TopologyBuilder()
    b.set_spout("words", DistinctWords())
    b.set_bolt("count", Count(), 2).fields_grouping("words", ["word"])
    conf = {"squall.snapshot.interval.ms": 100, "squall.wave.spout.batch": 2000}  # many waves, many snapshots
    caplog.set_level(logging.INFO, logger="squall")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("distinct", conf, b.build())
        deadline = time.monotonic() + 240
        while run.stats.of("words").acked < DISTINCT and time.monotonic() < deadline and not cluster.failures:
            time.sleep(0.1)
        assert not cluster.failures
        assert run.stats.of("words").acked == DISTINCT and run.stats.of("count").executed == DISTINCT
        waves = run.stats.waves
    carried = [int(m) for m in re.findall(r"the hub carried (\d+) bytes from the workers", caplog.text)]
    assert len(carried) == 1, caplog.text[-3000:]
    # The count tasks' dicts end holding every word: one copy of them, pickled, is more than the driver got in all
    # (the workers' reports: counters, acks settled on the workers, latencies), over tens of waves.
    state_bytes = len(pickle.dumps({f"word-{i:06d}": 1 for i in range(DISTINCT)}, pickle.HIGHEST_PROTOCOL))
    print(f"\nwaves={waves} hub_bytes_from_workers={carried[0]} one_copy_of_the_state={state_bytes}")
    assert waves >= 20 and carried[0] < state_bytes / 2
