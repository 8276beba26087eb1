"""Which messages a worker takes, and when its bolt tasks execute a batch and end a wave: a pure state machine,
events in and instructions out.

The driver sends a worker its ``Assign`` and each wave's ``WaveInput`` over the worker's own connection, but
the peers' batches come over others, in whatever order the network gives. The rules:

* a message of a later generation than the worker's is held until that generation's ``Assign``, and then taken
  in the order it came; one of an earlier generation is dropped (its wave runs again under the new one);
* a task works on one wave at a time, in wave order. A batch of a later wave, or of a wave whose ``WaveInput``
  has not reached the worker yet, is held (the wave's simulated time and checkpoint come with its ``WaveInput``);
* a task executes its wave's batches as they come, so each producer's in the order it sent them. Once every
  producer (the driver, every spout and bolt task upstream) has sent its ``last`` batch of the wave, the task
  ends the wave and moves to the next, whose held batches then run if it has begun.

``WaveGate.handle`` takes one event and returns the instructions it makes due, in the order the worker carries
them out (``worker.py``). Messages are opaque here but for their ``generation``, and a batch's ``wave``,
``target``, ``producer`` and ``last``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Assigned:
    """The worker's tasks for ``generation``: each task's first wave and the producers it waits for."""

    generation: int
    tasks: dict[int, tuple[int, frozenset[int]]]  # task -> (first wave, producers)


@dataclass(frozen=True)
class Arrived:
    """A message with a generation came: a batch for a task here, or any other (``WaveInput``, ``Commit``...)."""

    message: Any
    batch: bool = False


@dataclass(frozen=True)
class WaveBegan:
    """The worker has the ``WaveInput`` of ``wave``: its batches may run."""

    wave: int


WaveEvent = Assigned | Arrived | WaveBegan


@dataclass(frozen=True)
class Take:
    """Instruction: the worker handles ``message``, of its generation (a batch goes through ``Arrived`` again
    with ``batch=True``; any other message as its kind says)."""

    message: Any


@dataclass(frozen=True)
class Execute:
    """Instruction: ``task`` executes ``batch`` (of the wave the task is on)."""

    task: int
    batch: Any


@dataclass(frozen=True)
class EndWave:
    """Instruction: ``task`` has every producer's last batch of ``wave``: it ends the wave (its last batches go
    downstream, its report to the driver). It is on the next wave from here on."""

    task: int
    wave: int


@dataclass
class _Task:
    wave: int
    producers: frozenset[int]
    waiting: set[int] = field(default_factory=set)
    held: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))  # wave -> batches


class WaveGate:
    def __init__(self) -> None:
        self.generation = -1
        self.began: set[int] = set()  # waves whose WaveInput came, not yet ended by every task
        self._tasks: dict[int, _Task] = {}
        self._ahead: list[Any] = []  # messages of a later generation, in the order they came

    def wave_of(self, task: int) -> int:
        """The wave ``task`` works on."""
        return self._tasks[task].wave

    def waits(self) -> dict[int, tuple[int, list[int], list[int]]]:
        """Each task's wave, the producers whose ``last`` batch of it has not come, and the later waves it holds
        batches of."""
        return {number: (t.wave, sorted(t.waiting), sorted(t.held)) for number, t in self._tasks.items()}

    def handle(self, event: WaveEvent) -> list[Take | Execute | EndWave]:
        if isinstance(event, Arrived):
            return self._arrived(event)
        if isinstance(event, WaveBegan):
            return self._began(event.wave)
        if isinstance(event, Assigned):
            return self._assigned(event)
        raise TypeError(f"WaveGate: unexpected event {event!r}")

    def _assigned(self, event: Assigned) -> list[Take | Execute | EndWave]:
        self.generation = event.generation
        self.began = set()
        self._tasks = {
            task: _Task(first, producers, set(producers)) for task, (first, producers) in event.tasks.items()
        }
        ahead, self._ahead = self._ahead, []
        taken: list[Take | Execute | EndWave] = []
        for message in ahead:
            if message.generation == self.generation:
                taken.append(Take(message))
            elif message.generation > self.generation:
                self._ahead.append(message)
        return taken

    def _arrived(self, event: Arrived) -> list[Take | Execute | EndWave]:
        message = event.message
        if message.generation > self.generation:
            self._ahead.append(message)
            return []
        if message.generation < self.generation:
            return []
        if not event.batch:
            return [Take(message)]
        task = self._tasks[message.target]
        if message.wave != task.wave or message.wave not in self.began:
            task.held[message.wave].append(message)
            return []
        due: list[Take | Execute | EndWave] = []
        self._execute(message.target, task, message, due)
        return due

    def _began(self, wave: int) -> list[Take | Execute | EndWave]:
        if not self._tasks:  # no bolt task here (spout and acker tasks only): no batch waits for it
            return []
        self.began.add(wave)
        due: list[Take | Execute | EndWave] = []
        for number, task in self._tasks.items():
            if task.wave == wave:
                for batch in task.held.pop(wave, ()):
                    self._execute(number, task, batch, due)
        return due

    def _execute(self, number: int, task: _Task, batch: Any, due: list[Take | Execute | EndWave]) -> None:
        due.append(Execute(number, batch))
        if not batch.last:
            return
        task.waiting.discard(batch.producer)
        if task.waiting:
            return
        ended = task.wave
        due.append(EndWave(number, ended))
        task.wave, task.waiting = ended + 1, set(task.producers)
        if min(t.wave for t in self._tasks.values()) > ended:
            self.began.discard(ended)  # every task is past it
        if task.wave in self.began:
            for held in task.held.pop(task.wave, ()):
                self._execute(number, task, held, due)
