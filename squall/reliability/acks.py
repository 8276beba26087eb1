"""Acks, and the edges they cancel: the half of the XOR acker that runs where the tuples are.

A tuple copy sent to a task carries, for its tree, a random 64-bit edge id; the acker keeps per root the XOR of
every edge it has been told about (``acker.py``). Here:

* ``draw_edges``: the one routine that seals a batch's rows into their trees. Each row in a tree gets a fresh
  edge, drawn all at once, and the ``(root, edge)`` pairs that enter the trees are returned, for the sender to
  XOR in (a spout's as its trees' inits, a bolt's with its wave's acks);
* ``AckBatch``: a task's acks, fails and ``reset_timeout`` calls of one wave, XOR-folded to one row per root
  (values XORed, flags ORed), in time linear in the rows (``_xor_fold.pyx`` in C, else Arrow's dictionary
  encoding); ``by_partition`` splits it by acker task (``root mod topology.acker.executors``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

ACK, FAIL, RESET = 0, 1, 2
try:  # acks folded per root, and split by acker task, in C (setup.py builds it where a compiler is)
    from squall.reliability._xor_fold import split_by_partition as _split_by_partition
    from squall.reliability._xor_fold import xor_fold as _xor_fold
except ImportError:
    _xor_fold = _split_by_partition = None
RUN_FOLD_SHARE = 4  # runs of one root are folded before hashing when a quarter of the rows or more repeat the last


@dataclass(frozen=True, slots=True)
class AckBatch:
    """A task's acks, fails and timeout resets of one wave, one row per root."""

    roots: np.ndarray  # uint64
    xors: np.ndarray  # uint64
    failed: np.ndarray  # bool
    reset: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.roots)

    def __reduce__(self) -> tuple:  # its columns in order, without their names: the frames stay small
        return AckBatch, (self.roots, self.xors, self.failed, self.reset)

    @classmethod
    def empty(cls) -> AckBatch:
        return cls(np.empty(0, np.uint64), np.empty(0, np.uint64), np.empty(0, bool), np.empty(0, bool))

    @classmethod
    def reduce(
        cls, roots: np.ndarray, xors: np.ndarray, failed: np.ndarray | None = None, reset: np.ndarray | None = None
    ) -> AckBatch:
        """Rows with repeated roots folded into one: values XORed, flags ORed (no flags: none set).

        Acks alone go to one call into C (``_xor_fold``), which folds runs of one root (a tuple's children,
        emitted and acked one after the other) as it meets them and hashes the rest. With failed or reset flags,
        runs are folded first when they are common, and the rows left are grouped by Arrow's dictionary
        encoding. Either way the time is linear in the rows, and the roots come out in order of first appearance.
        """
        if len(roots) == 0:
            return cls.empty()
        failed = failed if failed is not None and failed.any() else None
        reset = reset if reset is not None and reset.any() else None
        if failed is None and reset is None and _xor_fold is not None:  # acks only: one call into C
            folded = _xor_fold(np.ascontiguousarray(roots, np.uint64), np.ascontiguousarray(xors, np.uint64))
            if folded is not None:  # else a root is 0: folded below
                unique, values = folded
                return cls(unique, values, np.zeros(len(unique), bool), np.zeros(len(unique), bool))
        repeats = roots[1:] == roots[:-1]
        if np.count_nonzero(repeats) * RUN_FOLD_SHARE >= len(roots):
            starts = np.flatnonzero(np.concatenate(([True], ~repeats)))
            roots, xors = roots[starts], np.bitwise_xor.reduceat(xors, starts)
            failed = None if failed is None else np.logical_or.reduceat(failed, starts)
            reset = None if reset is None else np.logical_or.reduceat(reset, starts)
        encoded = pa.array(roots, pa.uint64()).dictionary_encode()
        slot = encoded.indices.to_numpy()
        unique = encoded.dictionary.to_numpy()
        folded = np.zeros(len(unique), np.uint64)
        np.bitwise_xor.at(folded, slot, xors)
        any_failed = np.zeros(len(unique), bool)
        if failed is not None:
            any_failed[slot[failed]] = True
        any_reset = np.zeros(len(unique), bool)
        if reset is not None:
            any_reset[slot[reset]] = True
        return cls(unique, folded, any_failed, any_reset)

    @classmethod
    def from_messages(cls, roots, values, kinds) -> AckBatch:
        """One row per message (lists or arrays): ``kinds`` are ``ACK``, ``FAIL`` or ``RESET``."""
        kind = np.asarray(kinds, np.uint8)
        return cls.reduce(
            np.asarray(roots, np.uint64).reshape(-1),
            np.asarray(values, np.uint64).reshape(-1),
            kind == FAIL,
            kind == RESET,
        )

    @classmethod
    def from_acks(cls, roots: np.ndarray, edges: np.ndarray, failed: list[int], reset: list[int]) -> AckBatch:
        """``(root, edge)`` ack rows (uint64 arrays), then the roots of ``fail`` and of ``reset_timeout`` calls."""
        if not failed and not reset:
            return cls.reduce(roots, edges)
        flagged = np.array(failed + reset, np.uint64)
        kinds = np.zeros(len(roots) + len(flagged), np.uint8)
        kinds[len(roots) : len(roots) + len(failed)] = FAIL
        kinds[len(roots) + len(failed) :] = RESET
        return cls.from_messages(
            np.concatenate([roots, flagged]), np.concatenate([edges, np.zeros(len(flagged), np.uint64)]), kinds
        )

    @classmethod
    def combine(cls, batches: Iterable[AckBatch]) -> AckBatch:
        batches = [b for b in batches if len(b)]
        if not batches:
            return cls.empty()
        if len(batches) == 1:
            return batches[0]
        columns = zip(*((b.roots, b.xors, b.failed, b.reset) for b in batches), strict=True)
        return cls.reduce(*(np.concatenate(c) for c in columns))

    def by_partition(self, partitions: int) -> list[AckBatch]:
        """The rows of each acker task (``acker_partition``), of ``partitions``."""
        if partitions < 1:
            raise ValueError(f"by_partition: {partitions} acker tasks")
        if partitions == 1:
            return [self]
        if _split_by_partition is not None:
            columns = _split_by_partition(
                *(np.ascontiguousarray(c, np.uint64) for c in (self.roots, self.xors)),
                *(np.ascontiguousarray(c, bool).view(np.uint8) for c in (self.failed, self.reset)),
                partitions,
            )
            if isinstance(columns, int):  # all in one: the usual case, the trees' acker tasks on one worker
                return [self if p == columns else _EMPTY for p in range(partitions)]
            return [AckBatch(*c) for c in columns]
        which = acker_partition(self.roots, partitions)
        return [
            AckBatch(self.roots[m], self.xors[m], self.failed[m], self.reset[m])
            for m in (which == p for p in range(partitions))
        ]


_EMPTY = AckBatch.empty()  # shared by the parts a split leaves empty: read only
for _column in (_EMPTY.roots, _EMPTY.xors, _EMPTY.failed, _EMPTY.reset):
    _column.setflags(write=False)


def acker_partition(roots, num_ackers: int) -> np.ndarray:
    """The acker task of each root: ``root mod num_ackers`` (``topology.acker.executors``)."""
    return (np.asarray(roots, dtype=np.uint64) % np.uint64(num_ackers)).astype(np.intp)


def draw_edges(roots: np.ndarray, next_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sealed batch's edge ids, one per row: a fresh one (``next_ids(n)`` draws ``n``) for each row in a tree
    (root not 0), 0 for the others. Returns ``(edges, roots in a tree, their edges)``: the pairs that enter
    their trees."""
    in_tree = roots != 0
    count = int(np.count_nonzero(in_tree))
    if count == len(roots):  # every row in one tree: the common case
        edges = next_ids(count)
        return edges, roots, edges
    edges = np.zeros(len(roots), dtype=np.uint64)
    if not count:
        return edges, roots[in_tree], edges[in_tree]
    fresh = next_ids(count)
    edges[in_tree] = fresh
    return edges, roots[in_tree], fresh
