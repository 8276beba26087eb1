"""The ``TransactionAttempt`` a transactional bolt emits as the first field of its tuples, carried like an int."""

import copy
import gc
import pickle

import pytest

from squall.model.attempt import TransactionAttempt
from squall.spark.collectors import plain_rows
from squall.transactional import TransactionAttempt as exported


def test_it_is_the_transactional_packages_attempt():
    assert exported is TransactionAttempt


def test_value_semantics():
    a = TransactionAttempt(3, 2**64 - 1)
    assert a.txid == 3 and a.attempt_id == 2**64 - 1
    assert a == TransactionAttempt(3, 2**64 - 1) and a != TransactionAttempt(3, 1)
    assert hash(a) == hash(TransactionAttempt(3, 2**64 - 1))
    assert sorted([TransactionAttempt(4, 1), a, TransactionAttempt(3, 0)]) == [
        TransactionAttempt(3, 0),
        a,
        TransactionAttempt(4, 1),
    ]
    assert pickle.loads(pickle.dumps(a)) == a and copy.deepcopy(a) == a
    assert repr(a) == "TransactionAttempt(3, 0xffffffffffffffff)"
    assert (a == (3, 2**64 - 1)) is False
    with pytest.raises(AttributeError, match="immutable"):
        a.txid = 4


@pytest.mark.parametrize("txid, attempt_id", [(True, 1), (1.0, 1), ("1", 1), (1, None)])
def test_only_ints_make_an_attempt(txid, attempt_id):
    with pytest.raises(TypeError, match="two ints"):
        TransactionAttempt(txid, attempt_id)


def test_an_attempt_id_is_unsigned_64_bit():
    with pytest.raises(ValueError, match="64-bit"):
        TransactionAttempt(1, -1)
    with pytest.raises(ValueError, match="64-bit"):
        TransactionAttempt(1, 2**64)


def test_an_emitted_attempt_takes_the_plain_path():
    a = TransactionAttempt(1, 5)
    assert plain_rows([[a, "word"], (a, "other")], 2) == [(a, "word"), (a, "other")]


def test_rows_carrying_an_attempt_are_left_to_the_garbage_collector_like_plain_rows():
    """Compiled, as the suite runs it, the attempt is not tracked, so neither is a row of it and plain values
    once a collection has seen it: each collection would otherwise walk every row a batch holds."""
    a = TransactionAttempt(1, 5)
    assert not gc.is_tracked(a)
    rows = [pickle.loads(pickle.dumps((a, f"w{i}"))) for i in range(100)]
    gc.collect()
    assert not any(gc.is_tracked(row) for row in rows)
