"""``TransactionAttempt``: which try of which transaction a batch is, a value tuples may carry.

Transactional bolts get it as ``batch_id`` and, in the style of Storm's transactional topologies, emit it as the
first field of their tuples. So it is made to cost no more than an ``int`` to carry: ``setup.py`` compiles this
module into a type holding two C integers, which the garbage collector does not track. A row tuple of plain
values and attempts is then left alone by the collector, as a row of plain values is (a tracked value in every
row made each collection walk every row still held, about a third more time per word in a batch's bolts).
"""

from __future__ import annotations

import cython


@cython.cclass
class TransactionAttempt:
    """A batch's transaction id (the same on every replay) and this try's attempt id: two ints, immutable,
    ordered by ``(txid, attempt_id)``."""

    txid = cython.declare(cython.longlong, visibility="readonly")
    attempt_id = cython.declare(cython.ulonglong, visibility="readonly")

    def __init__(self, txid: int, attempt_id: int) -> None:
        if type(txid) is not int or type(attempt_id) is not int:
            raise TypeError(f"TransactionAttempt takes two ints, got {txid!r} and {attempt_id!r}")
        if not 0 <= attempt_id < 1 << 64:
            raise ValueError(f"a TransactionAttempt's attempt id is a 64-bit unsigned int, got {attempt_id}")
        if cython.compiled:
            self.txid, self.attempt_id = txid, attempt_id
        else:  # plain Python: immutable all the same
            object.__setattr__(self, "txid", txid)
            object.__setattr__(self, "attempt_id", attempt_id)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"TransactionAttempt is immutable: cannot set {name!r}")

    def _key(self) -> tuple[int, int]:
        return (self.txid, self.attempt_id)

    def __eq__(self, other: object) -> bool:
        if type(other) is not TransactionAttempt:
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        if type(other) is not TransactionAttempt:
            return NotImplemented
        return self._key() != other._key()

    def __lt__(self, other: TransactionAttempt) -> bool:
        if type(other) is not TransactionAttempt:
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: TransactionAttempt) -> bool:
        if type(other) is not TransactionAttempt:
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: TransactionAttempt) -> bool:
        if type(other) is not TransactionAttempt:
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: TransactionAttempt) -> bool:
        if type(other) is not TransactionAttempt:
            return NotImplemented
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self):
        return TransactionAttempt, (self.txid, self.attempt_id)

    def __repr__(self) -> str:
        return f"TransactionAttempt({self.txid}, {self.attempt_id:#x})"
