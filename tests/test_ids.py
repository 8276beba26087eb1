"""Tuple and edge ids: random, never 0, the same stream from a seed however they are asked for, and never the same
in two processes."""

import os
import pickle
import threading

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
        try:
            os.write(write, generator.next_ids(100).tobytes())
        finally:
            os._exit(0)  # never the rest of the test session in the child
    os.close(write)
    received = b""
    while chunk := os.read(read, 800):
        received += chunk
    os.waitpid(child, 0)
    os.close(read)
    assert len(received) == 800
    in_child = set(np.frombuffer(received, np.uint64).tolist())
    assert not in_child & set(generator.next_ids(100).tolist())


def test_threads_sharing_a_generator_never_get_the_same_ids():
    generator = IdGenerator()
    taken: list[list[int]] = [[] for _ in range(4)]

    def take(mine: list[int]) -> None:
        for n in [1, 1000, 70_000, 3] * 5:
            mine.extend(generator.next_ids(n).tolist())
        mine.extend(generator.next_id() for _ in range(5000))

    threads = [threading.Thread(target=take, args=(mine,)) for mine in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for mine in taken for i in mine]
    assert len(set(ids)) == len(ids) == 4 * (5 * 71_004 + 5000)


def test_a_shipped_copy_starts_again_from_its_seed_or_from_fresh_entropy():
    seeded, unseeded = IdGenerator(5), IdGenerator()
    seeded.next_ids(10)
    unseeded.next_ids(10)
    blob = pickle.dumps((seeded, unseeded))  # as a component holding them is shipped to each worker
    (seeded_a, unseeded_a), (seeded_b, unseeded_b) = pickle.loads(blob), pickle.loads(blob)
    assert seeded_a.next_ids(20).tolist() == seeded_b.next_ids(20).tolist() == IdGenerator(5).next_ids(20).tolist()
    assert not set(unseeded_a.next_ids(20).tolist()) & set(unseeded_b.next_ids(20).tolist())
