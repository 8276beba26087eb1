"""Tuple and edge ids: random, never 0, the same stream from a seed however they are asked for, and never the same
in two processes."""

import os

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from squall.reliability.ids import IdGenerator


@given(st.lists(st.integers(0, 5_000), max_size=6), st.integers(0, 2**32))
def test_a_seeded_generator_gives_the_same_ids_however_many_each_call_asks_for(sizes, seed):
    # a batch's edges are drawn per batch: a wave run again may seal its batches at other rows
    drawn = np.concatenate([np.empty(0, np.uint64), *(IdGenerator(seed).next_ids(n) for n in [sum(sizes)])])
    generator = IdGenerator(seed)
    pieces = np.concatenate([np.empty(0, np.uint64), *(generator.next_ids(n) for n in sizes)])
    assert pieces.tolist() == drawn.tolist()
    assert pieces.dtype == np.uint64 and not (pieces == 0).any()


def test_one_at_a_time_and_a_seeded_source_give_the_ids_in_the_order_drawn():
    drawn = IdGenerator(7).next_ids(5000).tolist()
    one_at_a_time = IdGenerator(7)
    assert [one_at_a_time.next_id() for _ in range(5000)] == drawn
    source = IdGenerator(7).seeded_source()
    assert [source() for _ in range(5000)] == drawn


def test_each_call_gets_an_array_of_its_own():
    generator = IdGenerator(1)
    first = generator.next_ids(3)
    second = generator.next_ids(3)
    first[:] = 0  # a caller may write into its ids: nobody else's change
    assert (second != 0).all() and second.base is None and first.base is None
    assert second.tolist() == IdGenerator(1).next_ids(6).tolist()[3:]


def test_a_forked_child_never_hands_out_its_parents_ids():
    generator = IdGenerator()
    generator.next_ids(10)  # a block drawn before the fork: the child must not hand out the rest of it
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write, generator.next_ids(100).tobytes())
        os._exit(0)
    os.close(write)
    received = b""
    while len(received) < 800:
        received += os.read(read, 800)
    os.waitpid(child, 0)
    os.close(read)
    in_child = set(np.frombuffer(received, np.uint64).tolist())
    assert not in_child & set(generator.next_ids(100).tolist())
