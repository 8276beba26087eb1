"""Persistent windows (``with_persistence()``): the windows live in the task's state, tuples are acked at the
checkpoint that holds them, and windows go on where they were after a lost worker or a restarted topology."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from components import RequeueingFeeder

from squall import BasicBolt, Count, TopologyBuilder, WindowedBolt
from squall.testing import FeederSpout, TestCluster


class NumberedWindows(WindowedBolt):
    """Emits each window's values and its number, counted in the bolt's own state."""

    outputs = ("number", "values")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        number = self.state.get("windows", 0) + 1
        self.state.put("windows", number)
        self.collector.emit([number, [t[0] for t in window.get()]])


class CrashOnce(BasicBolt):
    """Passes numbers on; kills its Python worker on -1, once per marker file."""

    outputs = ("n",)

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def execute(self, tup, collector):
        if tup[0] == -1 and not Path(self.marker).exists():
            Path(self.marker).write_text("crashed")
            os._exit(1)
        collector.emit([tup[0]])


def topology(feeder, middle=None):
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    source = "numbers"
    if middle is not None:
        b.set_bolt("middle", middle).shuffle_grouping("numbers")
        source = "middle"
    b.set_bolt("window", NumberedWindows().with_window(Count(4), Count(2)).with_persistence()).shuffle_grouping(source)
    return b.build()


def feed(feeder, values):
    for v in values:
        feeder.feed([v], v)


def windows_of(values):
    """The windows of 4 every 2 over ``values`` in arrival order."""
    return [values[max(0, end - 4) : end] for end in range(2, len(values) + 1, 2)]


def test_a_persistent_window_acks_its_tuples_at_the_checkpoint_not_at_expiry(cluster, tmp_path):
    feeder = FeederSpout(["n"])
    conf = {"topology.state.checkpoint.interval.ms": 5000, "squall.checkpoint.dir": str(tmp_path)}
    run = cluster.submit_for_capture("held", conf, topology(feeder))
    feed(feeder, range(1, 11))
    cluster.wait_idle()
    assert [values for _, values in run.captured["window"]] == windows_of(list(range(1, 11)))
    assert feeder.acked == set()  # in the window state, which no checkpoint holds yet
    cluster.advance_time(5.1)
    assert feeder.acked == set(range(1, 11)) and feeder.failed == set()  # 7..10 too: durable, though in a window


def test_a_persistent_window_goes_on_after_its_python_worker_dies_mid_wave(cluster, tmp_path):
    marker = tmp_path / "crashed"
    feeder = RequeueingFeeder(["n"])  # what the lost wave carried fails back, and comes again
    run = cluster.submit_for_capture("crash", {}, topology(feeder, CrashOnce(str(marker))))
    feed(feeder, range(1, 21))
    cluster.wait_idle()
    feed(feeder, [21, 22, -1, 23, 24, 25, 26])  # this wave loses a worker; its tasks start again from their state
    cluster.wait_idle()
    cluster.advance_time(1)
    assert marker.read_text() == "crashed" and run.stats.restarts >= 1
    values = [*range(1, 23), -1, *range(23, 27)]
    expected = windows_of(values)
    captured = {(number, tuple(window)) for number, window in run.captured["window"]}
    assert captured == {(i + 1, tuple(w)) for i, w in enumerate(expected)}  # each window, numbered, none lost
    assert Counter(m for kind, m in feeder.calls if kind == "ack") == Counter(values)  # each acked once


def test_a_restarted_topology_resumes_its_windows_from_the_last_checkpoint(spark, tmp_path):
    conf = {"squall.checkpoint.dir": str(tmp_path)}
    with TestCluster() as first:
        feeder = FeederSpout(["n"])
        run = first.submit_for_capture("resume", conf, topology(feeder))
        feed(feeder, range(1, 7))
        first.advance_time(1)  # a checkpoint holds the window [3, 4, 5, 6] and the count of windows, 3
        assert feeder.acked == set(range(1, 7))
        assert [values for _, values in run.captured["window"]] == [[1, 2], [1, 2, 3, 4], [3, 4, 5, 6]]
    with TestCluster() as second:
        feeder = FeederSpout(["n"])
        run = second.submit_for_capture("resume", conf, topology(feeder))
        feed(feeder, range(7, 11))
        second.advance_time(1)
        assert run.captured["window"] == [(4, [5, 6, 7, 8]), (5, [7, 8, 9, 10])]
        assert feeder.acked == set(range(7, 11))
