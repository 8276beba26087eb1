import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rotating_map import RotatingMap

from squall.reliability import AckLedger, PartitionedLedger, acker_partition


def pairs(settled):
    return settled.pairs()


def test_init_then_acks_complete_and_report_spout_task():
    led = AckLedger()
    assert led.init(7, 0b1100, spout_task=3).completed.pairs() == []
    assert led.ack(7, 0b0100).completed.pairs() == []
    assert led.entry(7).value == 0b1000 and led.entry(7).spout_task == 3
    out = led.ack(7, 0b1000)
    assert pairs(out.completed) == [(3, 7)] and pairs(out.failed) == []
    assert 7 not in led and len(led) == 0


def test_ack_before_init_still_completes():
    led = AckLedger()
    assert not led.ack(9, 5).completed
    assert led.entry(9).spout_task is None
    assert pairs(led.init(9, 5, spout_task=2).completed) == [(2, 9)]


def test_fail_marks_root_failed_and_removes_it():
    led = AckLedger()
    led.init(1, 10, spout_task=0)
    out = led.fail(1)
    assert pairs(out.failed) == [(0, 1)] and not out.completed and len(led) == 0


def test_fail_before_init_is_reported_when_init_arrives():
    led = AckLedger()
    assert not led.fail(4).failed
    assert led.entry(4).failed
    assert pairs(led.init(4, 99, spout_task=1).failed) == [(1, 4)]


def test_completion_is_checked_before_failure():
    led = AckLedger()
    led.init(5, 3, spout_task=0)
    out = led.merge([5], [3], failed=[True])
    assert pairs(out.completed) == [(0, 5)] and not out.failed


def test_init_and_all_acks_in_one_wave_complete_without_being_stored():
    led = AckLedger()
    out = led.merge([11, 12], [0, 6], init_tasks=[4, 4])
    assert pairs(out.completed) == [(4, 11)] and len(led) == 1 and 11 not in led


def test_reset_timeout_moves_root_to_newest_bucket():
    led = AckLedger(num_buckets=2)
    led.init(1, 1, 0)
    led.init(2, 2, 0)
    assert len(led.rotate()) == 0
    led.reset_timeout(1)
    led.ack(2, 3)  # an ack alone does not restart the countdown
    assert pairs(led.rotate()) == [(0, 2)]
    assert led.entry(1).age == 1
    assert pairs(led.rotate()) == [(0, 1)]


def test_reset_for_unknown_root_creates_nothing():
    led = AckLedger()
    led.reset_timeout(77)
    assert len(led) == 0


def test_orphans_expire_silently():
    led = AckLedger()
    led.ack(3, 8)  # an init never arrives (its acker partition lost it, say)
    led.rotate()
    assert len(led.rotate()) == 0 and led.orphans_expired == 1 and len(led) == 0


def test_rejects_unreduced_batches_and_bad_tasks():
    led = AckLedger()
    with pytest.raises(ValueError, match="XOR-reduced to one row per root"):
        led.merge([1, 1], [2, 3])
    with pytest.raises(ValueError, match="spout task id 70000"):
        led.init(1, 2, 70000)
    with pytest.raises(ValueError, match="num_buckets"):
        AckLedger(1)


def test_partitions_hold_roots_by_mod():
    led = PartitionedLedger(3)
    roots = np.array([3, 4, 5, 6, 7, 2**64 - 1], dtype=np.uint64)
    led.merge(roots, np.ones(6, np.uint64), init_tasks=np.zeros(6))
    assert [sorted(p.pending_roots().tolist()) for p in led.partitions] == [
        [3, 6, 2**64 - 1],
        [4, 7],
        [5],
    ]
    assert acker_partition(roots, 3).tolist() == [0, 1, 2, 0, 1, 0]
    out = led.merge(roots, np.ones(6, np.uint64))
    assert sorted(r for _, r in out.completed.pairs()) == sorted(roots.tolist())


def test_lost_partition_forgets_its_roots():
    led = PartitionedLedger(2)
    led.merge([2, 3], [1, 1], init_tasks=[0, 0])
    assert led.lose_partition(0) == 1
    assert led.merge([2, 3], [1, 1]).completed.pairs() == [(0, 3)]
    assert len(led) == 1  # root 2 reappears as an orphan ack with no init


def test_churn_keeps_state_exact_and_memory_bounded():
    rng = np.random.default_rng(5)
    led = AckLedger()
    truth: dict[int, int] = {}
    for wave in range(40):
        new = rng.integers(1, 2**64, 3000, dtype=np.uint64)
        vals = rng.integers(1, 2**64, 3000, dtype=np.uint64)
        pending = np.array(list(truth), dtype=np.uint64)
        churn = 2000 if wave < 20 else 3000  # grow to 40k pending, then hold steady
        pick = rng.choice(len(pending), min(len(pending), churn), replace=False) if len(pending) else []
        finish = pending[pick]
        finish_vals = np.array([truth[int(r)] for r in finish], dtype=np.uint64)
        out = led.merge(
            np.concatenate([new, finish]),
            np.concatenate([vals, finish_vals]),
            init_tasks=np.concatenate([np.full(3000, wave % 7), np.full(len(finish), -1)]),
        )
        assert sorted(r for _, r in out.completed.pairs()) == sorted(finish.tolist())
        for r in finish.tolist():
            del truth[r]
        truth.update(zip(new.tolist(), vals.tolist(), strict=True))
        assert len(led) == len(truth)
        if len(led) >= 8 * 4096:  # past the minimum compaction size, tombstones stay under 1/8
            assert led.nbytes / len(led) <= 19 * 8 / 7
    assert sorted(led.pending_roots().tolist()) == sorted(truth)


def test_one_million_pending_roots_cost_at_most_24_bytes_each():
    n = 1_000_000
    rng = np.random.default_rng(1)
    roots = rng.integers(1, 2**64, n, dtype=np.uint64)
    vals = rng.integers(1, 2**64, n, dtype=np.uint64)
    tasks = rng.integers(0, 50, n)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    led = AckLedger()
    led.merge(roots, vals, init_tasks=tasks)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(led) == n
    assert held / n <= 24, held / n


ledger_ops = st.lists(
    st.one_of(
        st.tuples(st.just("init"), st.integers(1, 12)),
        st.tuples(st.just("ack"), st.integers(1, 12)),
        st.tuples(st.just("reset"), st.integers(1, 12)),
        st.tuples(st.just("rotate"), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(num_buckets=st.integers(2, 5), ops=ledger_ops)
def test_expiry_matches_rotating_map(num_buckets, ops):
    """The ledger's timeout buckets behave as Storm's RotatingMap, entry for entry.

    A root enters the newest bucket when first seen or reset; acks do not move it.
    """
    led = AckLedger(num_buckets)
    ref: RotatingMap[int, int] = RotatingMap(num_buckets)
    for op, root in ops:
        if op == "rotate":
            expired = led.rotate()
            assert sorted(r for _, r in expired.pairs()) == sorted(ref.rotate())
        elif op == "init":
            if root not in ref:
                ref.put(root, 0)
                led.init(root, root * 1000 + 1, spout_task=0)  # never completes: acks below are 1s
            else:
                led.ack(root, 2)  # keep it pending; an ack does not restart its timeout
        elif op == "ack" and root in ref:
            led.ack(root, 4)
        elif op == "reset" and root in ref:
            ref.put(root, 0)
            led.reset_timeout(root)
        assert len(led) == len(ref)
        for r in range(1, 13):
            entry = led.entry(r)
            assert (entry.age if entry else None) == ref.bucket_of(r)
