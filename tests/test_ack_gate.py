"""The rules of when a worker applies a wave's acks, driven as event lists in any order the network may give.

``AckGate`` is pure: these tests hand it ``AcksArrived``, ``WaveCommitted`` and ``CheckpointReleased`` events and
check every ``ApplyAcks`` it returns against the rules, and that nothing is left waiting once every event is in.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from squall.reliability.ack_gate import AckGate, AcksArrived, ApplyAcks, CheckpointReleased, WaveCommitted

WAVES = 6


class AckGateMachine(RuleBasedStateMachine):
    """A generation of ``WAVES`` waves after ``base`` (waves up to it were applied before), ``tasks`` bolt tasks
    of which those in ``stateful`` send held acks; plus stray acks of a wave replayed from before ``base``."""

    @initialize(
        tasks=st.integers(1, 4),
        base=st.integers(0, 3),
        stateful=st.sets(st.integers(0, 3), max_size=2),
    )
    def start(self, tasks: int, base: int, stateful: set[int]) -> None:
        self.tasks, self.base = tasks, base
        self.gate = AckGate(tasks, base)
        self.stateful = {t for t in stateful if t < tasks}
        self.undelivered = [
            AcksArrived(w, (w, t), held=t in self.stateful)
            for w in range(base + 1, base + WAVES + 1)
            for t in range(tasks)
        ]
        self.undelivered += [AcksArrived(w, ("replayed", w)) for w in range(1, base + 1)]
        self.delivered: list[AcksArrived] = []
        self.committed = self.released = base
        self.applied: list[ApplyAcks] = []

    def _take(self, due: list[ApplyAcks]) -> None:
        for instruction in due:
            self._check(instruction)
            self.applied.append(instruction)

    def _check(self, instruction: ApplyAcks) -> None:
        wave = instruction.wave
        assert wave > self.base, "a wave applied before this generation is applied again"
        assert wave <= self.committed, f"wave {wave}'s acks applied before the driver committed it"
        of_wave = [a for a in self.delivered if a.wave == wave]
        assert len(of_wave) == self.tasks, f"wave {wave}'s acks applied before every task's arrived"
        if instruction.held:
            assert wave <= self.released, f"wave {wave}'s held acks applied before a checkpoint released them"
            assert sorted(instruction.acks) == sorted(a.acks for a in of_wave if a.held)
            assert any(i.wave == wave and not i.held for i in self.applied), "held acks before their wave's own"
        else:
            assert sorted(instruction.acks) == sorted(a.acks for a in of_wave if not a.held)
            plain = [i.wave for i in self.applied if not i.held]
            assert plain == list(range(self.base + 1, wave)), f"wave {wave} applied out of order after {plain}"
        held = [i.wave for i in self.applied if i.held]
        assert not held or held[-1] < wave or not instruction.held, "held acks applied out of wave order"

    @precondition(lambda self: self.undelivered)
    @rule(data=st.data())
    def acks_arrive(self, data) -> None:
        event = self.undelivered.pop(data.draw(st.integers(0, len(self.undelivered) - 1)))
        if event.wave > self.base:
            self.delivered.append(event)
        self._take(self.gate.handle(event))

    @rule(wave=st.integers(0, WAVES + 3))
    def driver_commits(self, wave: int) -> None:
        wave = min(self.base + wave, self.base + WAVES)
        self.committed = max(self.committed, wave)  # a commit's message may be older than one already seen
        self._take(self.gate.handle(WaveCommitted(wave)))

    @rule(wave=st.integers(0, WAVES + 3))
    def checkpoint_releases(self, wave: int) -> None:
        wave = min(self.base + wave, self.base + WAVES)
        self.released = max(self.released, wave)
        self._take(self.gate.handle(CheckpointReleased(wave)))

    @invariant()
    def nothing_is_applied_twice(self) -> None:
        keys = [(i.wave, i.held) for i in getattr(self, "applied", [])]
        assert len(keys) == len(set(keys))

    @invariant()
    def everything_due_is_applied_at_once(self) -> None:
        """No ack waits longer than the rules say: the plain acks of every committed wave whose acks have all
        arrived (and of every wave before it) are applied, and so are the held acks released up to there."""
        if not hasattr(self, "gate"):
            return
        complete = self.base
        while complete < self.committed and sum(a.wave == complete + 1 for a in self.delivered) == self.tasks:
            complete += 1
        assert [i.wave for i in self.applied if not i.held] == list(range(self.base + 1, complete + 1))
        released = min(self.released, complete) if self.stateful else self.base
        assert [i.wave for i in self.applied if i.held] == list(range(self.base + 1, released + 1))

    def teardown(self) -> None:
        """Once everything has arrived, every wave is committed and released: all of it is applied."""
        if not hasattr(self, "gate"):
            return
        for event in self.undelivered:
            if event.wave > self.base:
                self.delivered.append(event)
            self._take(self.gate.handle(event))
        self.committed = self.released = self.base + WAVES
        self._take(self.gate.handle(WaveCommitted(self.committed)))
        self._take(self.gate.handle(CheckpointReleased(self.released)))
        assert [i.wave for i in self.applied if not i.held] == list(range(self.base + 1, self.base + WAVES + 1))
        if self.stateful:
            assert [i.wave for i in self.applied if i.held] == list(range(self.base + 1, self.base + WAVES + 1))
        assert self.gate.waiting == 0


AckGateMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_ack_gate_rules = AckGateMachine.TestCase


def test_the_race_a_late_commit_and_early_acks_of_the_next_wave():
    """Wave 2's acks arrive before wave 1's last ones and before either commit: nothing is applied until wave 1
    is complete and committed, then wave 2 follows as soon as it is committed too."""
    gate = AckGate(expected=2)
    assert gate.handle(AcksArrived(2, "2a")) == []
    assert gate.handle(AcksArrived(1, "1a")) == []
    assert gate.handle(WaveCommitted(2)) == []  # wave 1 still misses a task's acks
    assert gate.handle(AcksArrived(2, "2b")) == []
    assert gate.handle(AcksArrived(1, "1b")) == [ApplyAcks(1, ("1a", "1b")), ApplyAcks(2, ("2a", "2b"))]


def test_a_stateful_tasks_acks_wait_for_the_checkpoint_and_a_replays_are_dropped():
    gate = AckGate(expected=2, applied=3)
    assert gate.handle(AcksArrived(3, "replayed")) == []  # wave 3's acks are in already
    assert gate.handle(AcksArrived(4, "plain")) == []
    assert gate.handle(AcksArrived(4, "stateful", held=True)) == []
    assert gate.handle(WaveCommitted(4)) == [ApplyAcks(4, ("plain",))]
    assert gate.waiting == 1
    assert gate.handle(CheckpointReleased(4)) == [ApplyAcks(4, ("stateful",), held=True)]
    assert gate.waiting == 0


def test_a_restart_applies_the_completed_waves_and_keeps_their_held_acks_until_a_checkpoint():
    gate = AckGate(expected=2)
    for wave in (1, 2, 3):
        gate.handle(AcksArrived(wave, f"plain{wave}"))
        gate.handle(AcksArrived(wave, f"held{wave}", held=True))
    assert gate.handle(WaveCommitted(1)) == [ApplyAcks(1, ("plain1",))]
    # The workers restart: waves 1 and 2 completed (the driver had not said so for 2 yet), wave 3 runs again.
    restarted, due = gate.restarted(2, applied=2)
    assert due == [ApplyAcks(2, ("plain2",))]
    assert restarted.held == [ApplyAcks(1, ("held1",), held=True), ApplyAcks(2, ("held2",), held=True)]
    assert restarted.handle(AcksArrived(2, "replayed")) == []  # wave 2 ran again: its acks are in already
    assert restarted.handle(AcksArrived(3, "plain3 again")) == []
    assert restarted.handle(CheckpointReleased(1)) == [ApplyAcks(1, ("held1",), held=True)]
    assert restarted.handle(CheckpointReleased(3)) == [ApplyAcks(2, ("held2",), held=True)]
    assert restarted.waiting == 1  # wave 3's acks, of its new run, wait for its commit and its other task
