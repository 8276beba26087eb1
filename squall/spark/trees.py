"""Pending tuple trees, where their spout tasks run: where each tree came from, and the acker tasks that settle
them.

A tree starts when a spout emits with a message id (``start``). Its root is a random prefix plus a number derived
from a sequence number and its acker task, so the root itself says where the tree's entry is: entries live in
columns, one ``_Page`` per wave of new trees (the spout task, the message id, the emit time), and nothing is
allocated per tree beyond the message id the spout gave. The acker tasks here (``squall/reliability/acker.py``,
one ``Acker`` each) get the trees' inits (``merge_inits``), each completed wave's acks (``merge_acks``) and the
timeout rotations (``rotate``); what they settle comes back as one ``Settlement``, each tree given its message id
and emit time from its page. Calling the spouts' ``ack`` and ``fail`` is the spout host's business
(``spouts.py``). The ackers' buckets are the one timeout: a tree is pending here exactly as long as its acker
holds it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from squall.reliability.acker import FAILED, NOTHING, Acker, Acks, Init, Rotate, Settlement, Withdraw
from squall.reliability.acks import AckBatch, acker_partition
from squall.reliability.ids import IdGenerator

SEQUENCE_BITS = 40  # trees per run before roots repeat: about 10^12


@dataclass(frozen=True, slots=True)
class PendingTuple:
    spout_task: int
    msg_id: Any
    emitted_at: float


class _Page:
    """The entries of the trees one ``merge_inits`` recorded: sequence numbers ``first`` to ``first + len - 1``."""

    __slots__ = ("alive", "emitted_at", "first", "live", "msg_ids", "tasks", "wave")

    def __init__(self, first: int, tasks: list[int], msg_ids: list[Any], emitted_at: list[float], wave: int) -> None:
        self.first = first
        self.wave = wave  # the wave the trees' spout tuples went out in
        self.tasks = np.array(tasks, dtype=np.int64)
        self.msg_ids = msg_ids
        self.emitted_at = np.array(emitted_at, dtype=np.float64)
        self.alive = np.ones(len(tasks), dtype=bool)
        self.live = len(tasks)

    def take(self, offsets: np.ndarray, roots: np.ndarray, how: np.ndarray) -> Settlement:
        """The live entries at ``offsets`` (of ``roots``, finished ``how``), removed."""
        self.alive[offsets] = False
        self.live -= len(offsets)
        msg_ids, taken = self.msg_ids, []
        for offset in offsets.tolist():
            taken.append(msg_ids[offset])
            msg_ids[offset] = None
        return Settlement(roots, self.tasks[offsets], how, taken, self.emitted_at[offsets])


class PendingTrees:
    """The trees of some spout tasks, and the acker tasks their roots go to.

    Root ``r`` belongs to acker task ``r mod num_ackers``. ``ackers`` are the acker tasks here (all of them by
    default): roots are drawn so that every tree started here has its acker here too, so its init and its
    settlement never leave this process, and only the bolts' acks travel to it.
    """

    def __init__(self, num_ackers: int, ackers: list[int] | None = None) -> None:
        self.num_ackers = num_ackers
        here = sorted(ackers) if ackers is not None else list(range(num_ackers))
        self.ackers = {task: Acker(task) for task in here}  # the acker tasks here
        self.per_task: dict[int, int] = defaultdict(int)  # spout task -> its trees pending
        self._reported = {task: (0, 0) for task in here}  # each acker's counters as last taken
        ids = IdGenerator(np.random.SeedSequence().entropy)  # never shared with a forked process
        prefix = int(ids.next_ids(1)[0]) >> SEQUENCE_BITS << SEQUENCE_BITS
        self._prefix = prefix - prefix % num_ackers  # root - prefix is then the acker, mod num_ackers
        self._local = np.full(num_ackers, -1, dtype=np.int64)  # acker -> its place among ``ackers``
        self._here = np.array(here, dtype=np.int64)
        self._here_list = here
        self._local[self._here] = np.arange(len(here))
        self._ids = ids
        self._pages: dict[int, _Page] = {}  # first sequence number -> page, oldest first
        self._firsts = np.empty(0, dtype=np.int64)  # the pages' first sequence numbers, for lookups
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
        """A new tree; returns its root. Its init message, the XOR of its copies' edges, reaches its acker
        with ``merge_inits``."""
        return self._root_of(self.begin(spout_task, msg_id, emitted_at))

    def begin(self, spout_task: int, msg_id: Any, emitted_at: float) -> int:
        """``start``, returning the tree's sequence number (1 or more) rather than its root: a small integer,
        made into the root with the rest of its wave's by ``roots_of``."""
        sequence = self._sequence
        self._sequence = sequence + 1
        self._tasks.append(spout_task)
        self._msg_ids.append(msg_id)
        self._times.append(emitted_at)
        self.per_task[spout_task] += 1
        return sequence

    def begin_many(self, spout_task: int, msg_ids: Sequence[Any], emitted_at: float) -> list[int]:
        """``begin`` for each of ``msg_ids``, emitted together; returns their sequence numbers."""
        n = len(msg_ids)
        first = self._sequence
        self._sequence = first + n
        self._tasks.extend([spout_task] * n)
        self._msg_ids.extend(msg_ids)
        self._times.extend([emitted_at] * n)
        self.per_task[spout_task] += n
        return list(range(first, first + n))

    def roots_of(self, sequences: np.ndarray) -> np.ndarray:
        """The roots of the trees ``begin`` numbered ``sequences``, as uint64; 0 stays 0 (a row in no tree)."""
        sequences = np.asarray(sequences, dtype=np.int64)
        return np.where(sequences > 0, self._roots_of(sequences), np.uint64(0))

    def _root_of(self, sequence: int) -> int:
        """The ``sequence``-th tree's root: its acker is ``ackers[sequence mod len(ackers)]``."""
        here = self._here_list
        rounds, which = divmod(sequence, len(here))
        return self._prefix + rounds * self.num_ackers + here[which]

    def _roots_of(self, sequences: np.ndarray) -> np.ndarray:
        rounds, which = np.divmod(sequences, len(self._here))
        offsets = rounds * self.num_ackers + self._here[which]
        return np.uint64(self._prefix) + offsets.astype(np.uint64)

    def _sequences_of(self, roots: np.ndarray) -> np.ndarray:
        """Each root's sequence number; -1 for a root not drawn here."""
        rounds, acker = np.divmod((roots - np.uint64(self._prefix)).astype(np.int64), self.num_ackers)
        local = self._local[acker]
        return np.where(local >= 0, rounds * len(self._here) + local, -1)

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
        ``(root, edge)`` of each, whose edges XOR to each tree's init message. They must reach the ackers before
        their wave's acks."""
        if not self._tasks:
            return NOTHING
        first, count = self._first_new, len(self._tasks)
        page = _Page(first, self._tasks, self._msg_ids, self._times, self.wave)
        self._pages[first] = page
        self._firsts = np.append(self._firsts, first)
        self._live += count
        copies = AckBatch.reduce(roots, edges)
        inits = np.zeros(count, dtype=np.uint64)
        inits[self._sequences_of(copies.roots) - first] = copies.xors
        self._first_new = self._sequence
        self._tasks, self._msg_ids, self._times = [], [], []
        tree_roots = self._roots_of(np.arange(first, first + count, dtype=np.int64))
        if len(self.ackers) == 1:
            (acker,) = self.ackers.values()
            return self._resolve(acker.handle(Init(tree_roots, inits, page.tasks)))
        owner = acker_partition(tree_roots, self.num_ackers)
        settled = []
        for task, acker in self.ackers.items():
            mine = owner == task
            settled.append(acker.handle(Init(tree_roots[mine], inits[mine], page.tasks[mine])))
        return self._resolve(Settlement.concat(settled))

    def merge_acks(self, acks: AckBatch) -> Settlement:
        """One completed wave's acks, fails and timeout resets, already XOR-reduced per root."""
        if len(self.ackers) == 1:  # the bolts send a worker only the acks of its acker tasks' roots
            (acker,) = self.ackers.values()
            return self._resolve(acker.handle(Acks(acks)))
        parts = acks.by_partition(self.num_ackers)
        settled = [acker.handle(Acks(parts[task])) for task, acker in self.ackers.items() if len(parts[task])]
        return self._resolve(Settlement.concat(settled))

    def withdraw_acks(self, acks: AckBatch) -> Settlement:
        """Acks merged before a worker loss taken back out of the trees still pending: their wave runs again."""
        parts = acks.by_partition(self.num_ackers) if len(self.ackers) > 1 else None
        settled = []
        for task, acker in self.ackers.items():
            part = acks if parts is None else parts[task]
            if len(part):
                settled.append(acker.handle(Withdraw(part)))
        return self._resolve(Settlement.concat(settled))

    def rotate(self) -> Settlement:
        """A timeout period passed: the trees pending for two periods since their last start or reset fail as
        timed out."""
        return self._resolve(Settlement.concat([acker.handle(Rotate()) for acker in self.ackers.values()]))

    def fail_all(self) -> Settlement:
        """Every recorded pending tree, failed (the topology is stopping: each goes back to its source)."""
        settled = []
        for page in list(self._pages.values()):
            offsets = np.flatnonzero(page.alive)
            roots = self._roots_of(page.first + offsets)
            settled.append(page.take(offsets, roots, np.full(len(offsets), FAILED, np.uint8)))
        return self._taken(Settlement.concat(settled))

    def take_acker_counts(self) -> dict[int, tuple[int, int]]:
        """Each acker task's acks merged and trees settled since the last call, where either moved."""
        counts = {}
        for task, acker in self.ackers.items():
            now, before = (acker.acks_merged, acker.settled), self._reported[task]
            if now != before:
                counts[task] = (now[0] - before[0], now[1] - before[1])
                self._reported[task] = now
        return counts

    def _resolve(self, settled: Settlement) -> Settlement:
        """The trees the ackers ``settled``, each with its message id and emit time, taken out of their pages. An
        acker settles a root once, and holds every tree pending here (``fail_all`` aside, after which nothing
        runs): so each is found, alive, in its page."""
        if not len(settled):
            return NOTHING
        taken = []
        for page, offsets, rows in self._locate(settled.roots):
            taken.append(page.take(offsets, settled.roots[rows], settled.how[rows]))
        return self._taken(Settlement.concat(taken))

    def _taken(self, settlement: Settlement) -> Settlement:
        if len(settlement):
            self._live -= len(settlement)
            spout_tasks, counts = np.unique(settlement.tasks, return_counts=True)
            for task, count in zip(spout_tasks.tolist(), counts.tolist(), strict=True):
                self.per_task[task] -= count
            self._drop_finished_pages()
        return settlement

    def _locate(self, roots: np.ndarray) -> Iterator[tuple[_Page, np.ndarray, np.ndarray]]:
        """``(page, offsets, rows)`` of the recorded trees among ``roots``: ``roots[rows]`` are at ``offsets``."""
        if len(roots) == 0 or len(self._firsts) == 0:
            return
        sequences = self._sequences_of(roots)
        positions = np.searchsorted(self._firsts, sequences, side="right") - 1
        positions[sequences < 0] = -1
        for position in np.unique(positions).tolist():
            if position < 0:
                continue
            page = self._pages[int(self._firsts[position])]
            rows = np.flatnonzero(positions == position)
            offsets = sequences[rows] - page.first
            inside = offsets < len(page.alive)
            yield page, offsets[inside], rows[inside]

    def _drop_finished_pages(self) -> None:
        finished = [first for first, page in self._pages.items() if not page.live]
        if finished:
            for first in finished:
                del self._pages[first]
            self._firsts = np.array(list(self._pages), dtype=np.int64)
