"""Storm's WindowedBoltExecutorTest, ported: the executor driven directly, with tuples from a real topology."""

from __future__ import annotations

import pickle
import re

import pytest

from squall import BasicBolt, Count, Duration, InvalidTopologyError, Spout, TopologyBuilder, WindowedBolt
from squall.model.fields import Fields
from squall.model.topology import TopologyContext
from squall.model.tuple import TICK_COMPONENT, TICK_STREAM, Tuple
from squall.spark.records import check_emit
from squall.time import simulated_time
from squall.windowing.bolt import DetachedTuple
from squall.windowing.executor import WindowedBoltExecutor


class Source(Spout):
    outputs = ("ts",)


class RecordingWindows(WindowedBolt):
    outputs = ()

    def __init__(self):
        self.windows = []

    def execute(self, window):
        self.windows.append(window)


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


class Collector:
    """The executor's collector, recording what it is asked."""

    def __init__(self):
        self.emitted, self.acked, self.failed, self.errors = [], [], [], []

    def emit(self, values, anchors=None, stream="default"):
        self.emitted.append((stream, anchors, list(values)))
        return []

    def ack(self, tup):
        self.acked.append(tup)

    def fail(self, tup):
        self.failed.append(tup)

    def report_error(self, error):
        self.errors.append(error)


def prepared(bolt, conf=None):
    """The executor of ``bolt`` as task 2 of bolt ``w`` reading spout ``s1``, prepared; and its collector."""
    b = TopologyBuilder()
    b.set_spout("s1", Source())
    declarer = b.set_bolt("w", bolt)
    declarer.shuffle_grouping("s1")
    if bolt.late_tuple_stream:
        b.set_bolt("late", Sink()).shuffle_grouping("w", bolt.late_tuple_stream)
    topology = b.build({"topology.message.timeout.secs": 100_000, **(conf or {})})
    executor = topology.components["w"].obj
    collector = Collector()
    executor.prepare({}, TopologyContext(topology, "w", topology.task_ids("w")[0]), collector)
    return executor, collector


def tuple_of(ts, fields=("ts",)):
    return Tuple((ts,), Fields(fields), "s1", 1, "default")


def event_time_bolt():
    bolt = RecordingWindows().with_window(Duration.millis(20), Duration.millis(10)).with_timestamp_field("ts")
    return bolt.with_lag(Duration.millis(5)).with_watermark_interval(
        Duration.millis(100_000)
    )  # watermarks made by hand


def test_execute_without_ts():
    executor, _ = prepared(event_time_bolt())
    with pytest.raises(ValueError, match="windowed bolt 'w': no timestamp from ts in a tuple of s1/default"):
        executor.execute(Tuple((1,), Fields(["a"]), "s1", 1, "default"))


def test_execute_with_ts():
    bolt = event_time_bolt()
    executor, _ = prepared(bolt)
    for ts in (603, 605, 607, 618, 626, 636):
        executor.execute(tuple_of(ts))
    executor._generator.run()
    assert [[t[0] for t in w.get()] for w in bolt.windows] == [[603, 605, 607], [603, 605, 607, 618], [618, 626]]
    assert [(w.start_timestamp, w.end_timestamp) for w in bolt.windows] == [(590, 610), (600, 620), (610, 630)]


def test_prepare_late_tuple_stream_without_ts():
    bolt = RecordingWindows().with_window(Duration.millis(20), Duration.millis(10)).with_late_tuple_stream("$late")
    b = TopologyBuilder()
    b.set_spout("s1", Source())
    b.set_bolt("w", bolt).shuffle_grouping("s1")
    with pytest.raises(InvalidTopologyError, match="windowed bolt 'w': a late tuple stream needs a timestamp field"):
        b.build({"topology.message.timeout.secs": 100_000})


def test_late_tuple_stream_is_declared_by_the_builder_method():
    """Storm's testPrepareLateTupleStreamWithoutBuilder: in squall the builder method itself declares it."""
    executor, _ = prepared(event_time_bolt().with_late_tuple_stream("$late"))
    assert executor.outputs == {"$late": ("tuple",)}


def test_execute_with_late_tuple_stream():
    executor, collector = prepared(event_time_bolt().with_late_tuple_stream("$late"))
    tuples = [tuple_of(ts) for ts in (603, 605, 607, 618, 626, 636, 600)]
    for tup in tuples:
        executor.execute(tup)
        executor._generator.run()  # the watermark moves to this tuple's timestamp, less the lag
    late = tuples[-1]
    assert collector.emitted == [("$late", late, [DetachedTuple((600,), ("ts",), "s1", "default", 1, 600)])]
    assert late in collector.acked  # a late tuple is acked once sent on
    assert executor.late_tuples == 1


def test_late_tuple_stream_emits_serializable_tuple():
    executor, collector = prepared(event_time_bolt().with_late_tuple_stream("$late"))
    for ts in (603, 605, 607, 618, 626, 636, 600):
        executor.execute(tuple_of(ts))
        executor._generator.run()
    ((stream, _, values),) = collector.emitted
    detached = values[0]
    assert (detached.values, detached.source_component, detached.source_stream) == ((600,), "s1", "default")
    topology = TopologyBuilder()
    topology.set_spout("s1", Source())
    topology.set_bolt("w", event_time_bolt().with_late_tuple_stream("$late")).shuffle_grouping("s1")
    built = topology.build({"topology.message.timeout.secs": 100_000})
    assert check_emit(built, "w", stream, values) == (detached,)  # squall's emit check lets it travel
    assert pickle.loads(pickle.dumps(detached)) == detached


def test_empty_config_on_wrapped_bolt():
    executor = WindowedBoltExecutor(RecordingWindows().with_window(Count(5), Count(5)))
    assert executor.get_component_configuration() == {}


def test_time_windows_ask_for_ticks_at_their_timer():
    processing = WindowedBoltExecutor(RecordingWindows().with_window(Duration.seconds(10), Duration.seconds(2)))
    assert processing.get_component_configuration() == {"topology.tick.tuple.freq.secs": 2.0}
    assert WindowedBoltExecutor(
        event_time_bolt().with_watermark_interval(Duration.millis(500))
    ).get_component_configuration() == {"topology.tick.tuple.freq.secs": 0.5}


@pytest.mark.parametrize(
    ("length", "sliding", "conf", "message"),
    [
        (Duration.seconds(20), Duration.seconds(15), {"topology.message.timeout.secs": 30}, "35 s is more than"),
        (Duration.seconds(31), None, {"topology.message.timeout.secs": 30}, "31 s is more than"),
        (Count(90), Count(20), {"topology.max.spout.pending": 100}, "count (length + sliding interval) 110"),
    ],
)
def test_a_window_that_outlasts_the_timeout_is_rejected_at_build_naming_the_bolt(length, sliding, conf, message):
    b = TopologyBuilder()
    b.set_spout("s1", Source())
    b.set_bolt("sums", RecordingWindows().with_window(length, sliding)).shuffle_grouping("s1")
    with pytest.raises(InvalidTopologyError, match=rf"windowed bolt 'sums': window .*{re.escape(message)}"):
        b.build(conf)


def test_the_declarer_may_raise_the_timeout_so_the_window_fits():
    b = TopologyBuilder()
    b.set_spout("s1", Source())
    b.set_bolt("sums", RecordingWindows().with_window(Duration.seconds(50), Duration.seconds(10))).shuffle_grouping(
        "s1"
    ).add_configuration("topology.message.timeout.secs", 61)
    assert "sums" in b.build({"topology.message.timeout.secs": 30}).components


def test_a_window_needs_counts_or_durations():
    with pytest.raises(InvalidTopologyError, match="window length must be a Count or a Duration, got 10"):
        RecordingWindows().with_window(10)
    with pytest.raises(ValueError, match="Count must be a whole number of tuples >= 1, got 0"):
        Count(0)


def test_ticks_that_come_together_after_a_stall_fire_one_window():
    bolt = RecordingWindows().with_window(Duration.seconds(3), Duration.seconds(1))
    with simulated_time(1.0):
        executor, _ = prepared(bolt)
    for t in (1.5, 2.5, 3.5, 4.25, 4.75):
        with simulated_time(t):
            executor.execute(tuple_of(int(t * 1000)))
    tick = Tuple((1,), Fields(["rate_secs"]), TICK_COMPONENT, -1, TICK_STREAM)
    with simulated_time(5.0):
        executor.execute(tick)
        executor.execute(tick)  # a second tick at the same moment: the first one already fired
    assert [[t[0] for t in w.get()] for w in bolt.windows] == [[1500, 2500, 3500, 4250, 4750]]
    with simulated_time(6.0):
        executor.execute(tick)
    assert [t[0] for t in bolt.windows[-1].get()] == [3500, 4250, 4750]  # the last 3 s before 5.999
