"""Pending tuple trees, where their spout tasks run: where each tree came from, the acker ledger that settles
it, its timeout.

A tree starts when a spout emits with a message id (``start``). Its root is a
random prefix plus a number derived from a sequence number and its acker task,
so the root itself says where the tree's entry is: entries live in columns, one ``_Page`` per wave of new trees
(the spout task, the message id, the emit time, a timeout stamp), and nothing
is allocated per tree beyond the message id the spout gave. The trees' init
messages reach the ledger with ``merge_inits``. Each completed wave brings the
tasks' acks, XOR-reduced per root (``merge_acks``); a timeout rotation expires
the trees that took too long (``rotate``). Every one of these returns a
``Settlement``: the trees that just finished, and how. Calling the spouts'
``ack`` and ``fail`` is the spout host's business (``spouts.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from squall.reliability.acks import AckBatch
from squall.reliability.ids import IdGenerator
from squall.reliability.ledger import Outcome, PartitionedLedger

SEQUENCE_BITS = 40  # trees per run before roots repeat: about 10^12


@dataclass(frozen=True, slots=True)
class PendingTuple:
    spout_task: int
    msg_id: Any
    emitted_at: float


@dataclass(slots=True)
class Finished:
    """Trees that finished one way, as columns."""

    tasks: list[int] = field(default_factory=list)  # the spout task of each
    msg_ids: list[Any] = field(default_factory=list)
    emitted_at: np.ndarray = field(default_factory=lambda: np.empty(0))

    def __len__(self) -> int:
        return len(self.tasks)

    def add(self, tasks: np.ndarray, msg_ids: list[Any], emitted_at: np.ndarray) -> None:
        self.tasks.extend(tasks.tolist())
        self.msg_ids.extend(msg_ids)
        self.emitted_at = np.concatenate((self.emitted_at, emitted_at))


@dataclass(slots=True)
class Settlement:
    """Trees that finished: acked, failed, or failed because they timed out."""

    acked: Finished = field(default_factory=Finished)
    failed: Finished = field(default_factory=Finished)
    timed_out: Finished = field(default_factory=Finished)

    def __len__(self) -> int:
        return len(self.acked) + len(self.failed) + len(self.timed_out)


class _Page:
    """The entries of the trees one ``merge_inits`` recorded: sequence numbers ``first`` to ``first + len - 1``."""

    __slots__ = ("alive", "emitted_at", "first", "live", "msg_ids", "stamps", "tasks", "wave")

    def __init__(
        self, first: int, tasks: list[int], msg_ids: list[Any], emitted_at: list[float], epoch: int, wave: int
    ) -> None:
        self.first = first
        self.wave = wave  # the wave the trees' spout tuples went out in
        self.tasks = np.array(tasks, dtype=np.int64)
        self.msg_ids = msg_ids
        self.emitted_at = np.array(emitted_at, dtype=np.float64)
        self.stamps = np.full(len(tasks), epoch, dtype=np.int64)  # the rotation each entry was last refreshed in
        self.alive = np.ones(len(tasks), dtype=bool)
        self.live = len(tasks)

    def take(self, offsets: np.ndarray, into: Finished) -> np.ndarray:
        """Remove the live entries at ``offsets`` into ``into``; returns their spout tasks."""
        offsets = offsets[self.alive[offsets]]
        if len(offsets) == 0:
            return offsets
        self.alive[offsets] = False
        self.live -= len(offsets)
        msg_ids, taken = self.msg_ids, []
        for offset in offsets.tolist():
            taken.append(msg_ids[offset])
            msg_ids[offset] = None
        tasks = self.tasks[offsets]
        into.add(tasks, taken, self.emitted_at[offsets])
        return tasks


class PendingTrees:
    """The trees of some spout tasks, and the acker tasks (ledger partitions) their roots go to.

    Root ``r`` belongs to acker ``r mod num_ackers``. ``ackers`` are the acker tasks here (all of them by
    default): roots are drawn so that every tree started here has its acker here too, so its init and its
    settlement never leave this process, and only the bolts' acks travel to it.
    """

    def __init__(self, num_ackers: int, ackers: list[int] | None = None) -> None:
        self.num_ackers = num_ackers
        self.ackers = sorted(ackers) if ackers is not None else list(range(num_ackers))
        self.ledger = PartitionedLedger(num_ackers)
        self.per_task: dict[int, int] = defaultdict(int)  # spout task -> its trees pending
        self.acker_counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # acker -> [acks merged, settled]
        ids = IdGenerator(np.random.SeedSequence().entropy)  # never shared with a forked process
        prefix = int(ids.next_ids(1)[0]) >> SEQUENCE_BITS << SEQUENCE_BITS
        self._prefix = prefix - prefix % num_ackers  # root - prefix is then the acker, mod num_ackers
        self._local = np.full(num_ackers, -1, dtype=np.int64)  # acker -> its place among ``ackers``
        self._local[self.ackers] = np.arange(len(self.ackers))
        self._ids = ids
        self._pages: dict[int, _Page] = {}  # first sequence number -> page, oldest first
        self._firsts = np.empty(0, dtype=np.int64)  # the pages' first sequence numbers, for lookups
        self._epoch = 0
        self._live = 0
        self.wave = 0  # the wave the trees started now go out in (set by the spout tasks' host)
        # Trees started since the last merge_inits, as columns.
        self._sequence = 1
        self._first_new = 1
        self._tasks: list[int] = []
        self._msg_ids: list[Any] = []
        self._times: list[float] = []

    def __len__(self) -> int:
        return self._live + len(self._tasks)

    def start(self, spout_task: int, msg_id: Any, emitted_at: float) -> int:
        """A new tree; returns its root. Its init message, the XOR of its copies' edges, reaches the ledger with
        ``merge_inits``."""
        sequence = self._sequence
        self._sequence = sequence + 1
        self._tasks.append(spout_task)
        self._msg_ids.append(msg_id)
        self._times.append(emitted_at)
        self.per_task[spout_task] += 1
        return self._root_of(sequence)

    def start_many(self, spout_task: int, msg_ids: Sequence[Any], emitted_at: float) -> list[int]:
        """``start`` for each of ``msg_ids``, emitted together; returns their roots."""
        n = len(msg_ids)
        first = self._sequence
        self._sequence = first + n
        self._tasks.extend([spout_task] * n)
        self._msg_ids.extend(msg_ids)
        self._times.extend([emitted_at] * n)
        self.per_task[spout_task] += n
        return self._roots_of(np.arange(first, first + n, dtype=np.int64)).tolist()

    def _root_of(self, sequence: int) -> int:
        """The ``sequence``-th tree's root: its acker is ``ackers[sequence mod len(ackers)]``."""
        rounds, which = divmod(sequence, len(self.ackers))
        return self._prefix + rounds * self.num_ackers + self.ackers[which]

    def _roots_of(self, sequences: np.ndarray) -> np.ndarray:
        rounds, which = np.divmod(sequences, len(self.ackers))
        offsets = rounds * self.num_ackers + np.asarray(self.ackers, dtype=np.int64)[which]
        return np.uint64(self._prefix) + offsets.astype(np.uint64)

    def _sequences_of(self, roots: np.ndarray) -> np.ndarray:
        """Each root's sequence number; -1 for a root not drawn here."""
        rounds, acker = np.divmod((roots - np.uint64(self._prefix)).astype(np.int64), self.num_ackers)
        local = self._local[acker]
        return np.where(local >= 0, rounds * len(self.ackers) + local, -1)

    def new_edges(self, n: int) -> np.ndarray:
        """``n`` fresh edge ids for copies of spout tuples, as a uint64 array."""
        return self._ids.next_ids(n)

    def get(self, root: int) -> PendingTuple | None:
        """The pending tree ``root``, if it is."""
        sequence = int(self._sequences_of(np.array([root], dtype=np.uint64))[0])
        if sequence < 0:
            return None
        if sequence >= self._first_new:
            offset = sequence - self._first_new
            if offset >= len(self._tasks):
                return None
            return PendingTuple(self._tasks[offset], self._msg_ids[offset], self._times[offset])
        position = int(np.searchsorted(self._firsts, sequence, side="right")) - 1
        if position < 0:
            return None
        page = self._pages[int(self._firsts[position])]
        offset = sequence - page.first
        if offset >= len(page.alive) or not page.alive[offset]:
            return None
        return PendingTuple(int(page.tasks[offset]), page.msg_ids[offset], float(page.emitted_at[offset]))

    def merge_inits(self, roots: np.ndarray, edges: np.ndarray) -> Settlement:
        """Record the trees started since the last call, given every copy of their spout tuples sent: the
        ``(root, edge)`` of each, whose edges XOR to each tree's init message. They must reach the ledger
        before their wave's acks."""
        if not self._tasks:
            return Settlement()
        first, count = self._first_new, len(self._tasks)
        page = _Page(first, self._tasks, self._msg_ids, self._times, self._epoch, self.wave)
        self._pages[first] = page
        self._firsts = np.append(self._firsts, first)
        self._live += count
        copies = AckBatch.reduce(roots, edges)
        inits = np.zeros(count, dtype=np.uint64)
        inits[self._sequences_of(copies.roots) - first] = copies.xors
        self._first_new = self._sequence
        self._tasks, self._msg_ids, self._times = [], [], []
        settlement = Settlement()
        tree_roots = self._roots_of(np.arange(first, first + count, dtype=np.int64))
        self._settle(self.ledger.merge(tree_roots, inits, init_tasks=page.tasks), settlement)
        return settlement

    def merge_acks(self, acks: AckBatch) -> Settlement:
        """One completed wave's acks, fails and timeout resets, already XOR-reduced per root."""
        settlement = Settlement()
        if acks.reset.any():  # reset_timeout: the tree's countdown starts over
            for page, offsets in self._locate(acks.roots[acks.reset]):
                page.stamps[offsets] = self._epoch
        for partition, part in enumerate(acks.by_partition(self.num_ackers)):
            if len(part):
                outcome = self.ledger.partitions[partition].merge(part.roots, part.xors, None, part.failed, part.reset)
                counts = self.acker_counts[partition]
                counts[0] += len(part)
                counts[1] += len(outcome.completed.roots) + len(outcome.failed.roots)
                self._settle(outcome, settlement)
        return settlement

    def rotate(self) -> Settlement:
        """A timeout period passed: trees older than two periods fail as timed out."""
        settlement = Settlement()
        self._take(self.ledger.rotate().roots, settlement.timed_out)
        self._epoch += 1
        for page in list(self._pages.values()):  # trees the acker lost track of
            lost = np.flatnonzero(page.alive & (page.stamps < self._epoch - 1))
            if len(lost):
                self._count_out(page.take(lost, settlement.timed_out))
        self._drop_finished_pages()
        return settlement

    def fail_all(self) -> Settlement:
        """Every recorded pending tree, failed (the topology is stopping: each goes back to its source)."""
        settlement = Settlement()
        for page in list(self._pages.values()):
            self._count_out(page.take(np.flatnonzero(page.alive), settlement.failed))
        self._drop_finished_pages()
        return settlement

    def fail_emitted_after(self, wave: int) -> Settlement:
        """The trees whose spout tuples went out after ``wave``, failed: the workers restart as of ``wave``, and
        the waves after it, dropped, will not ack them. Earlier trees stay pending: the restarted tasks' state
        still holds what their tuples did, and their acks still come (or they time out)."""
        settlement = Settlement()
        for page in [page for page in self._pages.values() if page.wave > wave]:
            offsets = np.flatnonzero(page.alive)
            if len(offsets):
                failing = self._roots_of(page.first + offsets)
                none = np.zeros(len(failing), np.uint64)
                self._settle(self.ledger.merge(failing, none, failed=np.ones(len(failing), bool)), settlement)
        return settlement

    def _settle(self, outcome: Outcome, settlement: Settlement) -> None:
        self._take(outcome.completed.roots, settlement.acked)
        self._take(outcome.failed.roots, settlement.failed)
        self._drop_finished_pages()

    def _locate(self, roots: np.ndarray):
        """``(page, offsets)`` of the recorded trees among ``roots``."""
        if len(roots) == 0 or len(self._firsts) == 0:
            return
        sequences = self._sequences_of(roots)
        roots_here = sequences >= 0
        if not roots_here.all():
            sequences = sequences[roots_here]
        positions = np.searchsorted(self._firsts, sequences, side="right") - 1
        for position in np.unique(positions).tolist():
            if position < 0:
                continue
            page = self._pages[int(self._firsts[position])]
            offsets = sequences[positions == position] - page.first
            yield page, offsets[offsets < len(page.alive)]

    def _take(self, roots: np.ndarray, into: Finished) -> None:
        """The pending entries of ``roots``, removed; a root settled already is skipped."""
        for page, offsets in list(self._locate(roots)):
            self._count_out(page.take(offsets, into))

    def _count_out(self, tasks: np.ndarray) -> None:
        if len(tasks) == 0:
            return
        self._live -= len(tasks)
        spout_tasks, counts = np.unique(tasks, return_counts=True)
        for task, count in zip(spout_tasks.tolist(), counts.tolist(), strict=True):
            self.per_task[task] -= count

    def _drop_finished_pages(self) -> None:
        finished = [first for first, page in self._pages.items() if not page.live]
        if finished:
            for first in finished:
                del self._pages[first]
            self._firsts = np.array(list(self._pages), dtype=np.int64)
