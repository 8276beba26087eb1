"""A worker takes what its peers send in the order the network gives it (``squall/spark/wave_gate.py``).

The driver sends every worker its ``Assign`` and then the wave's ``WaveInput`` over the worker's own connection,
but a peer's batches come over another one. A peer that got its ``Assign`` first can execute its part of the wave
and send its batch before this worker's ``Assign`` or ``WaveInput`` has arrived. The batch must wait for them, not
be dropped (the wave would never end) nor run before its wave's ``WaveInput`` (which brings the wave's simulated
time). ``WaveGate`` is pure: these tests hand it those races as event lists, and a hypothesis state machine
hands it every order the network may give.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from squall.spark.wave_gate import Arrived, Assigned, EndWave, Execute, Take, WaveBegan, WaveGate

DRIVER, SPLIT, STAMP = -1, 1, 2  # the driver's marker batch, the upstream task (on a peer), the task here


@dataclass(frozen=True)
class Message:
    """A batch (``target`` set) or another message of a generation."""

    generation: int
    wave: int = 0
    producer: int = DRIVER
    target: int | None = None
    last: bool = False
    name: str = ""


def batch(generation: int, wave: int, producer: int, name: str, last: bool = True) -> Message:
    return Message(generation, wave, producer, STAMP, last, name)


def arrive(gate: WaveGate, message: Message) -> list:
    return gate.handle(Arrived(message, batch=message.target is not None))


def assigned(generation: int, first_wave: int = 1) -> Assigned:
    return Assigned(generation, {STAMP: (first_wave, frozenset({DRIVER, SPLIT}))})


def test_a_peers_batch_that_comes_before_the_assign_is_kept_for_it():
    gate = WaveGate()
    early = batch(1, 1, SPLIT, "a b c")
    assert arrive(gate, early) == []  # generation 1 is not this worker's yet
    assert gate.handle(assigned(1)) == [Take(early)]
    assert arrive(gate, early) == []  # taken again: its wave has not begun here
    assert gate.handle(WaveBegan(1)) == [Execute(STAMP, early)]
    marker = batch(1, 1, DRIVER, "")
    assert arrive(gate, marker) == [Execute(STAMP, marker), EndWave(STAMP, 1)]


def test_a_peers_batch_that_comes_before_the_wave_waits_for_its_wave_input():
    gate = WaveGate()
    gate.handle(assigned(1))
    early = batch(1, 1, SPLIT, "a b")
    assert arrive(gate, early) == []
    assert gate.handle(WaveBegan(1)) == [Execute(STAMP, early)]


def test_what_is_left_of_an_older_generation_is_dropped():
    gate = WaveGate()
    gate.handle(assigned(1))
    new, old = batch(2, 1, SPLIT, "new"), batch(1, 1, SPLIT, "old")
    assert arrive(gate, new) == []  # the next generation's, early
    assert gate.handle(assigned(2)) == [Take(new)]
    assert arrive(gate, new) == []
    assert arrive(gate, old) == []  # the first generation's, late: dropped
    assert gate.handle(WaveBegan(1)) == [Execute(STAMP, new)]


def test_a_task_ends_its_waves_in_order_and_holds_the_next_waves_batches():
    gate = WaveGate()
    gate.handle(assigned(1))
    gate.handle(WaveBegan(1))
    gate.handle(WaveBegan(2))
    second = batch(1, 2, SPLIT, "second")
    assert arrive(gate, second) == []  # the task is still on wave 1
    assert arrive(gate, batch(1, 1, SPLIT, "first"))[-1] == Execute(STAMP, batch(1, 1, SPLIT, "first"))
    ending = arrive(gate, batch(1, 1, DRIVER, ""))
    assert ending[1:] == [EndWave(STAMP, 1), Execute(STAMP, second)]
    assert gate.wave_of(STAMP) == 2


def test_a_wave_stays_begun_until_every_task_here_has_ended_it():
    """Two tasks here: one ends wave 1 before the other has any of it; the other's batches still run."""
    other = 3
    gate = WaveGate()
    gate.handle(Assigned(1, {STAMP: (1, frozenset({DRIVER})), other: (1, frozenset({DRIVER}))}))
    gate.handle(WaveBegan(1))
    assert arrive(gate, batch(1, 1, DRIVER, "")) == [Execute(STAMP, batch(1, 1, DRIVER, "")), EndWave(STAMP, 1)]
    late = Message(1, 1, DRIVER, other, True, "")
    assert arrive(gate, late) == [Execute(other, late), EndWave(other, 1)]
    assert gate.began == set()  # both are past it


class WaveGateMachine(RuleBasedStateMachine):
    """Two generations of three waves each for one task with two producers (the driver and a peer's task), whose
    batches (two from the peer, one from the driver, each producer's in order) and ``WaveInput``s come in any
    interleaving, with other messages among them; the second ``Assign`` comes at any point."""

    WAVES = 3

    @initialize()
    def start(self) -> None:
        self.gate = WaveGate()
        self.generation = 0  # the worker's, as the model sees it
        self.queues: dict[tuple[int, int], list[Message]] = {}  # (generation, producer) -> still to come, in order
        self.begins: dict[int, list[int]] = {}  # generation -> waves whose WaveInput is still to come, in order
        self.others: list[Message] = []
        for generation in (1, 2):
            self.queues[(generation, SPLIT)] = [
                batch(generation, wave, SPLIT, f"{generation}/{wave}/{part}", last=part == 1)
                for wave in range(1, self.WAVES + 1)
                for part in (0, 1)
            ]
            self.queues[(generation, DRIVER)] = [batch(generation, w, DRIVER, "") for w in range(1, self.WAVES + 1)]
            self.others.append(Message(generation, name=f"commit of generation {generation}"))
        self.begins = {1: [], 2: []}
        self.assigned: set[int] = set()
        self.executed: list[tuple[int, Message]] = []  # (the worker's generation then, batch)
        self.ended: list[tuple[int, int]] = []  # (generation, wave)
        self.taken: list[Message] = []
        self.began: dict[int, set[int]] = {1: set(), 2: set()}

    def _carry_out(self, steps: list) -> None:
        for step in steps:
            if isinstance(step, Take):
                assert step.message.generation == self.generation, "a message of another generation taken"
                if step.message.target is not None:
                    self._carry_out(arrive(self.gate, step.message))
                else:
                    self.taken.append(step.message)
            elif isinstance(step, Execute):
                message = step.batch
                assert message.generation == self.generation, "an older generation's batch executed"
                assert message.wave in self.began[self.generation], "a batch ran before its wave's WaveInput"
                assert not any(g == self.generation and w >= message.wave for g, w in self.ended)
                self.executed.append((self.generation, message))
            else:
                assert isinstance(step, EndWave)
                mine = [m for g, m in self.executed if g == self.generation and m.wave == step.wave]
                assert {m.producer for m in mine if m.last} == {DRIVER, SPLIT}, "a wave ended before every last"
                assert [w for g, w in self.ended if g == self.generation] == list(range(1, step.wave))
                self.ended.append((self.generation, step.wave))

    @precondition(lambda self: 2 not in self.assigned)
    @rule()
    def assign(self) -> None:
        self.generation += 1
        self.assigned.add(self.generation)
        self.begins[self.generation] = list(range(1, self.WAVES + 1))
        self._carry_out(self.gate.handle(assigned(self.generation)))

    @precondition(lambda self: any(self.begins.values()))
    @rule(data=st.data())
    def wave_input(self, data) -> None:
        """A ``WaveInput`` comes over the driver's connection: after the ``Assign`` of its generation."""
        generation = data.draw(st.sampled_from([g for g, waves in self.begins.items() if waves]))
        wave = self.begins[generation].pop(0)
        if generation == self.generation:
            self.began[generation].add(wave)
            self._carry_out(self.gate.handle(WaveBegan(wave)))

    @precondition(lambda self: any(self.queues.values()))
    @rule(data=st.data())
    def a_batch_comes(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, q in self.queues.items() if q)))
        self._carry_out(arrive(self.gate, self.queues[key].pop(0)))

    @precondition(lambda self: self.others)
    @rule(data=st.data())
    def another_message_comes(self, data) -> None:
        message = self.others.pop(data.draw(st.integers(0, len(self.others) - 1)))
        self._carry_out(arrive(self.gate, message))

    @rule()
    def nothing_comes(self) -> None:
        """A moment in which no message comes (once everything has, the only thing left to do)."""

    @invariant()
    def each_producers_batches_run_once_and_in_order(self) -> None:
        for generation in (1, 2):
            for producer in (DRIVER, SPLIT):
                ran = [m for g, m in getattr(self, "executed", []) if g == generation and m.producer == producer]
                assert ran == sorted(ran, key=lambda m: (m.wave, m.name)) and len(set(ran)) == len(ran)

    def teardown(self) -> None:
        """Once the last generation is assigned and everything of it has come, every wave of it has ended."""
        if not hasattr(self, "gate"):
            return
        while self.generation < 2:
            self.assign()
        for wave in self.begins[2]:
            self.began[2].add(wave)
            self._carry_out(self.gate.handle(WaveBegan(wave)))
        for producer in (DRIVER, SPLIT):
            for message in self.queues[(2, producer)]:
                self._carry_out(arrive(self.gate, message))
        for message in self.others:
            self._carry_out(arrive(self.gate, message))
        assert [w for g, w in self.ended if g == 2] == list(range(1, self.WAVES + 1))
        assert [m.name for m in self.taken if m.generation == 2] == ["commit of generation 2"]
        ran = [m for g, m in self.executed if g == 2]
        assert len(ran) == 3 * self.WAVES  # two of the peer's and the driver's marker, every wave


WaveGateMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
test_every_order_the_network_gives = WaveGateMachine.TestCase
