"""When a worker's acker tasks may apply a wave's acks: a pure state machine, events in and instructions out.

The bolt tasks send each wave's acks to the worker of each root's acker task, one ``AcksArrived`` per bolt task
and wave, even when empty. The rules, which keep an ack from ever being applied before the state it depends on
is kept:

* a wave's acks are applied in wave order, once the driver has said the wave completed (``WaveCommitted``) and
  every bolt task's acks of it have arrived;
* the acks of a stateful task (``held``) wait, in wave order, until a checkpoint holds that task's state as of
  their wave (``CheckpointReleased``), and until their wave's other acks are applied;
* acks of a wave already applied belong to a replay of it, and are dropped.

``AckGate.handle`` takes one event and returns the ``ApplyAcks`` instructions it makes due, in the order they
are to be applied. The acks themselves are opaque here: the worker combines and merges them
(``squall/spark/worker_spouts.py``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AcksArrived:
    """One bolt task's acks of ``wave`` for the acker tasks here; ``held`` for a stateful task's."""

    wave: int
    acks: Any
    held: bool = False


@dataclass(frozen=True)
class WaveCommitted:
    """The driver says ``wave`` completed (and so every wave before it)."""

    wave: int


@dataclass(frozen=True)
class CheckpointReleased:
    """A checkpoint holds the stateful tasks' state as of ``wave``: their acks up to it may be applied."""

    wave: int


AckEvent = AcksArrived | WaveCommitted | CheckpointReleased


@dataclass(frozen=True)
class ApplyAcks:
    """Instruction: merge ``acks`` (of ``wave``; ``held``: a stateful task's) into the acker tasks' ledgers."""

    wave: int
    acks: tuple[Any, ...]
    held: bool = False


class AckGate:
    """The ack rules of one worker's acker tasks for one generation of the run.

    ``expected`` is how many bolt tasks send each wave's acks; the waves up to ``applied`` had theirs applied
    before this generation began, and any acks still coming for them are dropped. A gate that follows another
    (``restarted``) keeps the held acks of the waves up to ``applied`` that the other had, and what it released.
    """

    def __init__(self, expected: int, applied: int = 0) -> None:
        self.expected = expected
        self.committed = self.applied = self.released = applied
        self._arrived: dict[int, list[AcksArrived]] = defaultdict(list)  # waves after ``applied``
        self._held: list[ApplyAcks] = []  # applied waves' held acks, oldest first, until released

    def restarted(self, expected: int, applied: int) -> tuple[AckGate, list[ApplyAcks]]:
        """The gate of the next generation, whose waves up to ``applied`` completed (their acks arrived here are
        applied, as the instructions returned say); those after it run again. The held acks of the waves up to
        ``applied`` stay held in the new gate, until a checkpoint releases them."""
        due = self.handle(WaveCommitted(applied))
        gate = AckGate(expected, applied)
        gate.released = min(self.released, applied)
        gate._held = [held for held in self._held if held.wave <= applied]
        return gate, due

    @property
    def held(self) -> list[ApplyAcks]:
        """The held acks waiting for a checkpoint, oldest first."""
        return list(self._held)

    def handle(self, event: AckEvent) -> list[ApplyAcks]:
        if isinstance(event, AcksArrived):
            if event.wave <= self.applied:  # a replayed wave's: its acks are in already
                return []
            self._arrived[event.wave].append(event)
        elif isinstance(event, WaveCommitted):
            self.committed = max(self.committed, event.wave)
        elif isinstance(event, CheckpointReleased):
            self.released = max(self.released, event.wave)
        else:
            raise TypeError(f"AckGate: unexpected event {event!r}")
        return self._due()

    def _due(self) -> list[ApplyAcks]:
        due: list[ApplyAcks] = []
        while self.applied < self.committed and len(self._arrived.get(self.applied + 1, ())) >= self.expected:
            self.applied += 1
            arrived = self._arrived.pop(self.applied)
            due.append(ApplyAcks(self.applied, tuple(a.acks for a in arrived if not a.held)))
            held = tuple(a.acks for a in arrived if a.held)
            if held:
                self._held.append(ApplyAcks(self.applied, held, held=True))
        while self._held and self._held[0].wave <= min(self.released, self.applied):
            due.append(self._held.pop(0))
        return due

    @property
    def behind(self) -> bool:
        """A committed wave's acks have not all arrived yet: they will be applied when they do."""
        return self.applied < self.committed

    @property
    def waiting(self) -> int:
        """Acks that arrived and are not applied yet (held ones included)."""
        return sum(len(a) for a in self._arrived.values()) + sum(len(h.acks) for h in self._held)
