"""Tracked topologies, as in Storm's testing API: feed, then wait for exactly what was fed to be processed."""

import pytest

from squall import BasicBolt, Bolt, LocalCluster, TopologyBuilder
from squall.model.errors import SquallError
from squall.testing import FeederSpout, TestCluster, TrackedTopology, tracked_wait


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


class HoldOnWait(Bolt):
    """Acks every word but ``wait``, which it holds: its tree stays pending."""

    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup[0] != "wait":
            self.collector.ack(tup)


def words_topology(feeder: FeederSpout):
    b = TopologyBuilder()
    b.set_spout("sentences", feeder)
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("words", HoldOnWait(), 2).fields_grouping("split", ["word"])
    return b.build()


def test_tracked_wait_returns_once_exactly_what_was_fed_is_processed(spark):
    feeder = FeederSpout(["sentence"])
    with TestCluster() as cluster:
        tracked = TrackedTopology(cluster, words_topology(feeder))
        run = cluster.submit_topology("tracked", {}, tracked.topology)
        feeder.feed(["a b c"], msg_id=1)
        tracked_wait(tracked, 1)
        assert feeder.acked == {1} and run.stats.of("words").executed == 3
        feeder.feed(["d e"], msg_id=2)
        feeder.feed(["f wait"], msg_id=3)
        tracked.tracked_wait(2)
        assert run.stats.of("split").executed == 3 and run.stats.of("words").executed == 7
        assert feeder.acked == {1, 2} and feeder.failed == set() and run.pending_count == 1  # 3 is held
        assert tracked.emitted() == 3


def test_a_tracked_topology_submitted_itself_is_waited_on_the_same_way(spark):
    feeder = FeederSpout(["sentence"])
    with TestCluster() as cluster:
        tracked = TrackedTopology(cluster, words_topology(feeder))
        run = cluster.submit_topology("tracked-itself", {}, tracked)
        for n in range(5):
            feeder.feed([f"w{n} x{n}"], msg_id=n)
        tracked_wait(tracked, 5)
        assert feeder.acked == set(range(5)) and run.stats.of("words").executed == 10


def test_tracked_wait_for_more_than_was_fed_names_the_counts_once_its_guard_passes(spark):
    feeder = FeederSpout(["sentence"])
    with TestCluster() as cluster:
        tracked = TrackedTopology(cluster, words_topology(feeder))
        cluster.submit_topology("tracked-short", {}, tracked.topology)
        feeder.feed(["a"], msg_id=1)
        with pytest.raises(SquallError, match=r"'tracked-short': its spouts emitted 1 of the 2 tuples waited for"):
            tracked_wait(tracked, 2, timeout_secs=1.0)
        assert feeder.acked == {1}
        feeder.feed(["b"], msg_id=2)
        tracked_wait(tracked, 2)  # the failed wait counted nothing: 2 since the first
        assert feeder.acked == {1, 2}


def test_a_tracked_topology_needs_a_test_cluster_and_a_submitted_topology(spark):
    topology = words_topology(FeederSpout(["sentence"]))
    with LocalCluster() as local, pytest.raises(SquallError, match="TrackedTopology needs a TestCluster"):
        TrackedTopology(local, topology)
    with TestCluster() as cluster:
        with pytest.raises(SquallError, match="not running on its TestCluster"):
            tracked_wait(TrackedTopology(cluster, topology))
        with pytest.raises(ValueError, match="amount >= 0"):
            TrackedTopology(cluster, topology).tracked_wait(-1)
