"""A sliding average of temperatures, written as a user writes one: its spout and bolts here, no fixtures."""

from squall import Count, Spout, TopologyBuilder, WindowedBolt
from squall.testing import TestCluster

READINGS = [20, 22, 24, 26, 28, 30, 32, 34]
acked = set()  # the spout runs in the test's process under TestCluster


class Thermometer(Spout):
    outputs = ("celsius",)

    def open(self, conf, context, collector):
        self.collector, self.left = collector, list(enumerate(READINGS))

    def next_tuple(self):
        if self.left:
            i, celsius = self.left.pop(0)
            self.collector.emit([celsius], msg_id=i)

    def ack(self, msg_id):
        acked.add(msg_id)


class Average(WindowedBolt):
    outputs = ("average",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        values = [t["celsius"] for t in window.get()]
        self.collector.emit([sum(values) / len(values)])


def test_a_sliding_average_of_the_last_four_readings_every_two():
    b = TopologyBuilder()
    b.set_spout("thermometer", Thermometer())
    b.set_bolt("average", Average().with_window(Count(4), Count(2))).shuffle_grouping("thermometer")
    with TestCluster() as cluster:
        run = cluster.submit_for_capture("temperatures", {}, b.build())
        cluster.wait_idle()
        assert run.captured["average"] == [(21.0,), (23.0,), (27.0,), (31.0,)]
        assert acked == {0, 1, 2, 3}  # readings 4 to 7 are in the last window: not acked yet
