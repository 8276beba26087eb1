"""Pending tuple trees, on the driver: where each tree came from, the acker ledger that settles it, its timeout.

A tree starts when a spout emits with a message id (``start``): its root gets a
``PendingTuple`` (the spout task, the message id and the emit time) and an init
message for the ledger. Each completed wave brings the tasks' acks, XOR-reduced
per root (``merge_acks``); a timeout rotation expires the trees that took too
long (``rotate``). Every one of these returns a ``Settlement``: the pending
entries of the trees that just finished, and how. Calling the spouts' ``ack``
and ``fail`` is the spout host's business (``spouts.py``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from squall.reliability.ids import IdGenerator
from squall.reliability.ledger import Outcome, PartitionedLedger
from squall.reliability.rotating_map import RotatingMap
from squall.spark.acks import AckBatch


@dataclass(slots=True)
class PendingTuple:
    spout_task: int
    msg_id: Any
    emitted_at: float


@dataclass(slots=True)
class Settlement:
    """Trees that finished: acked, failed, or failed because they timed out."""

    acked: list[PendingTuple] = field(default_factory=list)
    failed: list[PendingTuple] = field(default_factory=list)
    timed_out: list[PendingTuple] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.acked) + len(self.failed) + len(self.timed_out)


class PendingTrees:
    def __init__(self, num_ackers: int) -> None:
        self.num_ackers = num_ackers
        self.ledger = PartitionedLedger(num_ackers)
        self.pending: RotatingMap[int, PendingTuple] = RotatingMap(2)
        self.per_task: dict[int, int] = defaultdict(int)  # spout task -> its trees pending
        self._next_id = IdGenerator(np.random.SeedSequence().entropy).seeded_source()  # the driver never forks
        self._inits: list[tuple[int, int, int]] = []  # (root, XOR of its copies' edges, spout task)

    def __len__(self) -> int:
        return len(self.pending)

    def start(self, spout_task: int, msg_id: Any, emitted_at: float, copies: int) -> tuple[int, list[int]]:
        """A new tree of ``copies`` spout tuple copies: its root, and the edge id each copy carries.

        The init message, the XOR of the copies' edges, reaches the ledger with ``merge_inits``.
        """
        next_id = self._next_id
        root = next_id()
        if copies == 1:
            init = next_id()
            edges = [init]
        else:
            edges = [next_id() for _ in range(copies)]
            init = 0
            for edge in edges:
                init ^= edge
        self._inits.append((root, init, spout_task))
        self.pending.put_new(root, PendingTuple(spout_task, msg_id, emitted_at))
        self.per_task[spout_task] += 1
        return root, edges

    def merge_inits(self) -> Settlement:
        """Record the trees started since the last call; they must reach the ledger before their wave's acks."""
        if not self._inits:
            return Settlement()
        inits = np.array(self._inits, dtype=np.uint64)
        self._inits = []
        settlement = Settlement()
        self._settle(self.ledger.merge(inits[:, 0], inits[:, 1], init_tasks=inits[:, 2].astype(np.int64)), settlement)
        return settlement

    def merge_acks(self, acks: AckBatch) -> Settlement:
        """One completed wave's acks, fails and timeout resets, already XOR-reduced per root."""
        settlement = Settlement()
        for partition, part in enumerate(acks.by_partition(self.num_ackers)):
            if not len(part):
                continue
            for root in part.roots[part.reset].tolist():  # reset_timeout: the tree's countdown starts over
                entry = self.pending.get(root)
                if entry is not None:
                    self.pending.put(root, entry)
            outcome = self.ledger.partitions[partition].merge(part.roots, part.xors, None, part.failed, part.reset)
            self._settle(outcome, settlement)
        return settlement

    def rotate(self) -> Settlement:
        """A timeout period passed: trees older than two periods fail as timed out."""
        settlement = Settlement()
        self._take(self.ledger.rotate().roots.tolist(), settlement.timed_out)
        lost = list(self.pending.rotate().values())  # trees the acker lost track of
        for entry in lost:
            self.per_task[entry.spout_task] -= 1
        settlement.timed_out.extend(lost)
        return settlement

    def _settle(self, outcome: Outcome, settlement: Settlement) -> None:
        self._take(outcome.completed.roots.tolist(), settlement.acked)
        self._take(outcome.failed.roots.tolist(), settlement.failed)

    def _take(self, roots: list[int], into: list[PendingTuple]) -> None:
        """The pending entries of ``roots``, removed; a root settled already is skipped."""
        remove, per_task = self.pending.remove, self.per_task
        for root in roots:
            entry = remove(root)
            if entry is not None:
                per_task[entry.spout_task] -= 1
                into.append(entry)
