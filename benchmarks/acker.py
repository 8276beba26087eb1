"""The acker: memory per pending root and merge rate of XOR-reduced acks, in large waves and in small batches.

Prints one ``name=value`` per line, for 1M and 10M pending roots. Each wave
merges 100,000 reduced ack rows for pending roots (half of them completing
their tree) plus one init row per completed root, so the acker stays at its
size. The same waves are run against a plain dict of pending roots for a ratio.

Then the small batches a lightly loaded spout worker merges: with 20,000 trees
pending, each step acks the oldest ``rows`` trees and starts ``rows`` new ones
(two merges), timed with the merge in C and with its numpy path, alternately.

    python benchmarks/acker.py [--sizes 1000000,10000000] [--waves 10] [--small-rows 10,50,200,1000]
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc

import numpy as np

from squall.reliability import ACKED, AckBatch, Acker, Acks, Init
from squall.reliability import acker as acker_module

WAVE = 100_000
SMALL_PENDING = 20_000


def random_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(1, 2**64, n, dtype=np.uint64)


def filled_acker(roots: np.ndarray, vals: np.ndarray) -> Acker:
    acker = Acker()
    for start in range(0, len(roots), 1_000_000):  # arrive in waves of inits
        end = start + 1_000_000
        acker.handle(Init(roots[start:end], vals[start:end], np.full(len(roots[start:end]), 1)))
    return acker


def plan_waves(rng, roots, vals, waves):
    """Per wave: rows for existing roots (half completing) and replacement inits."""
    n = len(roots)
    live = np.arange(n)
    plans = []
    for _ in range(waves):
        pick = rng.choice(len(live), WAVE, replace=False)
        idx = live[pick]
        finishing = idx[: WAVE // 2]
        partial = idx[WAVE // 2 :]
        x = random_ids(rng, len(partial))
        ack_roots = np.concatenate([roots[finishing], roots[partial]])
        ack_vals = np.concatenate([vals[finishing], x])
        vals[partial] ^= x
        new_roots = random_ids(rng, len(finishing))
        new_vals = random_ids(rng, len(finishing))
        plans.append((ack_roots, ack_vals, new_roots, new_vals))
        live = np.setdiff1d(live, finishing, assume_unique=True)
    return plans


def run_acker(acker: Acker, plans) -> tuple[float, int]:
    rows = 0
    start = time.perf_counter()
    for ack_roots, ack_vals, new_roots, new_vals in plans:
        none = np.zeros(len(ack_roots), bool)
        settled = acker.handle(Acks(AckBatch(ack_roots, ack_vals, none, none)))
        acker.handle(Init(new_roots, new_vals, np.full(len(new_roots), 1)))
        assert len(settled.where(ACKED)) == WAVE // 2
        rows += len(ack_roots) + len(new_roots)
    return time.perf_counter() - start, rows


def run_dict(pending: dict, plans) -> tuple[float, int]:
    """The same waves against ``{root: [value, spout_task, failed]}``, Storm's shape."""
    rows = 0
    start = time.perf_counter()
    for ack_roots, ack_vals, new_roots, new_vals in plans:
        completed = 0
        for root, val in zip(ack_roots.tolist(), ack_vals.tolist(), strict=True):
            entry = pending[root]
            entry[0] ^= val
            if entry[0] == 0:
                del pending[root]
                completed += 1
        for root, val in zip(new_roots.tolist(), new_vals.tolist(), strict=True):
            pending[root] = [val, 1, False]
        assert completed == WAVE // 2
        rows += len(ack_roots) + len(new_roots)
    return time.perf_counter() - start, rows


def small_merge_micros(rows: int, in_c: bool, seconds: float = 1.0) -> float:
    """Microseconds a merge of ``rows`` rows takes, an acker holding ``SMALL_PENDING`` trees (its roots drawn in
    order, as a spout worker's are): acks completing the oldest trees, then inits of as many new ones."""
    saved = acker_module._merge_in_c  # None: the numpy path, as where the extensions are not built
    if not in_c:
        acker_module._merge_in_c = None
    try:
        rng = np.random.default_rng(rows)
        acker, started, next_root = Acker(), [], 1 << 40
        none = np.zeros(rows, bool)
        tasks = np.zeros(rows, np.int64)

        def start() -> None:
            nonlocal next_root
            roots = np.arange(next_root, next_root + rows, dtype=np.uint64)
            vals = random_ids(rng, rows)
            next_root += rows
            acker.handle(Init(roots, vals, tasks))
            started.append((roots, vals))

        for _ in range(SMALL_PENDING // rows):
            start()
        merges, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            roots, vals = started.pop(0)
            settled = acker.handle(Acks(AckBatch(roots, vals, none, none)))
            assert len(settled) == rows
            start()
            merges += 2
        return (time.perf_counter() - begin) / merges * 1e6
    finally:
        acker_module._merge_in_c = saved


def held_bytes(build) -> tuple[object, int]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    obj = build()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return obj, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--dict-max", type=int, default=1_000_000, help="largest size to run the dict at")
    parser.add_argument("--small-rows", default="10,50,200,1000", help="rows a merge in the small-batch runs")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    print(f"cores_used=1 wave_rows={WAVE} waves={args.waves}")
    for n in (int(s) for s in args.sizes.split(",")):
        rng = np.random.default_rng(n)
        roots, vals = random_ids(rng, n), random_ids(rng, n)
        acker, held = held_bytes(lambda: filled_acker(roots, vals))  # noqa: B023
        assert len(acker) == n
        print(f"pending_roots={n}")
        print(f"bytes_per_pending_root={held / n:.2f}")
        print(f"column_bytes_per_pending_root={acker.nbytes / n:.2f}")
        plans = plan_waves(rng, roots, vals.copy(), args.waves)
        seconds, rows = run_acker(acker, plans)
        rate = rows / seconds
        print(f"acks_per_second={rate:,.0f}".replace(",", "_"))
        print(f"bytes_per_pending_root_after_waves={acker.nbytes / len(acker):.2f}")
        if n <= args.dict_max:
            pending, dict_held = held_bytes(
                lambda: {r: [v, 1, False] for r, v in zip(roots.tolist(), vals.tolist(), strict=True)}  # noqa: B023
            )
            dict_seconds, dict_rows = run_dict(pending, plans)
            dict_rate = dict_rows / dict_seconds
            print(f"dict_bytes_per_pending_root={dict_held / n:.2f}")
            print(f"dict_acks_per_second={dict_rate:,.0f}".replace(",", "_"))
            print(f"speedup_vs_dict={rate / dict_rate:.1f}")
            print(f"memory_ratio_vs_dict={held / dict_held:.3f}")
            del pending
        del acker, plans
        gc.collect()
    if acker_module._merge_in_c is None:
        print("small_merges=skipped (the C merge is not built)")
        return
    for rows in (int(r) for r in args.small_rows.split(",") if r):
        micros = {way: [] for way in ("c", "numpy")}
        for _ in range(3):  # alternated, so that both meet the host's same moments
            micros["c"].append(small_merge_micros(rows, in_c=True))
            micros["numpy"].append(small_merge_micros(rows, in_c=False))
        c, numpy_path = min(micros["c"]), min(micros["numpy"])
        print(f"small_merge_rows={rows} c_us_per_merge={c:.1f} numpy_us_per_merge={numpy_path:.1f}")
        print(f"small_merge_rows={rows} numpy_vs_c_time={numpy_path / c:.2f}")


if __name__ == "__main__":
    main()
