"""Random non-zero 64-bit ids for tuples and edges.

Ids come from numpy's PCG64, seeded from the operating system's entropy pool.
The generator notices when it runs in a forked child (as Spark's Python workers
are) and reseeds, so two processes never hand out the same sequence.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import numpy as np

_BLOCK = 4096


class IdGenerator:
    """Hands out random 64-bit ids, never 0 (0 is the XOR of a completed tree)."""

    def __init__(self, seed: int | None = None) -> None:
        self._seed = seed
        self._pid = -1
        self._buffer: list[int] = []

    def _reseed_if_forked(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._rng = np.random.Generator(np.random.PCG64(self._seed))
            self._buffer = []

    def next_id(self) -> int:
        if not self._buffer or (self._seed is None and os.getpid() != self._pid):
            self._buffer = self.next_ids(_BLOCK).tolist()  # next_ids reseeds in a forked child
        return self._buffer.pop()

    def _blocks(self) -> Iterator[list[int]]:
        while True:
            yield self.next_ids(_BLOCK).tolist()

    def seeded_source(self) -> Callable[[], int]:
        """``next_id`` for a seeded generator, as a C-level iterator's ``__next__``: the cheapest call there is,
        for one id per emitted tuple. Ids come from the same sequence ``next_ids`` draws from."""
        if self._seed is None:
            raise ValueError("seeded_source() needs a seeded IdGenerator: it does not check for a fork")
        return itertools.chain.from_iterable(self._blocks()).__next__

    def next_ids(self, n: int) -> np.ndarray:
        """``n`` ids as a uint64 array."""
        self._reseed_if_forked()
        return self._rng.integers(1, 2**64, size=n, dtype=np.uint64, endpoint=False)


_default = IdGenerator()


def new_id() -> int:
    """A fresh random non-zero 64-bit id from the process-wide generator."""
    return _default.next_id()
