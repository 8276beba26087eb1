"""A step says when its wave found the spouts dry, so that ``LocalCluster`` waits ``squall.wave.dry.pause.ms``
before the next one, and when they had more, so that it does not."""

from __future__ import annotations

from squall import BasicBolt, Spout, TopologyBuilder
from squall.testing import FeederSpout, TestCluster


class Endless(Spout):
    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)


class Drop(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def first_completed_step(run):
    for _ in range(100):
        info = run.step()
        if info.completed and info.spout_emits:
            return info
    raise AssertionError("no step completed a wave with emits")


def test_a_step_is_dry_when_its_spouts_had_less_than_their_calls_and_not_when_they_had_more(spark):
    feeder = FeederSpout(["n"])
    for topology_name, spout, dry in (("sparse", feeder, True), ("endless", Endless(), False)):
        b = TopologyBuilder()
        b.set_spout("numbers", spout)
        b.set_bolt("drop", Drop()).shuffle_grouping("numbers")
        with TestCluster() as cluster:
            run = cluster.submit_for_capture(topology_name, {}, b.build())
            if spout is feeder:
                for n in range(3):
                    feeder.feed([n], n)
            assert first_completed_step(run).dry is dry
