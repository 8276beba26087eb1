"""Load-aware shuffling (Storm 2's LoadAwareShuffleGrouping): the driver's weights from the workers' loads, the
pickers that follow them, and a topology whose busy worker gets fewer shuffled tuples."""

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder
from squall.model import Fields, ShuffleGrouping
from squall.spark.load import GAIN, MAX_WEIGHT, MIN_WEIGHT, LoadAwareShuffle, LoadBalancer, TaskWeights


def feed(balancer: LoadBalancer, loads: dict[int, float], start: float, steps: int) -> float:
    """``steps`` half-second windows in which each worker used ``loads[w]`` of a core."""
    cpu = dict.fromkeys(loads, 0.0)
    now = start
    for worker in loads:
        balancer.observe(worker, cpu[worker], now)
    for _ in range(steps):
        now += 0.5
        for worker, load in loads.items():
            cpu[worker] += load * 0.5
            balancer.observe(worker, cpu[worker], now)
    return now


def test_weights_stay_equal_until_loads_differ():
    balancer = LoadBalancer(3)
    assert balancer.weights is None
    feed(balancer, {0: 0.9, 1: 0.9, 2: 0.9}, 0.0, 5)
    assert balancer.weights is None


def test_a_busier_worker_gets_less_and_an_idle_cluster_evens_out():
    balancer = LoadBalancer(2)
    now = feed(balancer, {0: 1.0, 1: 0.6}, 0.0, 1)
    # Mean 0.8: the idler one's weight grows by GAIN times its distance from it, the busier one's is halved (at
    # most), and both are scaled to average one.
    grown = 1 + GAIN * 0.2
    assert balancer.weights == pytest.approx((0.5 * 2 / (0.5 + grown), grown * 2 / (0.5 + grown)))
    now = feed(balancer, {0: 1.0, 1: 0.6}, now, 10)
    low, high = balancer.weights
    assert low == MIN_WEIGHT and high > 1.9  # never nothing at all, whatever the loads
    feed(balancer, {0: 0.2, 1: 0.1}, now, 20)  # nobody is busy: back to equal
    assert balancer.weights is None


def test_a_new_process_or_a_resize_starts_over():
    balancer = LoadBalancer(2)
    now = feed(balancer, {0: 1.0, 1: 0.5}, 0.0, 3)
    weights = balancer.weights
    balancer.observe(0, 0.0, now + 0.5)  # its CPU clock went back: a new Python process, measured afresh
    assert balancer.weights == weights and 0 not in balancer.loads
    balancer.resized(3)
    assert balancer.weights is None and balancer.workers == 3


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6), st.integers(1, 30))
def test_weights_stay_bounded_and_average_one(loads, steps):
    balancer = LoadBalancer(len(loads))
    feed(balancer, dict(enumerate(loads)), 0.0, steps)
    weights = balancer.weights or (1.0,) * len(loads)
    assert all(MIN_WEIGHT <= w <= MAX_WEIGHT for w in weights)
    assert abs(sum(weights) / len(weights) - 1.0) < 0.01
    busiest, idlest = max(range(len(loads)), key=loads.__getitem__), min(range(len(loads)), key=loads.__getitem__)
    assert weights[busiest] <= weights[idlest]


def test_equal_weights_pick_as_the_shuffle_grouping_does():
    targets = [4, 5, 6]
    plain = ShuffleGrouping().picker(9, targets, Fields("x"))
    aware = LoadAwareShuffle(9, targets, TaskWeights())
    assert [aware(()) for _ in range(300)] == [plain(()) for _ in range(300)]


def test_weights_deal_targets_in_proportion_each_ring():
    weights = TaskWeights()
    weights.update((0.5, 1.5), {4: 0, 5: 1})
    pick = LoadAwareShuffle(1, [4, 5], weights)
    first_ring = Counter(pick(()) for _ in range(200))
    assert first_ring == {4: 50, 5: 150}
    weights.update(None, {4: 0, 5: 1})  # equal again: the ring is dealt again, evenly
    assert Counter(pick(()) for _ in range(200)) == {4: 100, 5: 100}


def test_worker_weights_follow_the_placement():
    weights = TaskWeights()
    weights.update((0.5, 2.0), {10: 0, 11: 1, 12: 0})
    assert (weights.of(10), weights.of(11), weights.of(12), weights.of(99)) == (0.5, 2.0, 0.5, 1.0)
    version = weights.version
    weights.update((0.5, 2.0), {10: 0, 11: 1, 12: 0})
    assert weights.version == version  # nothing changed: the pickers keep their rings


# -- a topology: the spout's worker is kept busy, so the other worker's task gets more of the shuffled tuples ---
class BusySpout(Spout):
    """Spends a millisecond of CPU per tuple: its worker is the busier one."""

    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        if self.next >= 4000:
            return
        spin_until = time.perf_counter() + 0.001
        while time.perf_counter() < spin_until:
            pass
        self.collector.emit([self.next], msg_id=self.next)
        self.next += 1


class Work(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def on_two_workers(name: str, topology: Any, conf: dict, done: Callable[[Any], bool]) -> Any:
    """``topology`` on two workers until ``done(its stats)``; its stats, once the spout ``numbers`` had its
    4,000 trees acked and none failed."""
    with LocalCluster() as cluster:
        run = cluster.submit_topology(name, {"squall.workers": 2, **conf}, topology)
        deadline = time.monotonic() + 120
        while not done(run.stats) and time.monotonic() < deadline and not cluster.failures:
            time.sleep(0.05)
        assert not cluster.failures
        assert run.stats.of("numbers").acked == 4000 and run.stats.of("numbers").failed == 0
        return run.stats


def run_busy(conf: dict) -> dict[int, int]:
    b = TopologyBuilder()
    b.set_spout("numbers", BusySpout())
    b.set_bolt("work", Work(), 2).shuffle_grouping("numbers")
    topology = b.build()
    stats = on_two_workers(
        "busy", topology, conf, lambda stats: stats.of("numbers").acked >= 4000 and stats.of("work").executed >= 4000
    )
    return {task: stats.of_task("work", task).executed for task in topology.task_ids("work")}


def test_the_busy_workers_task_gets_fewer_shuffled_tuples(spark):
    spout_side, other = run_busy({}).values()  # work task 0 shares worker 0 with the spout task
    assert spout_side + other == 4000
    assert other > spout_side
    evenly = run_busy({"topology.disable.loadaware.messaging": True})
    assert list(evenly.values()) == [2000, 2000]


def test_picks_taken_at_once_are_the_picks_one_by_one():
    weights = TaskWeights()
    weights.update((0.5, 1.5), {4: 0, 5: 1})
    one_by_one, at_once = LoadAwareShuffle(3, [4, 5], weights), LoadAwareShuffle(3, [4, 5], weights)
    plain, plain_at_once = (
        ShuffleGrouping().picker(3, [4, 5, 6], Fields("x")),
        ShuffleGrouping().picker(3, [4, 5, 6], Fields("x")),
    )
    for n in (1, 7, 1500, 3):  # across the draws of many passes
        assert at_once.take(n) == [one_by_one(()) for _ in range(n)]
        assert plain_at_once.take(n) == [plain(()) for _ in range(n)]


def test_weights_that_change_every_few_picks_still_reach_every_target():
    weights, targets = TaskWeights(), [10, 11, 12, 13]
    pick = LoadAwareShuffle(1, targets, weights)
    picks = Counter()
    for step in range(200):
        share = (0.5, 1.0, 2.0, 4.0) if step % 2 else (0.5, 1.0, 2.0, 3.0)
        weights.update(share, {t: i for i, t in enumerate(targets)})
        picks.update(pick(()) for _ in range(3))
    assert set(picks) == set(targets) and picks[13] > picks[12] > picks[11] > picks[10]


def test_with_acking_off_the_busy_workers_task_gets_fewer_shuffled_tuples_too(spark):
    """Every worker's report carries its CPU time whether or not acking is on: the driver reads both loads."""
    spout_side, other = run_busy({"topology.acker.executors": 0}).values()
    assert spout_side + other == 4000
    assert other > spout_side


# -- a topology: a shuffle between two bolts spread alike over the workers keeps to each worker -----------------
class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        if self.next < 4000:
            self.collector.emit([self.next], msg_id=self.next)
            self.next += 1


class Relay(BasicBolt):
    """Passes each number on with the process it went through."""

    outputs = ("n", "relay_pid")

    def execute(self, tup, collector):
        collector.emit([tup.values[0], os.getpid()])


class Mark(BasicBolt):
    """Writes each number, the relay's process and its own to a file of its task's."""

    outputs = ()

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def prepare(self, conf, context):
        self.out = open(os.path.join(self.directory, f"mark-{context.task_id}-{os.getpid()}"), "a")  # noqa: SIM115

    def execute(self, tup, collector):
        self.out.write(f"{tup.values[0]} {tup.values[1]} {os.getpid()}\n")
        self.out.flush()


def relayed(directory: Path, conf: dict) -> list[tuple[int, int, int]]:
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("relay", Relay(), 2).shuffle_grouping("numbers")
    b.set_bolt("mark", Mark(str(directory)), 2).shuffle_grouping("relay")
    on_two_workers("relayed", b.build(), conf, lambda stats: stats.of("numbers").acked >= 4000)
    rows = [tuple(map(int, line.split())) for f in directory.iterdir() for line in f.read_text().splitlines()]
    assert {n for n, _, _ in rows} == set(range(4000))
    return rows


def test_a_shuffle_between_bolts_spread_alike_keeps_to_each_worker(spark, tmp_path):
    (tmp_path / "aware").mkdir()
    rows = relayed(tmp_path / "aware", {})
    assert len({mark for _, _, mark in rows}) == 2  # both workers' mark tasks got numbers
    assert all(relay == mark for _, relay, mark in rows)  # none crossed a link
    (tmp_path / "plain").mkdir()
    rows = relayed(tmp_path / "plain", {"topology.disable.loadaware.messaging": True})
    assert any(relay != mark for _, relay, mark in rows)  # a plain shuffle sends some across
