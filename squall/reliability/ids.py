"""Random non-zero 64-bit ids for tuples and edges.

Ids come from numpy's PCG64, seeded from the operating system's entropy pool, or from a seed for a stream that
must come out the same again (a bolt task's wave run again). They are drawn a block at a time, as raw 64-bit
words, and handed out in order: the *i*-th id a generator gives is the same however many each call asked for,
and a call costs a slice, not a draw (numpy's ``integers`` spends several microseconds on its arguments alone,
which a batch of a few rows pays in full). A generator in a forked child (Spark's Python workers are forked)
starts again: an unseeded one from fresh entropy, so two processes never hand out the same ids, and a seeded
one from its seed.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Callable, Iterator

import numpy as np

_BLOCK = 4096  # ids drawn at a time for ``next_id`` and ``seeded_source``
_FIRST_DRAW, _DRAW = 1024, 65536  # raw words ``next_ids`` draws at a time: doubling from the first to the most

_live: weakref.WeakSet[IdGenerator] = weakref.WeakSet()


def _forked() -> None:
    for generator in list(_live):
        generator._lock = threading.Lock()  # a thread of the parent may have held it at the fork
        generator._start()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class IdGenerator:
    """Hands out random 64-bit ids, never 0 (0 is the XOR of a completed tree). Threads may share one: no two
    calls get the same ids. A copy (pickled, as a component shipped to the workers is) starts again from its
    seed, or from fresh entropy when it has none, as a forked child does."""

    def __init__(self, seed: int | list[int] | None = None) -> None:
        self._seed = seed
        self._lock = threading.Lock()
        self._start()
        _live.add(self)

    def __reduce__(self) -> tuple:
        return IdGenerator, (self._seed,)

    def _start(self) -> None:
        self._bits = np.random.PCG64(self._seed)
        self._drawn = np.empty(0, np.uint64)
        self._position = 0
        self._draw = _FIRST_DRAW  # a bolt task's generator lives one wave: it may need a few ids only
        self._buffer: list[int] = []

    def next_id(self) -> int:
        with self._lock:
            if self._buffer:
                return self._buffer.pop()
        ids = self.next_ids(_BLOCK).tolist()[::-1]  # popped from the end: in the order drawn
        with self._lock:
            self._buffer = ids + self._buffer  # another thread's block, if it took one meanwhile, goes first
            return self._buffer.pop()

    def _blocks(self) -> Iterator[list[int]]:
        while True:
            yield self.next_ids(_BLOCK).tolist()

    def seeded_source(self) -> Callable[[], int]:
        """``next_id`` for a seeded generator, as a C-level iterator's ``__next__``: the cheapest call there is,
        for one id per emitted tuple. Ids come from the same sequence ``next_ids`` draws from."""
        if self._seed is None:
            raise ValueError("seeded_source() needs a seeded IdGenerator: an unseeded one's ids are next_id's")
        return itertools.chain.from_iterable(self._blocks()).__next__

    def next_ids(self, n: int) -> np.ndarray:
        """The next ``n`` ids, as a uint64 array of their own."""
        with self._lock:
            position = self._position
            if position + n > len(self._drawn):  # the rest of this block, then a new one
                fresh = self._bits.random_raw(max(self._draw, n)).astype(np.uint64, copy=False)
                self._draw = min(2 * self._draw, _DRAW)
                fresh[fresh == 0] = 1  # one word in 2**64
                self._drawn, position = np.concatenate([self._drawn[position:], fresh]), 0
            self._position = position + n
            return self._drawn[position : position + n].copy()  # so that no batch holds the whole block


_default = IdGenerator()


def new_id() -> int:
    """A fresh random non-zero 64-bit id from the process-wide generator."""
    return _default.next_id()
