"""When a worker's acker tasks apply the acks the bolt tasks send them: a pure state machine, events in and
instructions out.

Each bolt task sends, at the end of each wave, its acks of that wave to the worker of each root's acker task: one
final ``AcksArrived`` per bolt task and wave, even when empty, XOR-folded per root with the edges of what the task
emitted, as Storm's ack values carry their children's edges. A plain task may send parts of a wave's acks before
its final one (``final=False``), whenever it has nothing else to do, so that a tree is acked without waiting for
the end of its wave; each part holds the edges of every tuple it acked and of every child it shipped before it.
XOR does not care for order, so the acks of any task and wave may be applied in any order, as Storm's acker applies
its messages as they come. The rules:

* a plain task's acks are applied as soon as they arrive, parts and final alike; only a final one counts towards
  the wave having all of its acks here;
* a stateful task's (``held``) wait until a checkpoint holds that task's state as of their wave
  (``CheckpointReleased``), as Storm holds a stateful bolt's acks until its state commits;
* after a worker loss every wave since the last complete snapshot runs again, with its acks
  (``squall/spark/recovery.py``), so a tree acked here before the loss is never lost from the bolt tasks' state.
  The acks of a task and wave are applied once: of a wave that had completed (every task reported it), those whose
  final part arrived the first time stay and their second coming is dropped; of a wave that was still in flight,
  and of a task whose final part was lost with its worker, those applied are taken back out of the trees still
  pending (``WithdrawAcks``) and the run again's are applied instead, so a tree whose tuples all went out in those
  waves is completed by one run's acks, whichever tasks the run sent them to. (A tree that spans an earlier wave,
  a tuple a bolt held across waves, is completed only if the run again gives its tuples the same edges; else it
  times out and its source replays it);
* waves up to the last complete snapshot never run again, so what arrived of them is forgotten
  (``WaveCommitted.snapshot``), and acks applied are kept only until their wave completes.

``AckGate.handle`` takes one event and returns the ``ApplyAcks`` instructions it makes due, in the order they are
to be applied. The acks themselves are opaque here: the worker combines and merges them
(``squall/spark/worker_spouts.py``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AcksArrived:
    """Bolt task ``task``'s acks of ``wave`` for the acker tasks here; ``held`` for a stateful task's. ``final``
    False: a part sent before the end of the wave (a plain task's only), more of the wave's acks follow."""

    wave: int
    task: int
    acks: Any
    held: bool = False
    final: bool = True


@dataclass(frozen=True)
class WaveCommitted:
    """The driver says every task reported ``wave`` (and every wave before it); ``snapshot`` is the last complete
    snapshot, whose waves and those before never run again."""

    wave: int
    snapshot: int = 0


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


@dataclass(frozen=True)
class WithdrawAcks:
    """Instruction: XOR ``acks`` (of ``wave``, applied before a worker loss) back out of the trees still pending;
    the wave runs again and its acks come again."""

    wave: int
    acks: tuple[Any, ...]


class AckGate:
    """The ack rules of one worker's acker tasks, across the generations of the run.

    ``expected`` is how many bolt tasks send each wave's acks. A gate made for acker tasks new to this worker
    (``start``: the last wave completed before they came) drops the acks of every wave up to it: the trees they
    were for went with the acker tasks' old instances.
    """

    def __init__(self, expected: int, start: int = 0) -> None:
        self.expected = expected
        self.start = start
        self.committed = self.snapshot = self.released = start
        self._arrived: dict[int, set[int]] = defaultdict(set)  # wave -> the tasks whose acks of it came
        self._complete = start  # every wave up to it has had every task's acks
        self._held: list[ApplyAcks] = []  # stateful tasks' acks, until a checkpoint releases them
        self._kept: dict[int, list[Any]] = defaultdict(list)  # wave not yet committed -> the plain acks applied
        self._parts: dict[tuple[int, int], list[Any]] = {}  # (wave, task) -> parts applied before its final came

    def restarted(self, expected: int, applied: int, snapshot: int = 0) -> list[WithdrawAcks]:
        """The workers start again as of the last complete snapshot (wave ``snapshot``), and every wave since it
        runs again; those up to ``applied`` had completed. The acks applied of the waves after it are withdrawn (as
        the instructions returned say), and those held of them are dropped: the run again brings them all. A wave
        up to the snapshot never runs again: what did not arrive of it (lost with its worker) never will, so it
        counts as complete."""
        self.expected = expected
        taken_back = {w: acks for w, acks in self._kept.items() if w > applied}  # the rest: of completed waves
        # Parts of a completed wave whose final part never came (lost with its sender): it runs again, unless the
        # snapshot holds it, and the run again sends them all
        for (wave, _task), parts in self._parts.items():
            if max(self.snapshot, snapshot) < wave <= applied:
                taken_back.setdefault(wave, []).extend(parts)
        self._kept.clear()
        self._parts.clear()
        withdrawn = [WithdrawAcks(w, tuple(taken_back[w])) for w in sorted(taken_back)]
        for wave in [w for w in self._arrived if w > applied]:
            del self._arrived[wave]
        self._complete = max(min(self._complete, max(applied, self.start)), snapshot)
        self._advance()  # past the snapshot, waves whose acks had all come before the loss
        self.snapshot = max(self.snapshot, snapshot)
        self._forget()
        self._held = [held for held in self._held if held.wave <= applied]
        return withdrawn

    @property
    def held(self) -> list[ApplyAcks]:
        """The held acks waiting for a checkpoint, in the order they arrived."""
        return list(self._held)

    def handle(self, event: AckEvent) -> list[ApplyAcks]:
        if isinstance(event, AcksArrived):
            return self._arrived_acks(event)
        if isinstance(event, WaveCommitted):
            self.committed = max(self.committed, event.wave)
            for wave in [w for w in self._kept if w <= self.committed]:
                del self._kept[wave]
            self._forget_up_to(event.snapshot)
            return []
        if isinstance(event, CheckpointReleased):
            self.released = max(self.released, event.wave)
            return self._released()
        raise TypeError(f"AckGate: unexpected event {event!r}")

    def _arrived_acks(self, event: AcksArrived) -> list[ApplyAcks]:
        if event.wave <= self.start:  # a replay's, for trees this gate never had
            return []
        if event.wave <= min(self._complete, self.snapshot):  # every task's acks of it came: these are a copy
            return []
        tasks = self._arrived[event.wave]
        if event.task in tasks:  # the wave ran again: this task's acks of it are in already
            return []
        if not event.final:
            if event.held:
                raise ValueError(f"AckGate: a stateful task's acks come whole, at the end of its wave ({event.task})")
            self._parts.setdefault((event.wave, event.task), []).append(event.acks)
            if event.wave > self.committed:
                self._kept[event.wave].append(event.acks)
            return [ApplyAcks(event.wave, (event.acks,))]
        self._parts.pop((event.wave, event.task), None)
        tasks.add(event.task)
        before = self._complete
        self._advance()
        if before < self.snapshot:  # late acks of a wave the last snapshot holds: it may be forgotten now
            self._forget()
        instruction = ApplyAcks(event.wave, (event.acks,), event.held)
        if not event.held:
            if event.wave > self.committed:
                self._kept[event.wave].append(event.acks)
            return [instruction]
        self._held.append(instruction)
        return self._released()

    def _advance(self) -> None:
        """``_complete`` up to the last wave before the first that has not had every task's acks."""
        while len(self._arrived.get(self._complete + 1, ())) >= self.expected:
            self._complete += 1

    def _released(self) -> list[ApplyAcks]:
        due = [held for held in self._held if held.wave <= self.released]
        if due:
            self._held = [held for held in self._held if held.wave > self.released]
        return due

    def _forget_up_to(self, snapshot: int) -> None:
        if snapshot > self.snapshot:
            self.snapshot = snapshot
            self._forget()

    def _forget(self) -> None:
        """A wave whose acks have all come, up to the last complete snapshot, never runs again: its record goes."""
        for wave in [w for w in self._arrived if w <= min(self._complete, self.snapshot)]:
            del self._arrived[wave]

    @property
    def behind(self) -> bool:
        """A wave the driver said completed has not had every task's acks here yet: they will be applied when
        they come."""
        return self._complete < self.committed

    @property
    def waiting(self) -> int:
        """Acks that arrived and are not applied yet: stateful tasks' held for a checkpoint."""
        return len(self._held)
