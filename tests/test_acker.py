"""The acker, one per acker task: events in, one settlement out; its timeouts are Storm's RotatingMap."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rotating_map import RotatingMap

from squall.reliability import (
    ACKED,
    FAILED,
    TIMED_OUT,
    AckBatch,
    Acker,
    Acks,
    Init,
    Rotate,
    acker_partition,
)
from squall.reliability.acks import ACK, FAIL, RESET


def u64(*values):
    return np.array(values, dtype=np.uint64)


def init(acker, root, value, spout_task):
    return acker.handle(Init(u64(root), u64(value), np.array([spout_task])))


def message(acker, root, value=0, kind=ACK):
    return acker.handle(Acks(AckBatch.from_messages([root], [value], [kind])))


def test_init_then_acks_complete_and_report_spout_task():
    acker = Acker()
    assert not len(init(acker, 7, 0b1100, spout_task=3))
    assert not len(message(acker, 7, 0b0100))
    assert acker.entry(7).value == 0b1000 and acker.entry(7).spout_task == 3
    out = message(acker, 7, 0b1000)
    assert out.pairs(ACKED) == [(3, 7)] and out.pairs() == [(3, 7)]
    assert 7 not in acker and len(acker) == 0
    assert (acker.acks_merged, acker.settled) == (2, 1)


def test_ack_before_init_still_completes():
    acker = Acker()
    assert not len(message(acker, 9, 5))
    assert acker.entry(9).spout_task is None
    assert init(acker, 9, 5, spout_task=2).pairs(ACKED) == [(2, 9)]


def test_fail_marks_root_failed_and_removes_it():
    acker = Acker()
    init(acker, 1, 10, spout_task=0)
    out = message(acker, 1, kind=FAIL)
    assert out.pairs(FAILED) == [(0, 1)] and out.pairs() == [(0, 1)] and len(acker) == 0


def test_fail_before_init_is_reported_when_init_arrives():
    acker = Acker()
    assert not len(message(acker, 4, kind=FAIL))
    assert acker.entry(4).failed
    assert init(acker, 4, 99, spout_task=1).pairs(FAILED) == [(1, 4)]


def test_completion_is_checked_before_failure():
    acker = Acker()
    init(acker, 5, 3, spout_task=0)
    out = acker.handle(Acks(AckBatch(u64(5), u64(3), np.array([True]), np.array([False]))))
    assert out.pairs() == [(0, 5)] and out.how.tolist() == [ACKED]


def test_an_init_of_zero_completes_without_being_stored():
    acker = Acker()
    out = acker.handle(Init(u64(11, 12), u64(0, 6), np.array([4, 4])))
    assert out.pairs(ACKED) == [(4, 11)] and len(acker) == 1 and 11 not in acker


def test_reset_timeout_moves_root_to_newest_bucket():
    acker = Acker(num_buckets=2)
    init(acker, 1, 1, 0)
    init(acker, 2, 2, 0)
    assert len(acker.handle(Rotate())) == 0
    message(acker, 1, kind=RESET)
    message(acker, 2, 3)  # an ack alone does not restart the countdown
    out = acker.handle(Rotate())
    assert out.pairs(TIMED_OUT) == [(0, 2)] and out.pairs() == [(0, 2)]
    assert acker.entry(1).age == 1
    assert acker.handle(Rotate()).pairs(TIMED_OUT) == [(0, 1)]


def test_reset_for_unknown_root_creates_nothing():
    acker = Acker()
    message(acker, 77, kind=RESET)
    assert len(acker) == 0


def test_orphans_expire_silently():
    acker = Acker()
    message(acker, 3, 8)  # an init never arrives
    acker.handle(Rotate())
    assert len(acker.handle(Rotate())) == 0 and acker.orphans_expired == 1 and len(acker) == 0


def test_rejects_unreduced_batches_bad_tasks_and_unknown_events():
    acker = Acker()
    with pytest.raises(ValueError, match="XOR-reduced to one row per root"):
        acker.handle(Acks(AckBatch(u64(1, 1), u64(2, 3), np.zeros(2, bool), np.zeros(2, bool))))
    with pytest.raises(ValueError, match="spout task id 70000"):
        init(acker, 1, 2, 70000)
    with pytest.raises(ValueError, match="num_buckets"):
        Acker(num_buckets=1)
    with pytest.raises(TypeError, match="unexpected event"):
        acker.handle("ack")


def test_roots_go_to_acker_tasks_by_mod_and_each_settles_its_own():
    roots = u64(3, 4, 5, 6, 7, 2**64 - 1)
    assert acker_partition(roots, 3).tolist() == [0, 1, 2, 0, 1, 0]
    ackers = [Acker(task) for task in range(3)]
    batch = AckBatch(roots, np.ones(6, np.uint64), np.zeros(6, bool), np.zeros(6, bool))
    for acker, part in zip(ackers, batch.by_partition(3), strict=True):
        acker.handle(Init(part.roots, part.xors, np.zeros(len(part))))
    assert [sorted(a.pending_roots().tolist()) for a in ackers] == [[3, 6, 2**64 - 1], [4, 7], [5]]
    settled = [a.handle(Acks(part)) for a, part in zip(ackers, batch.by_partition(3), strict=True)]
    assert sorted(r for s in settled for _, r in s.pairs(ACKED)) == sorted(roots.tolist())


def test_churn_keeps_state_exact_and_memory_bounded():
    rng = np.random.default_rng(5)
    acker = Acker()
    truth: dict[int, int] = {}
    for wave in range(40):
        new = rng.integers(1, 2**64, 3000, dtype=np.uint64)
        vals = rng.integers(1, 2**64, 3000, dtype=np.uint64)
        pending = np.array(list(truth), dtype=np.uint64)
        churn = 2000 if wave < 20 else 3000  # grow to 40k pending, then hold steady
        pick = rng.choice(len(pending), min(len(pending), churn), replace=False) if len(pending) else []
        finish = pending[pick]
        finish_vals = np.array([truth[int(r)] for r in finish], dtype=np.uint64)
        none = np.zeros(len(finish), bool)
        out = acker.handle(Acks(AckBatch(finish, finish_vals, none, none)))
        acker.handle(Init(new, vals, np.full(3000, wave % 7)))
        assert sorted(r for _, r in out.pairs(ACKED)) == sorted(finish.tolist()) and len(out) == len(finish)
        for r in finish.tolist():
            del truth[r]
        truth.update(zip(new.tolist(), vals.tolist(), strict=True))
        assert len(acker) == len(truth)
        if len(acker) >= 8 * 4096:  # past the minimum compaction size, tombstones stay under 1/8
            assert acker.nbytes / len(acker) <= 19 * 8 / 7
    assert sorted(acker.pending_roots().tolist()) == sorted(truth)


def test_one_million_pending_roots_cost_at_most_24_bytes_each():
    n = 1_000_000
    rng = np.random.default_rng(1)
    roots = rng.integers(1, 2**64, n, dtype=np.uint64)
    vals = rng.integers(1, 2**64, n, dtype=np.uint64)
    tasks = rng.integers(0, 50, n)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    acker = Acker()
    acker.handle(Init(roots, vals, tasks))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(acker) == n
    assert held / n <= 24, held / n


acker_ops = st.lists(
    st.one_of(
        st.tuples(st.just("init"), st.integers(1, 12)),
        st.tuples(st.just("ack"), st.integers(1, 12)),
        st.tuples(st.just("reset"), st.integers(1, 12)),
        st.tuples(st.just("rotate"), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(num_buckets=st.integers(2, 5), ops=acker_ops)
def test_expiry_matches_rotating_map(num_buckets, ops):
    """The acker's timeout buckets behave as Storm's RotatingMap, entry for entry.

    A root enters the newest bucket when first seen or reset; acks do not move it.
    """
    acker = Acker(num_buckets=num_buckets)
    ref: RotatingMap[int, int] = RotatingMap(num_buckets)
    for op, root in ops:
        if op == "rotate":
            expired = acker.handle(Rotate())
            assert sorted(expired.roots.tolist()) == sorted(ref.rotate())
            assert set(expired.how.tolist()) <= {TIMED_OUT}
        elif op == "init":
            if root not in ref:
                ref.put(root, 0)
                init(acker, root, root * 1000 + 1, spout_task=0)  # never completes: acks below are 1s
            else:
                message(acker, root, 2)  # keep it pending; an ack does not restart its timeout
        elif op == "ack" and root in ref:
            message(acker, root, 4)
        elif op == "reset" and root in ref:
            ref.put(root, 0)
            message(acker, root, kind=RESET)
        assert len(acker) == len(ref)
        for r in range(1, 13):
            entry = acker.entry(r)
            assert (entry.age if entry else None) == ref.bucket_of(r)
