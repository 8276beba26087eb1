"""The rules of when a worker applies the bolts' acks, driven as event lists in any order the network may give.

``AckGate`` is pure: these tests hand it ``AcksArrived``, ``WaveCommitted`` and ``CheckpointReleased`` events,
with the runs again of the waves after the last complete snapshot that a worker loss brings, and check every
``ApplyAcks`` it returns against the rules, and that nothing is left waiting once every event is in.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from squall.reliability.ack_gate import (
    AckGate,
    AcksArrived,
    ApplyAcks,
    CheckpointReleased,
    WaveCommitted,
    WithdrawAcks,
)

WAVES = 6


class AckGateMachine(RuleBasedStateMachine):
    """``WAVES`` waves after ``start`` (the gate's acker tasks are new as of it), ``tasks`` bolt tasks of which
    those in ``stateful`` send held acks; stray acks of waves up to ``start``; and worker losses: each a new
    generation in which every wave after the last complete snapshot runs again, with its acks.

    Each task's acks of a wave carry ``(wave, task, generation)``. What counts is what stays applied (applied less
    withdrawn): once everything is in, exactly one of each task's acks of each wave, and, for a wave that was in
    flight at a loss, the one of the generation it last ran in, so that no tree is completed by acks of two runs."""

    @initialize(
        tasks=st.integers(1, 3),
        start=st.integers(0, 3),
        stateful=st.sets(st.integers(0, 2), max_size=2),
    )
    def begin(self, tasks: int, start: int, stateful: set[int]) -> None:
        self.tasks, self.start = tasks, start
        self.gate = AckGate(tasks, start)
        self.stateful = {t for t in stateful if t < tasks}
        self.generation = 0
        self.ran_in = dict.fromkeys(range(start + 1, start + WAVES + 1), 0)  # wave -> the generation it last ran in
        self.undelivered = [self._acks(w, t) for w in self.ran_in for t in range(tasks)]
        self.undelivered += [AcksArrived(w, 0, ("before", w, 0)) for w in range(1, start + 1)]
        self.committed = self.snapshot = self.released = self.applied = start
        self.net: Counter = Counter()  # payload -> times applied less times withdrawn

    def _acks(self, wave: int, task: int) -> AcksArrived:
        return AcksArrived(wave, task, (wave, task, self.generation), held=task in self.stateful)

    def _take(self, due: list) -> None:
        for instruction in due:
            for payload in instruction.acks:
                assert payload[0] != "before", "acks of a wave before the gate's acker tasks came are applied"
                if isinstance(instruction, WithdrawAcks):
                    assert self.net[payload] == 1, f"{payload} withdrawn but not applied"
                    self.net[payload] -= 1
                    continue
                assert not instruction.held or instruction.wave <= self.released, "held acks before their checkpoint"
                wave, task, _ = payload
                assert sum(n for (w, t, _), n in self.net.items() if (w, t) == (wave, task)) == 0, (
                    f"task {task}'s acks of wave {wave} applied twice"
                )
                self.net[payload] += 1

    def _deliver(self, event: AcksArrived) -> None:
        self._take(self.gate.handle(event))

    @precondition(lambda self: self.undelivered)
    @rule(data=st.data())
    def acks_arrive(self, data) -> None:
        self._deliver(self.undelivered.pop(data.draw(st.integers(0, len(self.undelivered) - 1))))

    @rule(wave=st.integers(0, WAVES), data=st.data())
    def driver_commits(self, wave: int, data) -> None:
        """The driver says waves up to ``wave`` completed: every task has reported them, so every task's acks of
        them were sent (not necessarily arrived). A snapshot among them may be complete too: only a wave that ran
        for the first time can be a snapshot wave, so none after a loss here, where every wave has run already."""
        wave = max(self.start + wave, self.committed)
        self.applied = max(self.applied, wave)
        self.committed = wave
        if self.generation == 0:
            self.snapshot = data.draw(st.integers(self.snapshot, wave))
        self._take(self.gate.handle(WaveCommitted(wave, self.snapshot)))

    @rule(wave=st.integers(0, WAVES))
    def checkpoint_releases(self, wave: int) -> None:
        """A checkpoint completes only once its wave has: every task reported it."""
        wave = min(self.start + wave, self.applied)
        self.released = max(self.released, wave)
        self._take(self.gate.handle(CheckpointReleased(wave)))

    @rule(data=st.data())
    def a_worker_is_lost(self, data) -> None:
        """The driver had seen waves up to ``applied`` complete (their acks, sent before the reports, arrive before
        the new generation's Assign); what is still on the wire of the later ones is of the old generation and
        dropped. Every wave after the last complete snapshot runs again."""
        applied = data.draw(st.integers(self.applied, self.start + WAVES))
        for event in [e for e in self.undelivered if e.acks[0] != "before" and e.wave <= applied]:
            self._deliver(event)
        self.undelivered = [e for e in self.undelivered if e.acks[0] == "before"]
        self.applied = applied
        self.generation += 1
        self._take(self.gate.restarted(self.tasks, applied, self.snapshot))
        for wave in self.ran_in:
            if wave > applied:
                self.ran_in[wave] = self.generation
        self.undelivered += [self._acks(w, t) for w in self.ran_in if w > self.snapshot for t in range(self.tasks)]

    def teardown(self) -> None:
        """Once everything has arrived, every wave is committed and released: each task's acks of each wave stay
        applied once, of the generation the wave last ran in."""
        if not hasattr(self, "gate"):
            return
        for event in self.undelivered:
            self._deliver(event)
        last = self.start + WAVES
        self._take(self.gate.handle(WaveCommitted(last, last)))
        self.released = last
        self._take(self.gate.handle(CheckpointReleased(last)))
        kept = sorted(payload for payload, n in self.net.items() if n)
        assert kept == sorted((w, t, self.ran_in[w]) for w in self.ran_in for t in range(self.tasks))
        assert self.gate.waiting == 0 and not self.gate.behind


AckGateMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_ack_gate_rules = AckGateMachine.TestCase


def test_acks_are_applied_as_they_arrive_in_any_wave_order():
    """Wave 2's acks arrive before wave 1's and before either commit: each is applied at once, as Storm's acker
    applies its messages in any order."""
    gate = AckGate(expected=2)
    assert gate.handle(AcksArrived(2, 0, "2a")) == [ApplyAcks(2, ("2a",))]
    assert gate.handle(AcksArrived(1, 0, "1a")) == [ApplyAcks(1, ("1a",))]
    assert gate.handle(WaveCommitted(2)) == []
    assert gate.behind  # wave 1 and wave 2 each miss a task's acks
    assert gate.handle(AcksArrived(2, 1, "2b")) == [ApplyAcks(2, ("2b",))]
    assert gate.handle(AcksArrived(1, 1, "1b")) == [ApplyAcks(1, ("1b",))]
    assert not gate.behind


def test_a_stateful_tasks_acks_wait_for_the_checkpoint():
    gate = AckGate(expected=2)
    assert gate.handle(AcksArrived(4, 0, "plain")) == [ApplyAcks(4, ("plain",))]
    assert gate.handle(AcksArrived(4, 1, "stateful", held=True)) == []
    assert gate.waiting == 1
    assert gate.handle(CheckpointReleased(3)) == []
    assert gate.handle(CheckpointReleased(4)) == [ApplyAcks(4, ("stateful",), held=True)]
    assert gate.waiting == 0


def test_after_a_loss_the_completed_waves_keep_their_acks_and_the_ones_in_flight_take_the_run_agains():
    """Waves 2 and 3 completed, wave 4 was in flight: task 0's acks of it had come, task 1's were lost with its
    worker. Every wave after the last complete snapshot (wave 1) runs again. Of waves 2 and 3 the acks that came
    stay and their second coming is dropped; of wave 4, task 0's are withdrawn and both tasks' of the run again
    are applied. A wave up to the snapshot never runs again, so its late acks are applied whenever they come."""
    gate = AckGate(expected=2)
    for wave, task in [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (4, 0)]:
        assert gate.handle(AcksArrived(wave, task, (wave, task))) == [ApplyAcks(wave, ((wave, task),))]
    assert gate.handle(WaveCommitted(2, snapshot=1)) == []
    assert gate.restarted(2, applied=3) == [WithdrawAcks(4, ((4, 0),))]
    for wave in (2, 3):
        assert gate.handle(AcksArrived(wave, 0, "again")) == [] and gate.handle(AcksArrived(wave, 1, "again")) == []
    assert gate.handle(AcksArrived(4, 0, "4, 0 again")) == [ApplyAcks(4, ("4, 0 again",))]
    assert gate.handle(AcksArrived(4, 1, "4, 1 again")) == [ApplyAcks(4, ("4, 1 again",))]
    assert gate.handle(AcksArrived(1, 1, (1, 1))) == [ApplyAcks(1, ((1, 1),))]  # late, never run again
    assert not gate.behind


def test_acker_tasks_new_to_a_worker_drop_the_acks_of_waves_sent_before_they_came():
    gate = AckGate(expected=1, start=5)
    assert gate.handle(AcksArrived(5, 0, "for a tree that went with the old acker")) == []
    assert gate.handle(AcksArrived(6, 0, "new")) == [ApplyAcks(6, ("new",))]


def test_acks_lost_of_a_wave_the_snapshot_holds_do_not_leave_the_gate_behind_for_ever():
    """Snapshot wave 2 completed at the driver, but task 1's acks of it were lost with its worker: wave 2 never
    runs again, so once the workers restart as of it, the gate counts it complete and is not behind; the waves
    after it fill in from the run again."""
    gate = AckGate(expected=2)
    for wave, task in [(1, 0), (1, 1), (2, 0), (3, 0)]:
        gate.handle(AcksArrived(wave, task, (wave, task)))
    gate.handle(WaveCommitted(3, snapshot=2))
    assert gate.behind
    assert gate.restarted(2, applied=3, snapshot=2) == []
    assert gate.behind  # wave 3 runs again: task 1's acks of it are still to come
    assert gate.handle(AcksArrived(3, 0, "again")) == []
    assert gate.handle(AcksArrived(3, 1, (3, 1))) == [ApplyAcks(3, ((3, 1),))]
    assert not gate.behind
    assert gate.handle(AcksArrived(2, 0, "a copy")) == []
