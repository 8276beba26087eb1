"""Storm's acking scenarios, end to end on Spark local mode, on simulated time."""

from components import (
    AckAll,
    AckEveryOther,
    Aggregate,
    AnchorTwice,
    Branch,
    EmitUnanchored,
    FailAll,
    Hold,
    HoldAndRelease,
    Identity,
    NoMsgIdSpout,
)

from squall import TopologyBuilder
from squall.testing import FeederSpout


def test_ack_every_other_with_a_10s_timeout(cluster):
    """Storm's test-timeout: unacked trees fail on the second rotation after their emit."""
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("1", feeder)
    b.set_bolt("2", AckEveryOther()).global_grouping("1")
    cluster.submit_topology("timeout", {"topology.message.timeout.secs": 10}, b.build())
    cluster.advance_time(11)
    feeder.feed(["a"], 1)
    feeder.feed(["b"], 2)
    feeder.feed(["c"], 3)
    cluster.advance_time(9)
    assert feeder.acked == {1, 3} and feeder.failed == set()
    cluster.advance_time(12)
    assert feeder.acked == {1, 3} and feeder.failed == {2}
    stats = cluster.stats("timeout").of("1")
    assert (stats.acked, stats.failed, stats.timed_out) == (2, 1, 1)


def test_reset_timeout_keeps_a_tree_alive(cluster):
    conf = {"topology.message.timeout.secs": 10}
    feeders = {}
    for name, reset in (("resetting", True), ("not-resetting", False)):
        feeder = feeders[name] = FeederSpout(["v"])
        b = TopologyBuilder()
        b.set_spout("s", feeder)
        b.set_bolt("hold", HoldAndRelease(reset=reset, release_on_tick=8)).global_grouping("s").add_configuration(
            "topology.tick.tuple.freq.secs", 4
        )
        cluster.submit_topology(name, conf, b.build())
    for name, feeder in feeders.items():
        feeder.feed(["x"], f"{name}-1")
        feeder.feed(["y"], f"{name}-2")
    cluster.wait_idle()
    cluster.advance_time(31)  # three timeouts; the holding bolt resets every 4 s
    assert feeders["resetting"].failed == set() and feeders["resetting"].acked == set()
    assert feeders["not-resetting"].failed == {"not-resetting-1", "not-resetting-2"}
    cluster.advance_time(2)  # tick 8 at t=32 releases the held tuples
    assert feeders["resetting"].acked == {"resetting-1", "resetting-2"}
    assert feeders["not-resetting"].acked == set()  # already failed; a late ack changes nothing


def test_branches_into_an_aggregate_ack_only_when_the_aggregate_completes(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("branch", Branch(), 2).shuffle_grouping("s")
    b.set_bolt("agg", Aggregate(4)).global_grouping("branch")
    b.set_bolt("sink", AckAll(), 2).shuffle_grouping("agg")
    cluster.submit_topology("agg", {}, b.build())
    feeder.feed(["p"], 1)
    cluster.wait_idle()
    assert feeder.acked == set()  # the aggregate holds 2 of its 4 inputs
    feeder.feed(["q"], 2)
    cluster.wait_idle()
    assert feeder.acked == {1, 2}
    feeder.feed(["r"], 3)
    cluster.wait_idle()
    assert feeder.acked == {1, 2} and feeder.failed == set()


def test_aggregate_anchored_tree_fails_when_downstream_fails(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("branch", Branch()).shuffle_grouping("s")
    b.set_bolt("agg", Aggregate(4)).global_grouping("branch")
    b.set_bolt("sink", FailAll()).shuffle_grouping("agg")
    cluster.submit_topology("agg-fail", {}, b.build())
    feeder.feed(["p"], 1)
    feeder.feed(["q"], 2)
    cluster.wait_idle()
    assert feeder.failed == {1, 2} and feeder.acked == set()


def test_anchoring_twice_to_the_same_input(cluster):
    ok, bad = FeederSpout(["v"]), FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("ok", ok)
    b.set_spout("bad", bad)
    b.set_bolt("twice-ok", AnchorTwice()).shuffle_grouping("ok")
    b.set_bolt("twice-bad", AnchorTwice()).shuffle_grouping("bad")
    b.set_bolt("ack", AckAll()).shuffle_grouping("twice-ok")
    b.set_bolt("fail", FailAll()).shuffle_grouping("twice-bad")
    cluster.submit_topology("twice", {}, b.build())
    for i in range(3):
        ok.feed([i], i)
        bad.feed([i], i)
    cluster.wait_idle()
    assert ok.acked == {0, 1, 2} and ok.failed == set()
    assert bad.failed == {0, 1, 2} and bad.acked == set()


def test_timeouts_disabled(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("1", feeder)
    b.set_bolt("2", AckEveryOther()).global_grouping("1")
    conf = {"topology.message.timeout.secs": 10, "topology.enable.message.timeouts": False}
    cluster.submit_topology("no-timeouts", conf, b.build())
    for i in range(4):
        feeder.feed([i], i)
    cluster.advance_time(1000)
    assert feeder.acked == {0, 2} and feeder.failed == set()
    assert cluster.runs["no-timeouts"].stats.pending == 2


def test_zero_ackers_ack_at_emit(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("fail", FailAll()).shuffle_grouping("s")
    b.set_bolt("hold", Hold()).shuffle_grouping("s")
    cluster.submit_topology("no-ackers", {"topology.acker.executors": 0}, b.build())
    for i in range(3):
        feeder.feed([i], i)
    cluster.wait_idle()
    assert feeder.acked == {0, 1, 2} and feeder.failed == set()
    assert feeder.calls == [("ack", 0), ("ack", 1), ("ack", 2)]
    cluster.advance_time(100)
    assert feeder.failed == set() and len(feeder.calls) == 3


def test_tuples_without_msg_id_are_untracked(cluster):
    spout = NoMsgIdSpout(["a", "b"])
    b = TopologyBuilder()
    b.set_spout("s", spout)
    b.set_bolt("fail", FailAll()).shuffle_grouping("s")
    run = cluster.submit_topology("no-msg-id", {"topology.message.timeout.secs": 5}, b.build())
    cluster.advance_time(30)
    (spout,) = cluster.spout_instances("no-msg-id").values()
    assert spout.acked == [] and spout.failed == []
    assert run.stats.of("fail").executed == 2 and run.pending_count == 0
    assert run.stats.of("s").emitted == 2 and run.stats.of("s").acked == run.stats.of("s").failed == 0


def test_unanchored_emits_are_outside_the_tree(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("unanchored", EmitUnanchored()).shuffle_grouping("s")
    b.set_bolt("fail", FailAll()).shuffle_grouping("unanchored")
    cluster.submit_topology("unanchored", {}, b.build())
    feeder.feed(["x"], "x")
    cluster.wait_idle()
    assert feeder.acked == {"x"} and feeder.failed == set()
    assert cluster.stats("unanchored").of("fail").failed == 1


def test_max_spout_pending_throttles(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("hold", Hold()).shuffle_grouping("s").add_configuration("topology.tick.tuple.freq.secs", 10)
    run = cluster.submit_topology(
        "throttled", {"topology.max.spout.pending": 2, "topology.message.timeout.secs": 30}, b.build()
    )
    for i in range(5):
        feeder.feed([i], i)
    cluster.wait_idle()
    assert run.stats.of("hold").executed == 2 and feeder.acked == set()
    cluster.advance_time(10)  # the tick acks what is held; two more may go
    assert feeder.acked == {0, 1} and run.stats.of("hold").executed == 2 + 1 + 2
    cluster.advance_time(10)
    assert feeder.acked == {0, 1, 2, 3}
    cluster.advance_time(10)
    assert feeder.acked == {0, 1, 2, 3, 4} and feeder.failed == set()


def test_identity_chain_acks_each_tuple_once(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("s", feeder, 2)
    b.set_bolt("a", Identity(), 3).shuffle_grouping("s")
    b.set_bolt("b", Identity(), 2).fields_grouping("a", ["v"])
    b.set_bolt("c", AckAll(), 2).shuffle_grouping("b")
    cluster.submit_topology("chain", {"topology.acker.executors": 3}, b.build())
    for i in range(50):
        feeder.feed([i], i)
    cluster.wait_idle()
    assert feeder.acked == set(range(50)) and feeder.failed == set()
    assert sorted(m for kind, m in feeder.calls if kind == "ack") == list(range(50))


def test_acks_reach_the_exact_spout_task_that_emitted(cluster):
    from components import TaskTaggedSpout

    b = TopologyBuilder()
    b.set_spout("s", TaskTaggedSpout(), 3)
    b.set_bolt("id", Identity(), 2).shuffle_grouping("s")
    b.set_bolt("ack", AckAll(), 2).fields_grouping("id", ["v"])
    topo = b.build()
    cluster.submit_topology("exact-task", {"topology.acker.executors": 2}, topo)
    cluster.wait_idle()
    received = TaskTaggedSpout.received
    assert set(received) == set(topo.task_ids("s"))
    for task, msg_ids in received.items():
        assert sorted(msg_ids) == [(task, n) for n in range(1, 11)]
