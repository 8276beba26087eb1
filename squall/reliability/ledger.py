"""The acker ledger: pending tuple trees, one XOR value each, in 19 bytes a root.

A pure state machine. Acks go in (already XOR-reduced per root, as numpy
arrays); completed, failed and expired roots come out. No Spark, no threads.

Per pending root the ledger keeps, in parallel numpy columns:

* ``keys``  uint64  the root id
* ``vals``  uint64  XOR of every edge id seen for the root so far
* ``tasks`` uint16  the spout task that emitted the root (``UNKNOWN_TASK`` until its init)
* ``state`` uint8   bits 0-5: the rotation at which the root last entered the
  newest timeout bucket; bit 6: failed; bit 7: removed (a tombstone)

Timeouts follow Storm's RotatingMap exactly: a root enters the newest bucket when
it first appears and when its timeout is reset, and expires on the
``num_buckets``-th ``rotate()`` after that.

Storage is two sorted runs: a large ``main`` run and a small ``delta`` run that
takes new roots. Lookups are binary searches; settled roots become tombstones.
When the delta or the tombstones pass an eighth of the ledger, the runs are
merged into a fresh ``main``. The ledger never holds more than 8/7 of its live
entries, so it costs at most 19 * 8 / 7 < 22 bytes per pending root.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNKNOWN_TASK = 0xFFFF
MAX_SPOUT_TASK = UNKNOWN_TASK - 1
_STAMP = np.uint8(0x3F)
_FAILED = np.uint8(0x40)
_DEAD = np.uint8(0x80)
_MIN_COMPACTION = 4096

_EMPTY_U64 = np.empty(0, dtype=np.uint64)
_EMPTY_I64 = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class Settled:
    """Roots settled one way, with the spout task each must be reported to."""

    roots: np.ndarray  # uint64
    tasks: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.roots)

    def pairs(self) -> list[tuple[int, int]]:
        """``[(spout_task, root), ...]``"""
        return list(zip(self.tasks.tolist(), self.roots.tolist(), strict=True))

    @staticmethod
    def concat(parts: list[Settled]) -> Settled:
        if not parts:
            return NOTHING
        return Settled(np.concatenate([p.roots for p in parts]), np.concatenate([p.tasks for p in parts]))


NOTHING = Settled(_EMPTY_U64, _EMPTY_I64)


@dataclass(frozen=True)
class Outcome:
    """What one merge settled. Failed roots have the reason ``failed``."""

    completed: Settled
    failed: Settled


@dataclass(frozen=True)
class LedgerEntry:
    value: int
    spout_task: int | None
    failed: bool
    age: int  # rotations since the root last entered the newest bucket


class _Run:
    """One sorted run of ledger columns."""

    __slots__ = ("keys", "state", "tasks", "vals")

    def __init__(self, keys, vals, tasks, state) -> None:
        self.keys, self.vals, self.tasks, self.state = keys, vals, tasks, state

    @classmethod
    def empty(cls) -> _Run:
        return cls(
            _EMPTY_U64.copy(),
            _EMPTY_U64.copy(),
            np.empty(0, np.uint16),
            np.empty(0, np.uint8),
        )

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.vals.nbytes + self.tasks.nbytes + self.state.nbytes

    def locate(self, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the live ``roots`` found here, and the mask of which were found."""
        if len(self.keys) == 0 or len(roots) == 0:
            return np.empty(0, np.intp), np.zeros(len(roots), bool)
        pos = np.searchsorted(self.keys, roots)
        np.minimum(pos, len(self.keys) - 1, out=pos)
        hit = (self.keys[pos] == roots) & ((self.state[pos] & _DEAD) == 0)
        return pos[hit], hit

    def live(self) -> _Run:
        keep = (self.state & _DEAD) == 0
        if keep.all():
            return self
        return _Run(self.keys[keep], self.vals[keep], self.tasks[keep], self.state[keep])

    def merged_with(self, other: _Run) -> _Run:
        """A sorted run holding both runs' entries (their keys must be disjoint)."""
        if len(other) == 0:
            return self
        if len(self) == 0:
            return other
        slots = np.searchsorted(self.keys, other.keys) + np.arange(len(other))
        mine = np.ones(len(self) + len(other), bool)
        mine[slots] = False
        columns = []
        for a, b in zip(self.columns(), other.columns(), strict=True):
            out = np.empty(len(mine), a.dtype)
            out[slots] = b
            out[mine] = a
            columns.append(out)
        return _Run(*columns)

    def columns(self) -> tuple[np.ndarray, ...]:
        return self.keys, self.vals, self.tasks, self.state


def _settle(vals: np.ndarray, tasks: np.ndarray, state: np.ndarray):
    """Masks of entries that are complete and that are failed, in Storm's order."""
    known = tasks != UNKNOWN_TASK
    complete = known & (vals == 0)
    failed = known & ~complete & ((state & _FAILED) != 0)
    return complete, failed


class AckLedger:
    """Pending tuple trees of one acker partition."""

    def __init__(self, num_buckets: int = 2) -> None:
        if not isinstance(num_buckets, int) or not 2 <= num_buckets <= int(_STAMP):
            raise ValueError(f"num_buckets must be an int in [2, {int(_STAMP)}], got {num_buckets!r}")
        self.num_buckets = num_buckets
        self._epoch = 0
        self._main = _Run.empty()
        self._delta = _Run.empty()
        self._live = 0
        self.orphans_expired = 0  # roots that expired before their init arrived

    # -- queries -------------------------------------------------------------
    def __len__(self) -> int:
        return self._live

    size = __len__

    @property
    def nbytes(self) -> int:
        """Bytes held by the ledger's columns."""
        return self._main.nbytes + self._delta.nbytes

    def entry(self, root: int) -> LedgerEntry | None:
        key = np.array([root], np.uint64)
        for run in (self._main, self._delta):
            pos, _ = run.locate(key)
            if len(pos):
                i = pos[0]
                task = int(run.tasks[i])
                stamp = int(run.state[i] & _STAMP)
                return LedgerEntry(
                    value=int(run.vals[i]),
                    spout_task=None if task == UNKNOWN_TASK else task,
                    failed=bool(run.state[i] & _FAILED),
                    age=(self._epoch - stamp) & int(_STAMP),
                )
        return None

    def __contains__(self, root: int) -> bool:
        return self.entry(root) is not None

    def pending_roots(self) -> np.ndarray:
        return np.sort(np.concatenate([r.live().keys for r in (self._main, self._delta)]))

    # -- per-message path ----------------------------------------------------
    def init(self, root: int, value: int, spout_task: int) -> Outcome:
        return self.merge([root], [value], init_tasks=[spout_task])

    def ack(self, root: int, value: int) -> Outcome:
        return self.merge([root], [value])

    def fail(self, root: int) -> Outcome:
        return self.merge([root], [0], failed=[True])

    def reset_timeout(self, root: int) -> Outcome:
        return self.merge([root], [0], reset=[True])

    # -- vectorized path -----------------------------------------------------
    def merge(self, roots, xors, init_tasks=None, failed=None, reset=None) -> Outcome:
        """Merge one wave of acker messages, reduced to one row per root.

        ``roots``/``xors``: uint64 arrays, ``xors`` being the XOR of every init and
        ack value for the root. ``init_tasks``: the emitting spout task where the
        wave held the root's init, else -1. ``failed``: a fail was seen.
        ``reset``: a ``reset_timeout`` was seen.
        """
        roots = np.asarray(roots, dtype=np.uint64)
        n = len(roots)
        xors = np.asarray(xors, dtype=np.uint64)
        tasks = _tasks_column(init_tasks, n)
        state = np.full(n, self._epoch, np.uint8)
        if failed is not None:
            state |= np.where(np.asarray(failed, bool), _FAILED, np.uint8(0))
        resets = np.zeros(n, bool) if reset is None else np.asarray(reset, bool)
        if not (len(xors) == len(tasks) == len(state) == len(resets) == n):
            raise ValueError("merge(): roots, xors, init_tasks, failed and reset differ in length")

        order = np.argsort(roots)  # one row per root (checked below): any sort gives one order
        roots, xors, tasks, state, resets = (
            roots[order],
            xors[order],
            tasks[order],
            state[order],
            resets[order],
        )
        if n > 1 and np.any(roots[1:] == roots[:-1]):
            raise ValueError("merge(): roots must be XOR-reduced to one row per root")

        completed, failures = [], []
        missing = np.ones(n, bool)
        for run in (self._main, self._delta):
            todo = np.flatnonzero(missing)
            pos, hit = run.locate(roots[todo])
            rows = todo[hit]
            missing[rows] = False
            self._update(run, pos, rows, roots, xors, tasks, state, resets, completed, failures)

        self._insert(roots[missing], xors[missing], tasks[missing], state[missing], completed, failures)
        self._maybe_compact()
        return Outcome(Settled.concat(completed), Settled.concat(failures))

    def _update(self, run, pos, rows, roots, xors, tasks, state, resets, completed, failures):
        if len(pos) == 0:
            return
        run.vals[pos] ^= xors[rows]
        new_task = tasks[rows]
        has_init = new_task != UNKNOWN_TASK
        run.tasks[pos[has_init]] = new_task[has_init]
        old = run.state[pos]
        restamped = np.where(resets[rows], state[rows], old)  # reset: newest bucket
        run.state[pos] = (restamped & _STAMP) | (old & _FAILED) | (state[rows] & _FAILED)
        done, bad = _settle(run.vals[pos], run.tasks[pos], run.state[pos])
        settled = done | bad
        run.state[pos[settled]] |= _DEAD
        self._live -= int(settled.sum())
        completed.append(Settled(roots[rows][done], run.tasks[pos][done].astype(np.int64)))
        failures.append(Settled(roots[rows][bad], run.tasks[pos][bad].astype(np.int64)))

    def _insert(self, keys, vals, tasks, state, completed, failures):
        if len(keys) == 0:
            return
        done, bad = _settle(vals, tasks, state)
        completed.append(Settled(keys[done], tasks[done].astype(np.int64)))
        failures.append(Settled(keys[bad], tasks[bad].astype(np.int64)))
        # A reset or zero-valued ack for an unknown root leaves nothing to track.
        meaningful = (tasks != UNKNOWN_TASK) | ((state & _FAILED) != 0) | (vals != 0)
        keep = meaningful & ~done & ~bad
        if keep.any():
            fresh = _Run(keys[keep], vals[keep], tasks[keep], state[keep])
            self._delta = self._delta.live().merged_with(fresh)
            self._live += int(keep.sum())

    def _maybe_compact(self) -> None:
        held = len(self._main) + len(self._delta)
        threshold = max(held >> 3, _MIN_COMPACTION)
        if len(self._delta) > threshold or held - self._live > threshold:
            self._main = self._main.live().merged_with(self._delta.live())
            self._delta = _Run.empty()

    # -- timeouts ------------------------------------------------------------
    def rotate(self) -> Settled:
        """Advance the timeout buckets; return the roots that expired (reason ``timeout``)."""
        self._epoch = (self._epoch + 1) & int(_STAMP)
        expired = []
        for run in (self._main, self._delta):
            age = (np.uint8(self._epoch) - (run.state & _STAMP)) & _STAMP
            out = ((run.state & _DEAD) == 0) & (age >= self.num_buckets)
            if not out.any():
                continue
            run.state[out] |= _DEAD
            self._live -= int(out.sum())
            known = out & (run.tasks != UNKNOWN_TASK)
            self.orphans_expired += int(out.sum() - known.sum())
            expired.append(Settled(run.keys[known], run.tasks[known].astype(np.int64)))
        self._maybe_compact()
        return Settled.concat(expired)


def _tasks_column(init_tasks, n: int) -> np.ndarray:
    if init_tasks is None:
        return np.full(n, UNKNOWN_TASK, np.uint16)
    tasks = np.asarray(init_tasks, dtype=np.int64)
    if len(tasks) and (tasks.max() > MAX_SPOUT_TASK or tasks.min() < -1):
        bad = tasks[(tasks > MAX_SPOUT_TASK) | (tasks < -1)][0]
        raise ValueError(f"spout task id {bad} is outside [0, {MAX_SPOUT_TASK}] (-1 means no init)")
    return np.where(tasks < 0, UNKNOWN_TASK, tasks).astype(np.uint16)


def acker_partition(roots, num_partitions: int) -> np.ndarray:
    """The acker partition of each root: ``root mod num_partitions``."""
    return (np.asarray(roots, dtype=np.uint64) % np.uint64(num_partitions)).astype(np.intp)


class PartitionedLedger:
    """``num_partitions`` acker ledgers, a root living in partition ``root mod N``."""

    def __init__(self, num_partitions: int, num_buckets: int = 2) -> None:
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise ValueError(f"num_partitions must be an int >= 1, got {num_partitions!r}")
        self.num_buckets = num_buckets
        self.partitions = [AckLedger(num_buckets) for _ in range(num_partitions)]

    def __len__(self) -> int:
        return sum(len(p) for p in self.partitions)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.partitions)

    def merge(self, roots, xors, init_tasks=None, failed=None, reset=None) -> Outcome:
        roots = np.asarray(roots, dtype=np.uint64)
        columns = [np.asarray(c) if c is not None else None for c in (xors, init_tasks, failed, reset)]
        part = acker_partition(roots, len(self.partitions))
        outcomes = []
        for i, ledger in enumerate(self.partitions):
            sel = part == i
            if sel.any():
                outcomes.append(ledger.merge(roots[sel], *[c[sel] if c is not None else None for c in columns]))
        return Outcome(Settled.concat([o.completed for o in outcomes]), Settled.concat([o.failed for o in outcomes]))

    def rotate(self) -> Settled:
        return Settled.concat([p.rotate() for p in self.partitions])

    def lose_partition(self, index: int) -> int:
        """Drop one partition's state, as when an acker task dies; returns roots lost."""
        lost = len(self.partitions[index])
        self.partitions[index] = AckLedger(self.num_buckets)
        return lost
