"""Pipelined transactions: batches per second for max pending = 1, 2, 4 and 8.

The processing phase of each batch waits about 1 s on a (simulated) external
call; the commit phase takes about 0.2 s (a slow database). Processing runs for
up to ``topology.max.spout.pending`` batches at once; commits stay in order.
Then the same batches with no simulated wait at all: what a batch costs by
itself, from the moment it begins to its commit (the median over the batches).
Prints one ``name=value`` per line, in one run.

    python benchmarks/pipelining.py [--batches 40] [--master local[8]]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from squall.spark.context import spark_context
from squall.testing import TestCluster
from squall.transactional import BatchBolt, Committer, MemoryTransactionalSpout, TransactionalTopologyBuilder

PROCESS_SECS = 1.0
COMMIT_SECS = 0.2


class SlowLookup(BatchBolt):
    outputs = ("id", "n")

    def __init__(self, wait: float = PROCESS_SECS) -> None:
        self.wait = wait

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id, self.n = collector, batch_id, 0

    def execute(self, tup):
        self.n += 1

    def finish_batch(self):
        time.sleep(self.wait)  # an external call for the whole batch
        self.collector.emit([self.id, self.n])


class SlowCommit(BatchBolt, Committer):
    outputs = ("id", "total")

    def __init__(self, wait: float = COMMIT_SECS) -> None:
        self.wait = wait

    def prepare(self, conf, context, collector, batch_id):
        self.n = 0

    def execute(self, tup):
        self.n += tup[1]

    def finish_batch(self):
        time.sleep(self.wait)  # a slow database


def measure(max_pending: int, batches: int, waits: bool = True, latencies: list | None = None) -> float:
    data = {0: [[i] for i in range(batches * 10)]}
    b = TransactionalTopologyBuilder(f"pipelining-{max_pending}", "spout", MemoryTransactionalSpout(data, ["n"], 10))
    b.set_bolt("lookup", SlowLookup(PROCESS_SECS if waits else 0)).shuffle_grouping("spout")
    b.set_bolt("commit", SlowCommit(COMMIT_SECS if waits else 0)).global_grouping("lookup")
    conf = {
        "topology.max.spout.pending": max_pending,
        "squall.transactional.store": tempfile.mkdtemp(prefix="squall-bench-") + "/coordinator.sqlite",
    }
    with TestCluster() as cluster:
        run = cluster.submit_topology("bench", conf, b.build())
        if latencies is not None:  # each batch's seconds from its beginning to its commit
            run.on_commit.append(lambda attempt, tuples, captured: latencies.append(run.recent_commits()[0][2]))
        started = time.perf_counter()
        while run.coordinator.last_committed < batches:
            if run.step().idle:
                time.sleep(0.005)
        return batches / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--master", default="local[8]")
    args = parser.parse_args()
    spark_context(args.master)
    rates = {}
    for pending in (1, 2, 4, 8):
        rates[pending] = measure(pending, args.batches)
        print(f"max_pending_{pending}_batches_per_second={rates[pending]:.3f}")
    for pending in (2, 4, 8):
        print(f"speedup_{pending}_vs_1={rates[pending] / rates[1]:.2f}")
    for pending in (1, 4):
        latencies: list[float] = []
        rate = measure(pending, args.batches * 10, waits=False, latencies=latencies)
        print(f"no_wait_max_pending_{pending}_batches_per_second={rate:.2f}")
        print(f"no_wait_max_pending_{pending}_begin_to_commit_ms_p50={statistics.median(latencies) * 1000:.1f}")


if __name__ == "__main__":
    main()
