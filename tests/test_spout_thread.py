"""A spout task's methods run on one thread, as Storm promises: a spout that opens SQLite in ``open`` can ack."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder

MESSAGES = 200


class SqliteLogSpout(Spout):
    """Reads numbered messages and records every ack and fail in a SQLite database opened in ``open``."""

    outputs = ("n",)

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0
        self.db = sqlite3.connect(self.path)  # usable only on the thread that made it
        self.db.execute("CREATE TABLE IF NOT EXISTS calls (method TEXT, n INTEGER, thread INTEGER)")
        self._record("open", -1)

    def _record(self, method: str, n: int) -> None:
        self.db.execute("INSERT INTO calls VALUES (?, ?, ?)", (method, n, threading.get_ident()))
        self.db.commit()

    def next_tuple(self):
        if self.next < MESSAGES:
            self.collector.emit([self.next], msg_id=self.next)
            self.next += 1

    def ack(self, msg_id):
        self._record("ack", msg_id)

    def fail(self, msg_id):
        self._record("fail", msg_id)

    def deactivate(self):
        self._record("deactivate", -1)

    def close(self):
        self._record("close", -1)
        self.db.close()


class Pass(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def test_every_spout_call_runs_on_the_thread_that_opened_it(spark, tmp_path):
    path = str(tmp_path / "calls.sqlite")
    builder = TopologyBuilder()
    builder.set_spout("numbers", SqliteLogSpout(path))
    builder.set_bolt("pass", Pass(), 2).shuffle_grouping("numbers")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("sqlite-spout", {}, builder.build())
        deadline = time.monotonic() + 120
        while run.stats.of("numbers").acked < MESSAGES and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.kill_topology("sqlite-spout", wait_secs=5)
        assert run.stats.of("numbers").errors == 0

    with sqlite3.connect(path) as db:
        calls = db.execute("SELECT method, n, thread FROM calls ORDER BY rowid").fetchall()
    assert sorted(n for method, n, _ in calls if method == "ack") == list(range(MESSAGES))
    assert [m for m, _, _ in calls if m not in ("ack", "fail")] == ["open", "deactivate", "close"]
    assert [n for m, n, _ in calls if m == "fail"] == []
    assert len({thread for _, _, thread in calls}) == 1  # open, every ack, deactivate and close: one thread


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        self.collector.emit([self.next], msg_id=self.next)
        self.next += 1


def test_a_kill_returns_within_its_wait_when_the_workers_never_get_cores(spark):
    """Three workers asked of two cores: the third never starts, so no wave goes out (the spout task, on a
    worker, is never asked for a tuple). A kill with a wait still returns, cancels the worker job, and leaves the
    cores to the next topology."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("pass", Pass(), 3).shuffle_grouping("numbers")
    conf = {"squall.workers": 3, "squall.worker.replace.timeout.secs": 3600}
    with LocalCluster() as cluster:
        run = cluster.submit_topology("starved", conf, builder.build())
        time.sleep(5)
        assert run.stats.waves == 0 and run.stats.of("numbers").emitted == 0
        started = time.monotonic()
        killer = threading.Thread(target=cluster.kill_topology, args=("starved", 2.0), daemon=True)
        killer.start()
        killer.join(timeout=60)
        assert not killer.is_alive(), "kill_topology did not return"
        took = time.monotonic() - started

        again = TopologyBuilder()  # the cores are free again: a topology after it runs
        again.set_spout("numbers", SqliteLogSpout(str(Path(cluster._own_dir("sqlite-")) / "calls.sqlite")))
        again.set_bolt("pass", Pass(), 2).shuffle_grouping("numbers")
        after = cluster.submit_topology("after", {}, again.build())
        deadline = time.monotonic() + 120
        while after.stats.of("numbers").acked < MESSAGES and time.monotonic() < deadline:
            time.sleep(0.05)
        assert after.stats.of("numbers").acked == MESSAGES
    print(f"\nkill of a starved topology returned in {took:.1f}s (wait 2s)")
    assert took <= 2.0 + 10  # its wait and the workers' stop, not the 30 s a stuck run's thread would be given
