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

    A plain task sends a wave's acks in ``parts`` messages, the last of them final; a stateful task's come whole.
    Each part carries ``(wave, task, generation, part)``. A link delivers its messages in order, so a task's parts
    of a wave arrive in order, and a loss may cut them short. What counts is what stays applied (applied less
    withdrawn): once everything is in, every part of one generation's acks of each task and wave, exactly once: the
    generation whose final part came first, or for a wave that was in flight at a loss the one it last ran in, so
    that no tree is completed by acks of two runs."""

    @initialize(
        tasks=st.integers(1, 3),
        start=st.integers(0, 3),
        stateful=st.sets(st.integers(0, 2), max_size=2),
        parts=st.integers(1, 3),
    )
    def begin(self, tasks: int, start: int, stateful: set[int], parts: int) -> None:
        self.tasks, self.start, self.parts = tasks, start, parts
        self.gate = AckGate(tasks, start)
        self.stateful = {t for t in stateful if t < tasks}
        self.generation = 0
        self.waves = list(range(start + 1, start + WAVES + 1))
        self.kept_generation: dict[tuple[int, int], int] = {}  # (wave, task) -> the generation whose acks stay
        # (wave, task) -> its parts not delivered yet, in the order its link carries them
        self.undelivered: dict[tuple[int, int], list[AcksArrived]] = {
            (w, t): self._acks(w, t) for w in self.waves for t in range(tasks)
        }
        self.strays = [AcksArrived(w, 0, ("before", w, 0, 0)) for w in range(1, start + 1)]
        self.committed = self.snapshot = self.released = self.applied = start
        self.net: Counter = Counter()  # payload -> times applied less times withdrawn
        self.cut: dict[tuple[int, int], list] = {}  # (wave, task) of a wave that never ran again -> parts that came

    def _acks(self, wave: int, task: int) -> list[AcksArrived]:
        if task in self.stateful:
            return [AcksArrived(wave, task, (wave, task, self.generation, 0), held=True)]
        return [
            AcksArrived(wave, task, (wave, task, self.generation, part), final=part == self.parts - 1)
            for part in range(self.parts)
        ]

    def _take(self, due: list) -> None:
        for instruction in due:
            for payload in instruction.acks:
                assert payload[0] != "before", "acks of a wave before the gate's acker tasks came are applied"
                if isinstance(instruction, WithdrawAcks):
                    assert self.net[payload] == 1, f"{payload} withdrawn but not applied"
                    self.net[payload] -= 1
                    continue
                assert not instruction.held or instruction.wave <= self.released, "held acks before their checkpoint"
                wave, task, generation, _ = payload
                assert self.net[payload] == 0, f"{payload} applied twice"
                others = [p for p, n in self.net.items() if n and p[:2] == (wave, task) and p[2] != generation]
                assert not others, f"task {task}'s acks of wave {wave} applied from two runs: {others} and {payload}"
                self.net[payload] += 1

    def _deliver(self, event: AcksArrived) -> None:
        if event.final and (event.wave, event.task) not in self.kept_generation:
            self.kept_generation[(event.wave, event.task)] = event.acks[2]
        self._take(self.gate.handle(event))

    @precondition(lambda self: any(self.undelivered.values()) or self.strays)
    @rule(data=st.data())
    def acks_arrive(self, data) -> None:
        links = sorted(key for key, parts in self.undelivered.items() if parts)
        if self.strays and (not links or data.draw(st.booleans())):
            self._deliver(self.strays.pop())
            return
        self._deliver(self.undelivered[data.draw(st.sampled_from(links))].pop(0))

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
        """The driver had seen waves up to ``applied`` complete; their acks were sent before the reports, and
        arrive before the new generation's Assign, but for those the lost worker's links still held: a task's parts
        of a wave may be cut short. What is still on the wire of the later waves is of the old generation and
        dropped. Every wave after the last complete snapshot runs again; a task's acks of a completed wave whose
        final part came stay, the run again's are dropped."""
        applied = data.draw(st.integers(self.applied, self.start + WAVES))
        for (wave, task), parts in sorted(self.undelivered.items()):
            if wave <= applied and parts:
                arrive = data.draw(st.integers(0, len(parts)), label=f"parts of {wave}, {task}")
                for event in parts[:arrive]:
                    self._deliver(event)
                if arrive < len(parts) and wave <= self.snapshot:  # never runs again: those parts stay lost
                    generation = parts[0].acks[2]
                    self.cut[(wave, task)] = [(wave, task, generation, part) for part in range(parts[arrive].acks[3])]
        self.applied = applied
        self.generation += 1
        self._take(self.gate.restarted(self.tasks, applied, self.snapshot))
        for key in [key for key in self.kept_generation if key[0] > applied]:
            del self.kept_generation[key]  # in flight at the loss: the run again's stay
        self.undelivered = {
            (w, t): self._acks(w, t) if w > self.snapshot else [] for w in self.waves for t in range(self.tasks)
        }

    def teardown(self) -> None:
        """Once everything has arrived, every wave is committed and released: each task's acks of each wave stay
        applied once, every part of one generation's; of a wave that a loss cut short and that never ran again,
        the parts that came."""
        if not hasattr(self, "gate"):
            return
        for parts in self.undelivered.values():
            for event in parts:
                self._deliver(event)
        for event in self.strays:
            self._deliver(event)
        last = self.start + WAVES
        self._take(self.gate.handle(WaveCommitted(last, last)))
        self.released = last
        self._take(self.gate.handle(CheckpointReleased(last)))
        kept = sorted(payload for payload, n in self.net.items() if n)
        expected = []
        for w in self.waves:
            for t in range(self.tasks):
                if (w, t) in self.cut:  # its tree times out, and its source replays it
                    expected += self.cut[(w, t)]
                    continue
                parts = 1 if t in self.stateful else self.parts
                expected += [(w, t, self.kept_generation[(w, t)], part) for part in range(parts)]
        assert kept == sorted(expected)
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


def test_parts_of_a_wave_are_applied_at_once_and_only_the_final_one_counts():
    """A plain task's acks may come in parts before the end of its wave: each is applied as it comes, and the
    wave has all of its acks here only once the final part has come."""
    gate = AckGate(expected=1)
    assert gate.handle(AcksArrived(1, 0, "first part", final=False)) == [ApplyAcks(1, ("first part",))]
    assert gate.handle(WaveCommitted(1)) == []
    assert gate.behind
    assert gate.handle(AcksArrived(1, 0, "the rest")) == [ApplyAcks(1, ("the rest",))]
    assert not gate.behind


def test_parts_of_a_completed_wave_whose_final_part_was_lost_are_withdrawn_for_the_run_again():
    """Wave 2 completed at the driver, but task 1's final part of it was lost with its worker: the part that came
    is withdrawn, and the run again's parts are applied. Task 0's final part of it came: its run again is dropped."""
    gate = AckGate(expected=2)
    assert gate.handle(AcksArrived(2, 0, "2, 0")) == [ApplyAcks(2, ("2, 0",))]
    assert gate.handle(AcksArrived(2, 1, "2, 1 part", final=False)) == [ApplyAcks(2, ("2, 1 part",))]
    assert gate.handle(WaveCommitted(2, snapshot=1)) == []
    assert gate.restarted(2, applied=2, snapshot=1) == [WithdrawAcks(2, ("2, 1 part",))]
    assert gate.handle(AcksArrived(2, 0, "again", final=False)) == []
    assert gate.handle(AcksArrived(2, 1, "2, 1 part again", final=False)) == [ApplyAcks(2, ("2, 1 part again",))]
    assert gate.handle(AcksArrived(2, 1, "2, 1 again")) == [ApplyAcks(2, ("2, 1 again",))]
    assert not gate.behind
