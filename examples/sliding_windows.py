"""storm-starter's windowing topologies: ``SlidingWindowTopology`` and ``SlidingTupleTsTopology``.

By count (``example.windows=count``, the default), Storm's ``SlidingWindowTopology``:

    integers --shuffle--> slidingsum (last 30, every 10) --shuffle--> tumblingavg (every 3) --> printer

By event time (``example.windows=event``), Storm's ``SlidingTupleTsTopology``: the sum of the values whose
``ts`` falls in the last 5 s, every 3 s of event time, with tuples up to 5 s late still counted:

    integers --shuffle--> slidingsum (5 s, every 3 s, on field ts, lag 5 s) --> printer

The integers go on for as long as the topology runs; give it a duration:

    squall run examples/sliding_windows.py --duration 10
    squall run examples/sliding_windows.py --duration 20 --conf example.windows=event
"""

from __future__ import annotations

from collections import deque

from squall import BasicBolt, Count, Duration, Spout, TopologyBuilder, WindowedBolt

NAME = "sliding-windows"
CONF = {
    "example.windows": "count",  # or event
    "topology.max.spout.pending": 1000,  # at least a window and a slide: tuples are acked as they expire
    "topology.message.timeout.secs": 30,
}

EPOCH_MS = 1_700_000_000_000  # the integers' event time starts here, one every 100 ms


def value_of(n: int) -> int:
    """The ``n``-th integer: spread over 0..999 as storm-starter's random ones, but the same on every run."""
    return n * 7919 % 1000


def ts_of(n: int) -> int:
    return EPOCH_MS + 100 * n


class IntegerSpout(Spout):
    """storm-starter's ``RandomIntegerSpout``: ``value, ts, msgid``, ten a second of event time. A failed
    integer is emitted again."""

    outputs = ("value", "ts", "msgid")

    def open(self, conf, context, collector):
        self.collector, self.last, self.failed = collector, 0, deque()

    def next_tuple(self):
        n = self.failed.popleft() if self.failed else self.last + 1
        self.last = max(self.last, n)
        self.collector.emit([value_of(n), ts_of(n), n], msg_id=n)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class SlidingWindowSum(WindowedBolt):
    """storm-starter's ``SlidingWindowSumBolt``: a running sum, the new values added and the expired taken
    away, instead of a pass over the whole window."""

    outputs = ("sum",)

    def prepare(self, conf, context, collector):
        self.collector, self.sum = collector, 0

    def execute(self, window):
        self.sum += sum(t["value"] for t in window.get_new())
        self.sum -= sum(t["value"] for t in window.get_expired())
        self.collector.emit([self.sum])


class TumblingWindowAvg(WindowedBolt):
    """storm-starter's ``TumblingWindowAvgBolt``: the integer average of each window."""

    outputs = ("avg",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        values = [t[0] for t in window.get()]
        if values:
            self.collector.emit([sum(values) // len(values)])


class Printer(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        print(f"{tup.source_component}: {list(tup.values)}", flush=True)


def build_topology(conf):
    builder = TopologyBuilder()
    builder.set_spout("integer", IntegerSpout())
    if conf.get("example.windows", "count") == "event":
        window = SlidingWindowSum().with_window(Duration.seconds(5), Duration.seconds(3))
        window = window.with_timestamp_field("ts").with_lag(Duration.seconds(5))
        builder.set_bolt("slidingsum", window).shuffle_grouping("integer")
        builder.set_bolt("printer", Printer()).shuffle_grouping("slidingsum")
    else:
        builder.set_bolt("slidingsum", SlidingWindowSum().with_window(Count(30), Count(10))).shuffle_grouping("integer")
        builder.set_bolt("tumblingavg", TumblingWindowAvg().with_tumbling_window(Count(3))).shuffle_grouping(
            "slidingsum"
        )
        builder.set_bolt("printer", Printer()).shuffle_grouping("tumblingavg")
    return builder.build()
