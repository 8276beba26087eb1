"""AckBatch: a task's ack messages folded per root, as the acker would fold them one by one."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from squall.reliability.acks import ACK, FAIL, RESET, AckBatch

messages = st.lists(
    st.tuples(st.integers(1, 6), st.integers(0, 2**64 - 1), st.sampled_from([ACK, FAIL, RESET])), max_size=40
)


def folded(msgs):
    rows = {}
    for root, value, kind in msgs:
        xor, failed, reset = rows.get(root, (0, False, False))
        rows[root] = (xor ^ (value if kind == ACK else 0), failed or kind == FAIL, reset or kind == RESET)
    return rows


def as_rows(batch: AckBatch):
    return {
        int(r): (int(x), bool(f), bool(s))
        for r, x, f, s in zip(batch.roots, batch.xors, batch.failed, batch.reset, strict=True)
    }


@given(messages)
def test_one_task_folds_its_messages_per_root(msgs):
    batch = AckBatch.from_messages(
        [m[0] for m in msgs], [m[1] if m[2] == ACK else 0 for m in msgs], [m[2] for m in msgs]
    )
    assert as_rows(batch) == folded(msgs)
    assert len(set(batch.roots.tolist())) == len(batch)  # one row per root


@given(st.lists(messages, max_size=4), st.integers(1, 3))
def test_the_driver_folds_every_tasks_batch_and_splits_them_by_acker_partition(tasks, ackers):
    batches = [
        AckBatch.from_messages([m[0] for m in t], [m[1] if m[2] == ACK else 0 for m in t], [m[2] for m in t])
        for t in tasks
    ]
    combined = AckBatch.combine(batches)
    assert as_rows(combined) == folded([m for t in tasks for m in t])
    parts = combined.by_partition(ackers)
    assert len(parts) == ackers
    for p, part in enumerate(parts):
        assert all(int(r) % ackers == p for r in part.roots)
        # each row whole (value and both flags), in the combined batch's order
        assert list(as_rows(part).items()) == [(r, row) for r, row in as_rows(combined).items() if r % ackers == p]
    assert sum(len(p) for p in parts) == len(combined)


def test_an_empty_wave_has_an_empty_batch():
    batch = AckBatch.combine([AckBatch.from_messages([], [], []), AckBatch.empty()])
    assert len(batch) == 0 and batch.roots.dtype == np.uint64


@given(messages, st.booleans())
def test_a_wave_of_acks_folds_the_same_whether_or_not_each_roots_rows_come_in_one_run(msgs, in_runs):
    if in_runs:  # a tuple's children emitted one after the other: runs of one root, folded before hashing
        msgs = sorted(msgs, key=lambda m: m[0])
    acks = [m for m in msgs if m[2] == ACK]
    batch = AckBatch.from_acks(
        np.array([m[0] for m in acks], np.uint64),
        np.array([m[1] for m in acks], np.uint64),
        [m[0] for m in msgs if m[2] == FAIL],
        [m[0] for m in msgs if m[2] == RESET],
    )
    assert as_rows(batch) == folded(msgs)
    assert len(set(batch.roots.tolist())) == len(batch)


@given(st.integers(1, 40_000), st.integers(0, 2**32))
def test_a_wave_with_thousands_of_roots_folds_to_one_row_each_in_order_of_first_appearance(distinct, seed):
    # more roots than the fold's table holds at first, so that it grows while folding
    rng = np.random.default_rng(seed)
    roots = rng.integers(1, distinct + 1, 3 * distinct).astype(np.uint64) * np.uint64(2**40 + 1)
    edges = rng.integers(0, 2**63, len(roots), dtype=np.uint64)
    batch = AckBatch.from_acks(roots, edges, [], [])
    expected: dict[int, int] = {}
    for root, edge in zip(roots.tolist(), edges.tolist(), strict=True):
        expected[root] = expected.get(root, 0) ^ edge
    assert batch.roots.tolist() == list(expected)  # dicts keep first insertion order
    assert batch.xors.tolist() == list(expected.values())
    assert not batch.failed.any() and not batch.reset.any()
