"""Frames between the driver and the workers, and between workers: plain pickle where the other side imports
every function and class by name, cloudpickle (by value) where it may not."""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass

from pyspark import cloudpickle

from squall.model.attempt import TransactionAttempt
from squall.spark.protocol import HEADER, Batch, Commit, WaveInput, encode


@dataclass
class Ranking:
    """A user value of a class this module defines: importable by name while the module is not shipped."""

    word: str
    count: int


def decoded(frame: bytes):
    length, destination = HEADER.unpack(frame[: HEADER.size])
    assert len(frame) == HEADER.size + length
    return destination, pickle.loads(frame[HEADER.size :])


def batch_of(*values) -> Batch:
    batch = Batch(1, 7, 3, "rank", 3, 4)
    for value in values:
        batch.add("default", (value,))
    return batch


def test_a_wave_input_and_a_batch_of_plain_values_come_back_equal():
    message = WaveInput(2, 7, None, (3, 4), None, 500, 1, True, False, False, Commit(2, 6, 0))
    destination, back = decoded(encode(message, 5))
    assert destination == 5 and back == message
    batch = batch_of("a", 1, 2.5, None, b"x")
    assert decoded(encode(batch, 5)) == (5, batch)


def test_a_batch_keeps_each_rows_stream_and_values_that_share_or_hold_themselves():
    batch = batch_of("a", "b")
    batch.add("errors", ("c",))
    shared = ["x"]
    batch.add("default", (shared, shared))
    cyclic: list = []
    cyclic.append(cyclic)
    batch.add("default", (cyclic,))
    _, back = decoded(encode(batch, 1))
    assert back.streams == ["default", "default", "errors", "default", "default"]
    assert back.values[:4] == batch.values[:4]
    (again,) = back.values[4]
    assert again[0] is again  # the cycle survives: such a batch goes by the memo-keeping pickler
    same = batch_of("a", "b", "c")
    _, back = decoded(encode(same, 1))
    assert back.streams == ["default"] * 3 and back.streams[0] is back.streams[2]  # one name, sent once


def test_a_batch_whose_rows_share_an_attempt_sends_it_once():
    attempt = TransactionAttempt(7, 123)
    batch = Batch(1, 7, 3, "split", 3, 4)
    for word in ("a", "b", "c"):
        batch.add("default", (attempt, word))
    plain = batch_of("a", "b", "c")
    shared, apart = encode(batch, 1), encode(plain, 1)
    _, back = decoded(shared)
    assert back.values == batch.values and back.values[0][0] is back.values[2][0]  # pickled once, memo after
    assert len(shared) < len(apart) + 80  # not once a row


def test_values_of_a_class_defined_in_a_function_and_a_lambda_travel_by_value():
    class Local:
        def __init__(self, n):
            self.n = n

    destination, back = decoded(encode(batch_of(Local(3), lambda x: x + 1), -1))
    local, function = back.values[0][0], back.values[1][0]
    assert destination == -1 and type(local).__name__ == "Local" and local.n == 3 and function(1) == 2


def test_a_class_of_a_module_shipped_by_value_travels_by_value_and_by_name_again_once_it_is_not():
    module = sys.modules[__name__]
    shipped = __name__ in cloudpickle.list_registry_pickle_by_value()  # an earlier run in this process shipped it
    if shipped:
        cloudpickle.unregister_pickle_by_value(module)
    try:
        frame = encode(batch_of(Ranking("cat", 3)), 0)
        assert b"_make_skeleton_class" not in frame and type(decoded(frame)[1].values[0][0]) is Ranking  # by name
        cloudpickle.register_pickle_by_value(module)
        frame = encode(batch_of(Ranking("cat", 3)), 0)
        assert b"_make_skeleton_class" in frame  # the class itself is in the frame
        value = decoded(frame)[1].values[0][0]
        assert type(value).__name__ == "Ranking" and (value.word, value.count) == ("cat", 3)
        cloudpickle.unregister_pickle_by_value(module)
        assert b"_make_skeleton_class" not in encode(batch_of(Ranking("dog", 1)), 0)
    finally:
        if shipped != (__name__ in cloudpickle.list_registry_pickle_by_value()):
            (cloudpickle.register_pickle_by_value if shipped else cloudpickle.unregister_pickle_by_value)(module)
