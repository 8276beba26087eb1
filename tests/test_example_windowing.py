"""storm-starter's windowing topologies (``examples/sliding_windows.py``), with their exact outputs."""

from __future__ import annotations

import math
from pathlib import Path

from squall.runner import load_module
from squall.testing import TestCluster

EXAMPLE = load_module(Path(__file__).parent.parent / "examples" / "sliding_windows.py")


def run_until(conf: dict, component: str, outputs: int) -> tuple[list, object]:
    topology = EXAMPLE.build_topology(conf)
    with TestCluster() as cluster:
        run = cluster.submit_for_capture("windows", {**EXAMPLE.CONF, **conf}, topology)
        while len(run.captured[component]) < outputs:  # the integers never end: waves one at a time
            cluster.clock.set(cluster.clock.now() + 0.25)  # the watermarks' ticks come with the topology's clock
            run.step()
        captured = {name: list(rows) for name, rows in run.captured.items()}
        stats = run.stats
    return captured, stats


def test_sliding_window_topology_sums_the_last_30_every_10_and_averages_every_3_sums(spark):
    captured, stats = run_until({}, "tumblingavg", 20)
    value = EXAMPLE.value_of
    sums = [sum(value(n) for n in range(max(1, 10 * k - 29), 10 * k + 1)) for k in range(1, 61)]
    assert [s for (s,) in captured["slidingsum"][:60]] == sums
    averages = [(sums[i] + sums[i + 1] + sums[i + 2]) // 3 for i in range(0, 60, 3)]
    assert [a for (a,) in captured["tumblingavg"][:20]] == averages
    assert stats.of("integer").failed == 0


def test_sliding_tuple_ts_topology_sums_each_5_seconds_of_event_time_every_3(spark):
    captured, stats = run_until({"example.windows": "event"}, "slidingsum", 30)
    first = math.ceil(EXAMPLE.ts_of(1) / 3000) * 3000  # windows end on multiples of the 3 s slide
    ends = [first + 3000 * k for k in range(30)]
    by_ts = {EXAMPLE.ts_of(n): EXAMPLE.value_of(n) for n in range(1, 2000)}
    expected = [sum(v for ts, v in by_ts.items() if end - 5000 < ts <= end) for end in ends]
    assert [s for (s,) in captured["slidingsum"][:30]] == expected
    assert stats.of("integer").failed == 0
