"""Ack messages as they leave a bolt task: XOR-reduced per root, vectorized, inside the task's report.

A task's collector buffers ``(root, value, kind)`` for every ack, fail and
``reset_timeout``; at the end of the wave they become one ``AckBatch`` with a
row per root (values XORed, fail and reset flags ORed). The driver reduces the
batches of all tasks again (a root may be in several tasks) and hands each
acker partition (``root mod topology.acker.executors``) its rows. No shuffle
carries acks: they ride in the task reports the wave's job returns, which the
driver reads once per (wave, task).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

ACK, FAIL, RESET = 0, 1, 2


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One row per root."""

    roots: np.ndarray  # uint64
    xors: np.ndarray  # uint64
    failed: np.ndarray  # bool
    reset: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.roots)

    @classmethod
    def empty(cls) -> AckBatch:
        return cls(np.empty(0, np.uint64), np.empty(0, np.uint64), np.empty(0, bool), np.empty(0, bool))

    @classmethod
    def reduce(cls, roots: np.ndarray, xors: np.ndarray, failed: np.ndarray, reset: np.ndarray) -> AckBatch:
        """Rows with repeated roots folded into one: values XORed, flags ORed.

        Rows are grouped by hashing (Arrow's dictionary encoding), in time linear in the rows, then XORed
        into their root's slot; the roots come out in order of first appearance.
        """
        if len(roots) == 0:
            return cls.empty()
        encoded = pa.array(roots, pa.uint64()).dictionary_encode()
        slot = encoded.indices.to_numpy()
        unique = encoded.dictionary.to_numpy()
        folded = np.zeros(len(unique), np.uint64)
        np.bitwise_xor.at(folded, slot, xors)
        any_failed = np.zeros(len(unique), bool)
        any_failed[slot[failed]] = True
        any_reset = np.zeros(len(unique), bool)
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
    def combine(cls, batches: Iterable[AckBatch]) -> AckBatch:
        batches = [b for b in batches if len(b)]
        if not batches:
            return cls.empty()
        if len(batches) == 1:
            return batches[0]
        columns = zip(*((b.roots, b.xors, b.failed, b.reset) for b in batches), strict=True)
        return cls.reduce(*(np.concatenate(c) for c in columns))

    def by_partition(self, partitions: int) -> list[AckBatch]:
        """The rows of each acker partition (``root mod partitions``)."""
        which = self.roots % np.uint64(partitions)
        return [
            AckBatch(self.roots[m], self.xors[m], self.failed[m], self.reset[m])
            for m in (which == np.uint64(p) for p in range(partitions))
        ]
