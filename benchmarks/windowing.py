"""Sliding count windows: does a window's length cost throughput?

    integers (spout, emits in bulk) --shuffle--> window (1 task)

The windowed bolt slides every 1,000 tuples over the last 1,000, 10,000 and 100,000, keeping a running sum from
``get_new()`` and ``get_expired()`` as a user who cares about speed writes it; tuples are acked as they expire.
Each length runs ``--tuples`` tuples under ``LocalCluster`` (``local[2]``), timed from the first window's firing
until the bolt has taken every tuple. Prints tuples/s per length and the ratio of the longest to the shortest.

    python benchmarks/windowing.py [--tuples 2000000] [--lengths 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from squall import Count, LocalCluster, Spout, TopologyBuilder, WindowedBolt

SLIDE = 1000


class Integers(Spout):
    """0, 1, 2, ... up to ``total``, tracked, as many per call as the collector's budget allows."""

    outputs = ("n",)

    def __init__(self, total: int) -> None:
        self.total = total

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        end = min(self.total, self.next + self.collector.emit_budget)
        if end > self.next:
            numbers = range(self.next, end)
            self.collector.emit_many([(n,) for n in numbers], list(numbers))
            self.next = end


class RunningSum(WindowedBolt):
    """The window's sum, kept from what enters and leaves it; the time of each firing goes to a file."""

    outputs = ()

    def __init__(self, record: str) -> None:
        self.record = record

    def prepare(self, conf, context, collector):
        self.sum = self.seen = 0
        self.file = open(self.record, "a")  # noqa: SIM115 - lives as long as the task

    def execute(self, window):
        new = window.get_new()
        self.sum += sum(t[0] for t in new) - sum(t[0] for t in window.get_expired())
        self.seen += len(new)
        self.file.write(f"{time.perf_counter()} {self.seen}\n")
        self.file.flush()


def rate(length: int, tuples: int, directory: Path) -> float:
    record = directory / f"firings-{length}"
    record.touch()
    b = TopologyBuilder()
    b.set_spout("integers", Integers(tuples))
    b.set_bolt("window", RunningSum(str(record)).with_window(Count(length), Count(SLIDE))).shuffle_grouping("integers")
    conf = {"topology.max.spout.pending": length + 20 * SLIDE, "topology.message.timeout.secs": 300}
    with LocalCluster({"squall.spark.master": "local[2]"}) as cluster:
        cluster.submit_topology(f"windows-{length}", conf, b.build())
        while True:
            lines = record.read_text().split("\n")[:-1]
            if lines and int(lines[-1].split()[1]) >= tuples:
                break
            assert not cluster.failures, cluster.failures
            time.sleep(0.05)
        cluster.kill_topology(f"windows-{length}", wait_secs=0)
    (first_time, first_seen), (last_time, last_seen) = (
        tuple(map(float, line.split())) for line in (lines[0], lines[-1])
    )
    return (last_seen - first_seen) / (last_time - first_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuples", type=int, default=2_000_000)
    parser.add_argument("--lengths", default="1000,10000,100000")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rate(lengths[0], args.tuples // 10, Path(tmp))  # warm-up: the workers start, imports load
        rates = {length: rate(length, args.tuples, Path(tmp)) for length in lengths}
    print(f"tuples={args.tuples}")
    print(f"slide={SLIDE}")
    for length, value in rates.items():
        print(f"window_{length}_tuples_per_second={value:,.0f}")
    print(f"window_{lengths[-1]}_vs_{lengths[0]}_throughput={rates[lengths[-1]] / rates[lengths[0]]:.2f}")
    print(f"cpus={os.cpu_count()}")


if __name__ == "__main__":
    main()
