"""Windowed bolts in a topology, on simulated time: acked on expiry, emits anchored to the window, a raising
window, processing-time windows on the topology's clock, event time with late tuples."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squall import BasicBolt, Bolt, Count, Duration, InvalidTopologyError, TopologyBuilder, WindowedBolt
from squall.testing import FeederSpout


class Contents(WindowedBolt):
    """Emits the values of each window."""

    outputs = ("values",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        self.collector.emit([[t[0] for t in window.get()]])


class RaisesOnSecondWindow(Contents):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.windows = 0

    def execute(self, window):
        self.windows += 1
        if self.windows == 2:
            raise RuntimeError("second window")
        super().execute(window)


class FailSecondTuple(Bolt):
    """Fails the second tuple it gets, acks the others."""

    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector, self.seen = collector, 0

    def execute(self, tup):
        self.seen += 1
        (self.collector.fail if self.seen == 2 else self.collector.ack)(tup)


class Detached(BasicBolt):
    """What arrives on the late stream: the late tuple's values."""

    outputs = ("values",)

    def execute(self, tup, collector):
        collector.emit([list(tup["tuple"].values)])


def feed(feeder, values):
    for v in values:
        feeder.feed([v], v)


def test_tuples_are_acked_once_every_window_they_belong_to_has_fired(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    b.set_bolt("window", Contents().with_window(Count(4), Count(2))).shuffle_grouping("numbers")
    run = cluster.submit_for_capture("acks", {}, b.build())
    feed(feeder, range(1, 11))
    cluster.wait_idle()
    assert run.captured["window"] == [([1, 2],), ([1, 2, 3, 4],), ([3, 4, 5, 6],), ([5, 6, 7, 8],), ([7, 8, 9, 10],)]
    assert feeder.acked == {1, 2, 3, 4, 5, 6} and feeder.failed == set()  # 7..10 are still in a window
    feed(feeder, [11, 12])
    cluster.wait_idle()
    assert feeder.acked == set(range(1, 9))


def test_emits_are_anchored_to_every_tuple_of_the_window(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    b.set_bolt("window", Contents().with_window(Count(4), Count(2))).shuffle_grouping("numbers")
    b.set_bolt("sink", FailSecondTuple()).shuffle_grouping("window")
    cluster.submit_topology("anchored", {}, b.build())
    feed(feeder, range(1, 11))
    cluster.wait_idle()
    assert feeder.failed == {1, 2, 3, 4}  # the second window's emit failed: every tuple in it
    assert feeder.acked == {5, 6}


def test_a_raising_window_fails_its_new_tuples_and_the_topology_goes_on(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    b.set_bolt("window", RaisesOnSecondWindow().with_window(Count(4), Count(2))).shuffle_grouping("numbers")
    run = cluster.submit_for_capture("raising", {}, b.build())
    feed(feeder, range(1, 11))
    cluster.wait_idle()
    assert feeder.failed == {3, 4}
    assert feeder.acked == {1, 2, 5, 6}
    assert run.captured["window"] == [([1, 2],), ([3, 4, 5, 6],), ([5, 6, 7, 8],), ([7, 8, 9, 10],)]
    stats = cluster.stats("raising")
    assert stats.of("window").errors == 1 and "RuntimeError: second window" in stats.errors[-1].text


@pytest.mark.parametrize(
    "ten_seconds",
    [Duration(10), Duration(10.0), Duration.seconds(10), Duration.millis(10_000), Duration(timedelta(seconds=10))],
)
def test_processing_time_windows_move_with_the_topologys_clock(cluster, ten_seconds):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    b.set_bolt("window", Contents().with_tumbling_window(ten_seconds)).shuffle_grouping("numbers")
    run = cluster.submit_for_capture("clock", {}, b.build())
    feed(feeder, ["a", "b"])
    cluster.advance_time(9)
    assert run.captured["window"] == []  # ten seconds have not passed
    cluster.advance_time(2)
    assert run.captured["window"] == [(["a", "b"],)]
    assert feeder.acked == set()  # still in the window that fired last
    feed(feeder, ["c"])
    cluster.advance_time(10)
    assert run.captured["window"] == [(["a", "b"],), (["c"],)]
    assert feeder.acked == {"a", "b"}


@pytest.mark.parametrize(
    "length, sliding, lag",
    [
        (Duration.millis(20), Duration.millis(10), Duration.millis(5)),
        (Duration(0.02), Duration(0.01), Duration(0.005)),
        (
            Duration(timedelta(milliseconds=20)),
            Duration(timedelta(milliseconds=10)),
            Duration(timedelta(microseconds=5000)),
        ),
    ],
)
def test_event_time_windows_fire_as_watermarks_pass_and_late_tuples_go_to_their_stream(cluster, length, sliding, lag):
    feeder = FeederSpout(["ts"])
    window = Contents().with_window(length, sliding).with_timestamp_field("ts").with_lag(lag)
    b = TopologyBuilder()
    b.set_spout("events", feeder)
    b.set_bolt("window", window.with_late_tuple_stream("late")).shuffle_grouping("events")
    b.set_bolt("late", Detached()).shuffle_grouping("window", "late")
    run = cluster.submit_for_capture("event-time", {}, b.build())
    feed(feeder, [603, 605, 607, 618, 626, 636])
    cluster.advance_time(1)  # a watermark: 636 less the 5 ms lag
    assert run.captured["window"] == [([603, 605, 607],), ([603, 605, 607, 618],), ([618, 626],)]
    feed(feeder, [600])  # before the watermark: late
    cluster.advance_time(1)
    assert run.captured["late"] == [([600],)]
    assert 600 in feeder.acked and feeder.failed == set()
    assert feeder.acked == {603, 605, 607, 600}  # expired from the last window (ended 630): 610 and before


class Persistent(Contents):
    def init_state(self, state):
        pass


def test_a_replayed_message_still_in_a_window_is_not_added_twice(cluster):
    feeder = FeederSpout(["id", "v"])
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    window = Persistent().with_window(Count(4), Count(2)).with_message_id_field("id").with_persistence()
    b.set_bolt("window", window).shuffle_grouping("numbers")
    run = cluster.submit_for_capture("dedup", {}, b.build())
    for i in (1, 2, 3):
        feeder.feed([i, i * 10], i)
    feeder.feed([2, 20], "replay of 2")  # its message is still in the window
    feeder.feed([4, 40], 4)
    cluster.wait_idle()
    assert run.captured["window"] == [([1, 2],), ([1, 2, 3, 4],)]
    for i, v, msg_id in [(5, 50, 5), (6, 60, 6), (1, 10, "replay of 1")]:  # 1 expires at the firing on 6
        feeder.feed([i, v], msg_id)
    feeder.feed([7, 70], 7)
    cluster.wait_idle()
    assert run.captured["window"][2:] == [([3, 4, 5, 6],), ([5, 6, 1, 7],)]  # 1 left the windows: it is new
    cluster.advance_time(1)  # the checkpoint: every tuple is acked, the duplicate too
    assert feeder.acked == {1, 2, 3, 4, 5, 6, 7, "replay of 2", "replay of 1"} and feeder.failed == set()


def test_a_message_id_field_needs_persistence():
    b = TopologyBuilder()
    b.set_spout("numbers", FeederSpout(["id", "v"]))
    b.set_bolt("window", Contents().with_window(Count(4)).with_message_id_field("id")).shuffle_grouping("numbers")
    with pytest.raises(InvalidTopologyError, match="windowed bolt 'window': a message id field needs with_persistence"):
        b.build()


def test_durations_in_any_unit_are_the_same_length():
    assert Duration(90) == Duration.seconds(90) == Duration.minutes(1.5) == Duration(timedelta(minutes=1, seconds=30))
    assert Duration.hours(2) == Duration.minutes(120) and Duration.days(1) == Duration.hours(24)
    assert Duration(0.25) == Duration.millis(250) == Duration.of(250) and Duration.millis(250).value == 250
    for bad in (-1, "40", True, float("nan"), None):
        with pytest.raises(ValueError, match="Duration"):
            Duration(bad)


def time_window_topology(length: Duration, sliding: Duration, conf: dict | None = None):
    b = TopologyBuilder()
    b.set_spout("numbers", FeederSpout(["n"]))
    b.set_bolt("sums", Contents().with_window(length, sliding)).shuffle_grouping("numbers")
    return b.build(conf)


def test_a_window_longer_than_the_message_timeout_is_refused_at_build_naming_the_bolt():
    with pytest.raises(
        InvalidTopologyError, match=r"windowed bolt 'sums': .* 50 s is more than topology.message.timeout.secs \(30 s\)"
    ):
        time_window_topology(Duration(40), Duration(10))


def test_a_window_longer_than_the_timeout_given_at_submit_is_refused_at_submit_naming_the_bolt(cluster):
    topology = time_window_topology(Duration(40), Duration(10), {"topology.message.timeout.secs": 120})
    with pytest.raises(
        InvalidTopologyError, match=r"windowed bolt 'sums': .* 50 s is more than topology.message.timeout.secs \(30 s\)"
    ):
        cluster.submit_topology("short-timeout", {"topology.message.timeout.secs": 30}, topology)
    assert "short-timeout" not in cluster.runs
    run = cluster.submit_for_capture("long-enough", {"topology.message.timeout.secs": 60}, topology)
    topology.components["numbers"].obj.feed([1], msg_id=1)
    cluster.wait_idle()
    cluster.advance_time(50)  # the window (40 s, sliding every 10 s) fires with the tuple and lets it go
    assert run.captured["sums"][0] == ([1],) and topology.components["numbers"].obj.acked == {1}
