"""The acker: one ``Acker`` per acker task, holding that task's pending tuple trees, one XOR value each.

A pure state machine, in the shape of Storm's ``Acker.java``. Events go in, and each returns the trees it
settled as one ``Settlement``:

* ``Init``: trees started: each root, the XOR of the edges of its spout tuple's copies, and its spout task;
* ``Acks``: the ack, fail and ``reset_timeout`` messages of one wave, folded per root into an ``AckBatch``
  (values XORed, flags ORed; ``acks.py``);
* ``Withdraw``: acks merged before, taken back after a worker loss (their wave runs again): XORed out of the
  roots still pending;
* ``Rotate``: a timeout period passed.

A root whose value reaches 0 is acked; one with a fail is failed (completion is checked first, as in Storm);
one that stays pending for ``num_buckets`` rotations after it last entered the newest bucket (at its first
message, and at each reset) times out, exactly as Storm's ``RotatingMap`` expires it. This is the only timeout:
the spout side keeps no clock of its own. A root's messages may arrive in any order: acks before their init
wait for it, and a fail before the init is reported when it comes. No Spark, no threads, no I/O.

Storage. Per pending root the acker keeps, in parallel numpy columns:

* ``keys``  uint64  the root id
* ``vals``  uint64  XOR of every edge id seen for the root so far
* ``tasks`` uint16  the spout task that emitted the root (``UNKNOWN_TASK`` until its init)
* ``state`` uint8   bits 0-5: the rotation at which the root last entered the
  newest timeout bucket; bit 6: failed; bit 7: removed (a tombstone)

in two sorted runs: a large ``main`` run and a small ``delta`` run that takes new roots. Lookups are binary
searches; settled roots become tombstones. When the delta or the tombstones pass an eighth of the acker's
entries, the runs are merged into a fresh ``main``. So an acker never holds more than 8/7 of its live entries,
at most 19 * 8 / 7 < 22 bytes per pending root.

A merge is one call into C (``_acker_merge.pyx``) where squall's extensions are built: a lightly loaded worker
merges many small batches, and numpy's fixed cost per call would be most of each. Elsewhere it runs in numpy
(``_merge_columns``), with the same results in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from squall.reliability.acks import AckBatch

try:  # the merge in C where it was built (setup.py); else the numpy path below, with the same results
    from squall.reliability._acker_merge import merge as _merge_in_c
except ImportError:
    _merge_in_c = None

UNKNOWN_TASK = 0xFFFF
MAX_SPOUT_TASK = UNKNOWN_TASK - 1
_STAMP = np.uint8(0x3F)
_FAILED = np.uint8(0x40)
_DEAD = np.uint8(0x80)
_MIN_COMPACTION = 4096

ACKED, FAILED, TIMED_OUT = 0, 1, 2  # how a tree finished
HOW = ("acked", "failed", "timed out")


@dataclass(frozen=True, slots=True)
class Settlement:
    """Trees that finished, as columns: each one's root, its spout task, and how (``ACKED``, ``FAILED`` or
    ``TIMED_OUT``). The acker knows only these; where the trees' spout tasks run, each also gets its message id
    and its emit time (``msg_ids``, ``emitted_at``), for the spout's ``ack`` or ``fail`` and its latency."""

    roots: np.ndarray  # uint64
    tasks: np.ndarray  # int64
    how: np.ndarray  # uint8
    msg_ids: list[Any] | None = None
    emitted_at: np.ndarray | None = None  # float64

    def __len__(self) -> int:
        return len(self.roots)

    def where(self, how: int) -> Settlement:
        """The trees that finished ``how``."""
        rows = np.flatnonzero(self.how == how)
        if len(rows) == len(self.roots):
            return self
        msg_ids = None if self.msg_ids is None else [self.msg_ids[i] for i in rows.tolist()]
        emitted_at = None if self.emitted_at is None else self.emitted_at[rows]
        return Settlement(self.roots[rows], self.tasks[rows], self.how[rows], msg_ids, emitted_at)

    def pairs(self, how: int | None = None) -> list[tuple[int, int]]:
        """``[(spout_task, root), ...]``, of the trees that finished ``how`` (any way: ``None``)."""
        rows = self if how is None else self.where(how)
        return list(zip(rows.tasks.tolist(), rows.roots.tolist(), strict=True))

    @staticmethod
    def of(roots: np.ndarray, tasks: np.ndarray, how: int) -> Settlement:
        return Settlement(roots, tasks.astype(np.int64), np.full(len(roots), how, np.uint8))

    @staticmethod
    def concat(parts: list[Settlement]) -> Settlement:
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return NOTHING
        resolved = all(p.msg_ids is not None for p in parts)
        return Settlement(
            np.concatenate([p.roots for p in parts]),
            np.concatenate([p.tasks for p in parts]),
            np.concatenate([p.how for p in parts]),
            [m for p in parts for m in p.msg_ids] if resolved else None,
            np.concatenate([p.emitted_at for p in parts]) if resolved else None,
        )


NOTHING = Settlement(np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.uint8))


@dataclass(frozen=True, slots=True)
class Init:
    """Trees started: ``roots`` (uint64, one row each), each one's init value (the XOR of its spout tuple's
    copies' edges) and the spout task that emitted it."""

    roots: np.ndarray
    values: np.ndarray
    spout_tasks: np.ndarray


@dataclass(frozen=True, slots=True)
class Acks:
    """One wave's ack, fail and ``reset_timeout`` messages for this acker's roots, folded per root."""

    batch: AckBatch


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Acks merged before, taken back: their values XORed out of the roots still pending (a root settled meanwhile,
    or never seen, is left alone). The messages they came in will come again."""

    batch: AckBatch


@dataclass(frozen=True, slots=True)
class Rotate:
    """A timeout period passed."""


AckerEvent = Init | Acks | Withdraw | Rotate


@dataclass(frozen=True)
class PendingEntry:
    value: int
    spout_task: int | None
    failed: bool
    age: int  # rotations since the root last entered the newest bucket


class _Run:
    """One sorted run of the acker's columns."""

    __slots__ = ("keys", "state", "tasks", "vals")

    def __init__(self, keys, vals, tasks, state) -> None:
        self.keys, self.vals, self.tasks, self.state = keys, vals, tasks, state

    @classmethod
    def empty(cls) -> _Run:
        return cls(
            np.empty(0, np.uint64),
            np.empty(0, np.uint64),
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


class Acker:
    """One acker task's pending trees. ``handle`` takes an event and returns the trees it settled."""

    def __init__(self, task: int = 0, num_buckets: int = 2) -> None:
        if not isinstance(num_buckets, int) or not 2 <= num_buckets <= int(_STAMP):
            raise ValueError(f"num_buckets must be an int in [2, {int(_STAMP)}], got {num_buckets!r}")
        self.task = task
        self.num_buckets = num_buckets
        self.acks_merged = 0  # ack rows (one per root and wave) merged, as Storm counts an acker's executed
        self.settled = 0  # trees settled, as Storm counts an acker's emitted
        self.orphans_expired = 0  # roots that expired before their init arrived
        self._epoch = 0
        self._main = _Run.empty()
        self._delta = _Run.empty()
        self._live = 0

    def handle(self, event: AckerEvent) -> Settlement:
        if isinstance(event, Acks):
            batch = event.batch
            self.acks_merged += len(batch)
            settled = self._merge(batch.roots, batch.xors, None, batch.failed, batch.reset)
        elif isinstance(event, Init):
            settled = self._merge(event.roots, event.values, init_tasks=event.spout_tasks)
        elif isinstance(event, Withdraw):
            settled = self._merge(event.batch.roots, event.batch.xors, known_only=True)
        elif isinstance(event, Rotate):
            settled = self._rotate()
        else:
            raise TypeError(f"Acker: unexpected event {event!r}")
        self.settled += len(settled)
        return settled

    # -- queries -------------------------------------------------------------
    def __len__(self) -> int:
        return self._live

    @property
    def nbytes(self) -> int:
        """Bytes held by the acker's columns."""
        return self._main.nbytes + self._delta.nbytes

    def entry(self, root: int) -> PendingEntry | None:
        key = np.array([root], np.uint64)
        for run in (self._main, self._delta):
            pos, _ = run.locate(key)
            if len(pos):
                i = pos[0]
                task = int(run.tasks[i])
                stamp = int(run.state[i] & _STAMP)
                return PendingEntry(
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

    # -- merging messages ----------------------------------------------------
    def _merge(self, roots, xors, init_tasks=None, failed=None, reset=None, known_only=False) -> Settlement:
        """Merge rows reduced to one per root: ``xors`` the XOR of the root's init and ack values here,
        ``init_tasks`` its spout task where this holds its init (else -1), ``failed`` a fail was seen, ``reset`` a
        ``reset_timeout`` was seen; ``known_only``: roots not pending here are left out."""
        if _merge_in_c is None:
            return self._merge_columns(roots, xors, init_tasks, failed, reset, known_only)
        settled, delta, live_change = _merge_in_c(
            self._main.columns(),
            self._delta.columns(),
            np.ascontiguousarray(roots, np.uint64),
            np.ascontiguousarray(xors, np.uint64),
            None if init_tasks is None else np.ascontiguousarray(init_tasks, np.int64),
            _flags(failed),
            _flags(reset),
            self._epoch,
            known_only,
        )
        if delta is not None:
            self._delta = _Run(*delta)
        self._live += live_change
        self._maybe_compact()
        return NOTHING if settled is None else Settlement(*settled)

    def _merge_columns(self, roots, xors, init_tasks, failed, reset, known_only) -> Settlement:
        """``_merge`` in numpy, where the C merge is not built."""
        roots = np.asarray(roots, dtype=np.uint64)
        n = len(roots)
        xors = np.asarray(xors, dtype=np.uint64)
        tasks = _tasks_column(init_tasks, n)
        state = np.full(n, self._epoch, np.uint8)
        if failed is not None:
            state |= np.where(np.asarray(failed, bool), _FAILED, np.uint8(0))
        resets = np.zeros(n, bool) if reset is None else np.asarray(reset, bool)
        if not (len(xors) == len(tasks) == len(state) == len(resets) == n):
            raise ValueError("acker: roots, values, spout tasks and flags differ in length")

        order = np.argsort(roots)  # one row per root (checked below): any sort gives one order
        roots, xors, tasks, state, resets = (
            roots[order],
            xors[order],
            tasks[order],
            state[order],
            resets[order],
        )
        if n > 1 and np.any(roots[1:] == roots[:-1]):
            raise ValueError("acker: roots must be XOR-reduced to one row per root")

        settled: list[Settlement] = []
        missing = np.ones(n, bool)
        for run in (self._main, self._delta):
            todo = np.flatnonzero(missing)
            pos, hit = run.locate(roots[todo])
            rows = todo[hit]
            missing[rows] = False
            self._update(run, pos, rows, roots, xors, tasks, state, resets, settled)

        if not known_only:
            self._insert(roots[missing], xors[missing], tasks[missing], state[missing], settled)
        self._maybe_compact()
        return Settlement.concat(settled)

    def _update(self, run, pos, rows, roots, xors, tasks, state, resets, settled):
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
        finished = done | bad
        run.state[pos[finished]] |= _DEAD
        self._live -= int(finished.sum())
        settled.append(Settlement.of(roots[rows][done], run.tasks[pos][done], ACKED))
        settled.append(Settlement.of(roots[rows][bad], run.tasks[pos][bad], FAILED))

    def _insert(self, keys, vals, tasks, state, settled):
        if len(keys) == 0:
            return
        done, bad = _settle(vals, tasks, state)
        settled.append(Settlement.of(keys[done], tasks[done], ACKED))
        settled.append(Settlement.of(keys[bad], tasks[bad], FAILED))
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
    def _rotate(self) -> Settlement:
        """Advance the timeout buckets; the roots that expired time out."""
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
            expired.append(Settlement.of(run.keys[known], run.tasks[known], TIMED_OUT))
        self._maybe_compact()
        return Settlement.concat(expired)


def _flags(column) -> np.ndarray | None:
    return None if column is None else np.ascontiguousarray(column, bool).view(np.uint8)


def _tasks_column(init_tasks, n: int) -> np.ndarray:
    if init_tasks is None:
        return np.full(n, UNKNOWN_TASK, np.uint16)
    tasks = np.asarray(init_tasks, dtype=np.int64)
    if len(tasks) and (tasks.max() > MAX_SPOUT_TASK or tasks.min() < -1):
        bad = tasks[(tasks > MAX_SPOUT_TASK) | (tasks < -1)][0]
        raise ValueError(f"spout task id {bad} is outside [0, {MAX_SPOUT_TASK}] (-1 means no init)")
    return np.where(tasks < 0, UNKNOWN_TASK, tasks).astype(np.uint16)
