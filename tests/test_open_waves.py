"""Open waves: a wave whose spouts had less to give than its calls allowed keeps calling them at the worker's idle
moments, and what they emit travels at once (``squall/spark/open_wave.py``).

* The rules, as a state machine under hypothesis, on simulated time.
* A spout that emits its next tuple only once the last was acked gets all of its trees acked within one wave:
  each ack reaches it while the wave is open, and the next emit goes out in the same wave.
* A wave's burst leaves in slices: a bolt on another worker executes its first tuples while the spout is still
  being called in it.
* A worker lost while waves of many parts were in flight: each part was logged as it left, the waves run again
  from the logs whole, every message is acked exactly once and no word is counted twice.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from components import CrashOnce, RequeueingFeeder, WordCount
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from squall import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder
from squall.spark.open_wave import CallSpouts, EndSpoutPart, OpenWave, OpenWaveSettings, WaitUntil

# -- the rules -----------------------------------------------------------------------------------------------------

OPEN, CALL, DRY = 0.050, 0.004, 0.010


def test_a_burst_that_spent_its_calls_or_emitted_nothing_ends_at_once():
    wave = OpenWave(OpenWaveSettings(OPEN, CALL, DRY))
    assert not wave.burst(0.0, emits=64, spent=True, active=True)  # more than a wave holds: the next takes over
    assert not wave.burst(0.0, emits=0, spent=False, active=True)  # no flow to keep open: quiet steps stay quick
    assert not wave.burst(0.0, emits=3, spent=False, active=False)  # deactivated
    assert not OpenWave(OpenWaveSettings(0.0, CALL, DRY)).burst(0.0, emits=3, spent=False, active=True)
    assert wave.burst(0.0, emits=3, spent=False, active=True)
    assert wave.due(0.001) == WaitUntil(CALL)
    assert wave.due(CALL) == CallSpouts()
    assert not wave.called(CALL, emits=5, spent=True)  # the calls left were spent: it ends at once
    assert wave.due(CALL) == EndSpoutPart()


class OpenWaveRules(RuleBasedStateMachine):
    """Time moves on by random steps; at each, the worker does what ``due`` says, as its serving loop does, and the
    spouts emit or not. The part never outlives ``open`` nor ``dry`` of silence, and calls come ``call`` apart."""

    def __init__(self) -> None:
        super().__init__()
        self.wave = OpenWave(OpenWaveSettings(OPEN, CALL, DRY))
        self.now = 0.0
        self.opened_at = self.last_emit = self.last_call = None
        self.ended = False

    @rule(emits=st.integers(0, 3), spent=st.booleans())
    @precondition(lambda self: self.opened_at is None or self.ended)
    def burst(self, emits, spent):  # a wave's first calls, the one before it having ended
        stays = self.wave.burst(self.now, emits, spent, active=True)
        assert stays == (emits > 0 and not spent)
        self.opened_at = self.last_emit = self.last_call = self.now
        self.ended = not stays

    @rule(step=st.floats(0.0, 0.02), emits=st.integers(0, 2), spent=st.booleans())
    @precondition(lambda self: self.opened_at is not None and not self.ended)
    def idle_moment(self, step, emits, spent):
        self.now += step
        due = self.wave.due(self.now)
        if isinstance(due, EndSpoutPart):
            assert self.now >= self.opened_at + OPEN or self.now >= self.last_emit + DRY
            self.wave.ended()
            self.ended = True
        elif isinstance(due, CallSpouts):
            assert self.now >= self.last_call + CALL
            assert self.now < self.opened_at + OPEN and self.now < self.last_emit + DRY
            self.last_call = self.now
            if emits:
                self.last_emit = self.now
            if not self.wave.called(self.now, emits, spent):  # its calls are spent: the part ends at once
                assert self.wave.due(self.now) == EndSpoutPart()
                self.wave.ended()
                self.ended = True
        else:
            assert isinstance(due, WaitUntil) and self.now < due.when
            # nothing is due before it: calls come no sooner, the end comes no later
            assert due.when <= min(self.last_call + CALL, self.opened_at + OPEN, self.last_emit + DRY)

    @invariant()
    def never_open_past_its_time(self):
        if self.wave.is_open:
            assert self.now - self.opened_at < OPEN + 0.02 and self.now - self.last_emit < DRY + 0.02


TestOpenWaveRules = OpenWaveRules.TestCase
TestOpenWaveRules.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)


# -- one wave, many trees ------------------------------------------------------------------------------------------

TREES = 30


class PingPong(Spout):
    """Emits tuple ``n + 1`` only once tuple ``n`` was acked: each tree waits for the one before it."""

    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.emitted, self.acked = collector, 0, 0

    def next_tuple(self):
        if self.emitted == self.acked and self.emitted < TREES:
            self.collector.emit([self.emitted], msg_id=self.emitted)
            self.emitted += 1

    def ack(self, msg_id):
        self.acked += 1


class PassOn(BasicBolt):
    outputs = ("n",)

    def execute(self, tup, collector):
        collector.emit([tup[0]])


class Last(Bolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


def ping_pong_waves(conf: dict) -> int:
    """The waves that had completed when the spout's last tree was acked (the driver learns of acks from the
    reports that complete a wave)."""
    b = TopologyBuilder()
    b.set_spout("pings", PingPong())
    b.set_bolt("pass", PassOn(), 2).shuffle_grouping("pings")
    b.set_bolt("last", Last(), 2).shuffle_grouping("pass")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("ping-pong", conf, b.build())
        deadline = time.monotonic() + 120
        while run.stats.of("pings").acked < TREES and time.monotonic() < deadline and not cluster.failures:
            time.sleep(0.01)
        waves = run.stats.waves
        stats = cluster.wait_idle("ping-pong", timeout=120)
        assert not cluster.failures
    assert stats.of("pings").acked == TREES and stats.of("pings").failed == 0
    return waves


def test_trees_acked_while_their_wave_is_open_let_the_spout_emit_again_in_it(spark):
    # The wave stays open up to a minute, and up to a second without an emit: every tree goes out in the first wave
    # with an emit, and is acked while it is open.
    assert ping_pong_waves({"squall.wave.open.ms": 60_000, "squall.wave.open.dry.ms": 1_000}) < TREES / 3


def test_without_open_waves_each_tree_waits_for_a_wave_of_its_own(spark):
    assert ping_pong_waves({"squall.wave.open.ms": 0}) >= TREES


# -- a burst leaves in slices ---------------------------------------------------------------------------------------
class WaitsForABolt(Spout):
    """Emits 0 to 99; before 40 (in the first wave, which allows 64 calls) it waits up to ``patience`` seconds for a
    bolt to have executed anything, and writes down whether one had."""

    outputs = ("n",)

    def __init__(self, directory: str, patience: float) -> None:
        self.directory, self.patience = Path(directory), patience

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        if self.next >= 100:
            return
        if self.next == 40:
            deadline = time.monotonic() + self.patience
            while not (self.directory / "executed").exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            (self.directory / "waited").write_text("saw" if (self.directory / "executed").exists() else "alone")
        self.collector.emit([self.next], msg_id=self.next)
        self.next += 1


class Touch(BasicBolt):
    outputs = ()

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def execute(self, tup, collector):
        (self.directory / "executed").touch()


def mid_burst(directory: Path, conf: dict) -> str:
    """Whether a bolt executed a tuple of the first wave while its spout was still being called in it."""
    b = TopologyBuilder()
    b.set_spout("numbers", WaitsForABolt(str(directory), patience=5.0))
    b.set_bolt("touch", Touch(str(directory)), 2).shuffle_grouping("numbers")  # one on the other worker
    with LocalCluster() as cluster:
        cluster.submit_topology("slices", {"squall.workers": 2, **conf}, b.build())
        stats = cluster.wait_idle("slices", timeout=120)
        assert not cluster.failures
    assert stats.of("numbers").acked == 100 and stats.of("numbers").failed == 0
    return (directory / "waited").read_text()


def test_a_bursts_first_slices_leave_while_its_spout_is_still_called(spark, tmp_path):
    (tmp_path / "sliced").mkdir()
    assert mid_burst(tmp_path / "sliced", {"squall.wave.spout.slice": 8}) == "saw"
    (tmp_path / "whole").mkdir()
    assert mid_burst(tmp_path / "whole", {"squall.wave.spout.slice": 0}) == "alone"


# -- a worker lost with waves of many parts in flight --------------------------------------------------------------


def test_a_worker_lost_with_waves_of_many_parts_in_flight_loses_nothing(cluster, tmp_path):
    marker = tmp_path / "crashed"
    spout = RequeueingFeeder(["word"])
    b = TopologyBuilder()
    b.set_spout("s", spout)
    b.set_bolt("crasher", CrashOnce(str(marker)), 2).shuffle_grouping("s")
    b.set_bolt("count", WordCount(), 2).fields_grouping("crasher", ["word"])
    # Two trees pending at most: a wave's burst emits two, each in a slice of its own, and each ack lets one more go
    # in a part of the open wave.
    conf = {
        "squall.checkpoint.dir": str(tmp_path / "checkpoints"),
        "squall.wave.open.ms": 200,
        "squall.wave.spout.slice": 1,
        "topology.max.spout.pending": 2,
    }
    run = cluster.submit_for_capture("parts", conf, b.build())
    words = ["a", "b", "a", "c"] * 20
    for w in words:
        spout.feed([w])
    cluster.wait_idle()
    waves_before = run.stats.waves
    # Two trees at a time: a wave that ended after its first calls would carry two words, so 40 waves at least;
    # open, a few carry them all, and a few more find the topology idle.
    assert waves_before <= len(words) // 4
    sent = [spout.feed([w]) for w in [*words, "crash", *words]]  # a part of one of these waves loses a worker
    cluster.wait_idle()
    assert marker.read_text() == "crashed"

    acks = Counter(m for kind, m in spout.calls if kind == "ack")
    assert len(acks) == 3 * len(words) + 1 and set(acks.values()) == {1}  # each acked exactly once
    assert set(sent) <= set(acks) and spout.failed == set()  # the trees in flight were completed by the run again
    counted = {}
    for word, n in run.captured["count"]:
        counted[word] = max(counted.get(word, 0), n)
    assert counted == dict(Counter([*words, *words, "crash", *words]))  # no trace of the lost attempt
