"""The transaction coordinator: a pure state machine, with its durable state in a store.

Transactions go PROCESSING -> PROCESSED -> COMMITTING -> done. At most
``max_pending`` are active; only the oldest uncommitted txid may commit. A
failure in either phase fails that transaction and every later active one; each
is emitted again with a fresh attempt id. Acks and fails for stale attempts are
ignored.

Events go in (``processed``, ``committed``, ``failed``, ``record_metadata``);
instructions come out of ``poll()`` (``Emit``, ``Commit``). The durable state
(the last committed txid, the next new txid, each in-flight batch's metadata)
lives in a ``CoordinatorStore``, so a restarted coordinator resumes every
in-flight txid and never commits one twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from squall.model.attempt import TransactionAttempt
from squall.reliability.ids import new_id
from squall.transactional.store import CoordinatorStore

__all__ = ["Commit", "Emit", "Phase", "TransactionAttempt", "TransactionCoordinator"]


class Phase(Enum):
    PROCESSING = "processing"
    PROCESSED = "processed"
    COMMITTING = "committing"


@dataclass(frozen=True)
class Emit:
    attempt: TransactionAttempt


@dataclass(frozen=True)
class Commit:
    attempt: TransactionAttempt


@dataclass
class _Active:
    attempt: TransactionAttempt
    phase: Phase
    emitted: bool = False


class TransactionCoordinator:
    def __init__(
        self, store: CoordinatorStore, max_pending: int = 1, new_attempt_id: Callable[[], int] = new_id
    ) -> None:
        if not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be an int >= 1, got {max_pending!r}")
        self.store = store
        self.max_pending = max_pending
        self._new_attempt_id = new_attempt_id
        self.last_committed: int = store.get("last_committed", 0)
        self.next_txid: int = store.get("next_txid", self.last_committed + 1)
        self.active: dict[int, _Active] = {}
        for txid in range(self.last_committed + 1, self.next_txid):  # in flight when we stopped
            self.active[txid] = self._fresh(txid)

    def _fresh(self, txid: int) -> _Active:
        return _Active(TransactionAttempt(txid, self._new_attempt_id()), Phase.PROCESSING)

    def _current(self, attempt: TransactionAttempt) -> _Active | None:
        active = self.active.get(attempt.txid)
        return active if active is not None and active.attempt == attempt else None

    # -- instructions ----------------------------------------------------------
    def poll(self, ready: bool = True, most: int | None = None) -> list[Emit | Commit]:
        """What to do now: emits (replays first, then new txids while under max pending, at most ``most`` of
        them), then a commit."""
        out: list[Emit | Commit] = []
        started = 0
        for txid in sorted(self.active):
            tx = self.active[txid]
            if not tx.emitted:
                tx.emitted = True
                out.append(Emit(tx.attempt))
        while ready and len(self.active) < self.max_pending and (most is None or started < most):
            started += 1
            txid = self.next_txid
            self.next_txid += 1
            self.store.put("next_txid", self.next_txid)
            tx = self.active[txid] = self._fresh(txid)
            tx.emitted = True
            out.append(Emit(tx.attempt))
        oldest = min(self.active, default=None)
        if oldest == self.last_committed + 1 and self.active[oldest].phase is Phase.PROCESSED:
            self.active[oldest].phase = Phase.COMMITTING
            out.append(Commit(self.active[oldest].attempt))
        return out

    # -- events ----------------------------------------------------------------
    def processed(self, attempt: TransactionAttempt) -> bool:
        tx = self._current(attempt)
        if tx is None or tx.phase is not Phase.PROCESSING:
            return False
        tx.phase = Phase.PROCESSED
        return True

    def committed(self, attempt: TransactionAttempt) -> bool:
        tx = self._current(attempt)
        if tx is None or tx.phase is not Phase.COMMITTING:
            return False
        del self.active[attempt.txid]
        self.last_committed = attempt.txid
        with self.store.transaction():
            self.store.put("last_committed", attempt.txid)
            self.store.delete_below("meta/", attempt.txid)  # txid's own stays: the next batch starts from it
        return True

    def failed(self, attempt: TransactionAttempt) -> bool:
        """Fail ``attempt`` and every later active transaction; they are emitted again."""
        if self._current(attempt) is None:
            return False
        for txid in sorted(self.active):
            if txid >= attempt.txid:
                self.active[txid] = self._fresh(txid)
        return True

    # -- batch metadata --------------------------------------------------------
    def record_metadata(self, attempt: TransactionAttempt, metadata: Any) -> bool:
        """Store the metadata an emit produced for ``attempt``'s batch (JSON-serializable)."""
        if self._current(attempt) is None:
            return False
        self.store.put(f"meta/{attempt.txid}", metadata)
        return True

    def metadata(self, txid: int) -> Any:
        return self.store.get(f"meta/{txid}")

    def phase_of(self, txid: int) -> Phase | None:
        tx = self.active.get(txid)
        return tx.phase if tx else None
