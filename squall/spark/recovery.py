"""Where a lost worker's tasks restart from: the run's recovery point.

The workers write each bolt task's state at snapshot waves (``snapshots.py``); the driver keeps, per task, the
reference to the last one written (``Snapshot``), and which snapshot wave completed last. A generation of workers
starts every task from the last complete snapshot and runs again, from the spout tasks' logs, every wave sent
since it: the acker tasks apply acks as they come, so a tree of a wave still in flight at the loss may have been
acked, and the tasks' state must hold what its tuples did.

``RecoveryPoint`` owns those references and the inputs of the waves sent since the last complete snapshot. The
scheduler tells it what it sent and what completed, and asks it where a generation starts. Its one I/O is the
store's record of a complete snapshot (and, at the end, the store's removal).
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

from squall.spark.protocol import Snapshot
from squall.spark.snapshots import SnapshotStore

log = logging.getLogger("squall")


class RecoveryPoint:
    """The last complete snapshot of a run's bolt tasks, and the waves sent since it.

    Without a ``store`` (no ``squall.checkpoint.dir``) nothing is kept: a generation starts from the waves
    applied, with fresh tasks (a stateful one from the checkpoint it was ``restored`` from).
    """

    def __init__(self, store: SnapshotStore | None, name: str, restored: dict[int, dict] | None = None) -> None:
        self.store, self.name = store, name
        self.wave = 0  # the last complete snapshot
        self.in_flight: int | None = None  # the snapshot wave running, if any
        self._refs: dict[int, Snapshot] = {}  # task -> its last snapshot written
        self._inputs: dict[int, Any] = {}  # wave -> what it sent, to run again, since the last complete snapshot
        # A restored stateful task's start, pickled, until a complete snapshot holds the task (then it is let go).
        self._restored = {
            t: pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL) for t, state in (restored or {}).items()
        }

    @property
    def keeps(self) -> bool:
        """Whether snapshots are kept, and so the inputs of the waves since the last."""
        return self.store is not None

    @property
    def due(self) -> bool:
        """Whether the next wave may be a snapshot wave: snapshots are kept, and none is running."""
        return self.store is not None and self.in_flight is None

    def sent(self, wave: int, replay: Any, snapshot: bool) -> None:
        """Wave ``wave`` went out (a snapshot wave with ``snapshot``); ``replay`` is what runs it again."""
        if snapshot:
            self.in_flight = wave
        self._inputs[wave] = replay

    def completed(self, wave: int, written: dict[int, Snapshot]) -> None:
        """Snapshot wave ``wave`` completed: every bolt task has written its state as of it (``written``: where,
        for those that executed anything since their last) or had nothing new. A lost worker's tasks restart from
        there now; what that no longer needs goes."""
        self._refs.update(written)
        self.wave, self.in_flight = wave, None
        for done in [w for w in self._inputs if w <= wave]:
            del self._inputs[done]
        for task in [t for t in self._restored if t in self._refs and self._refs[t].version <= wave]:
            del self._restored[task]  # it restarts from its own snapshot now
        try:
            self.store.complete(wave, {ref.version for ref in self._refs.values()})
        except Exception:
            log.exception("topology %s: recording snapshot %d failed; it is used all the same", self.name, wave)

    def start(self, applied: int) -> int:
        """The wave a new generation's tasks start as of, ``applied`` waves having completed."""
        return self.wave if self.store is not None else applied

    def snapshot_of(self, task: int) -> Snapshot | None:
        """Where the task's state as of the last complete snapshot was written; a stateful task that has written
        none yet starts from the checkpoint the run was restored from, and any other from nothing."""
        ref = self._refs.get(task)
        if ref is not None and ref.version <= self.wave:
            return ref
        restored = self._restored.get(task)
        return Snapshot(0, restored) if restored is not None else None

    def restart(self) -> list[Any]:
        """A new generation starts: what runs again (every wave sent since the last complete snapshot, in order);
        a snapshot running is let go."""
        self.in_flight = None
        return [self._inputs[w] for w in sorted(self._inputs)] if self.store is not None else []

    def remove(self) -> None:
        """The run is over: its snapshots and spout logs are of no further use."""
        if self.store is not None:
            self.store.remove()
