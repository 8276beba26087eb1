"""Trident's word count against the core acked word count, on ``benchmarks/word_count.py``'s data, in one run.

    spout (2 partitions) -> each(Split) -> group_by(word) -> persistent_aggregate(MemoryMapState, Count)

timed from submit to the last sentence committed, against the acked core word count (split, count, sink) on the
same sentences. The counts are read back through DRPC (``TupleCollectionGet``) and checked against the exact ones.
Prints one ``name=value`` per line.

    python benchmarks/trident.py [--words 2000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from word_count import WORDS_PER_SENTENCE, make_sentences, squall_throughput

from squall import LocalCluster
from squall.drpc import LocalDRPC
from squall.transactional import MemoryTransactionalSpout
from squall.trident import BaseFunction, TridentTopology
from squall.trident.builtin import Count, TupleCollectionGet
from squall.trident.testing import MemoryMapState


class Split(BaseFunction):
    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit([word])


def trident_word_count(sentences: list[str], conf: dict | None = None) -> float:
    """Seconds from submitting to every sentence committed; the counts are checked."""
    half = len(sentences) // 2
    spout = MemoryTransactionalSpout(
        {0: [[s] for s in sentences[:half]], 1: [[s] for s in sentences[half:]]}, ["sentence"]
    )
    with LocalDRPC() as drpc, LocalCluster() as cluster:
        topology = TridentTopology()
        counts = (
            topology.new_stream("trident-words", spout)
            .parallelism_hint(2)
            .each(["sentence"], Split(), ["word"])
            .group_by(["word"])
            .persistent_aggregate(MemoryMapState.Factory(), Count(), ["count"])
            .parallelism_hint(2)
        )
        topology.new_drpc_stream("all", drpc).broadcast().state_query(
            counts, ["args"], TupleCollectionGet(), ["word", "count"]
        ).project(["word", "count"])
        started = time.perf_counter()
        run = cluster.submit_topology("trident", {"topology.max.spout.pending": 4, **(conf or {})}, topology.build())
        while sum(tuples for _, tuples, _ in list(run.commits)) < len(sentences):
            if cluster.failures:
                raise RuntimeError(f"the benchmark topology failed: {cluster.failures}")
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        counted = dict(json.loads(drpc.execute("all", "")))
    if counted != Counter(w for s in sentences for w in s.split(" ")):
        raise RuntimeError("the Trident word count is not exact")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sentences = make_sentences(args.words)
    words = len(sentences) * WORDS_PER_SENTENCE
    acked, trident = [], []
    for _ in range(args.rounds):  # interleaved: a slow minute of the host falls on both
        acked.append(squall_throughput(sentences, {}, shuffled_sink=True)[0])
        trident.append(trident_word_count(sentences))
    print(f"core_acked_words_per_second={words / min(acked):.0f}")
    print(f"trident_memory_map_words_per_second={words / min(trident):.0f}")
    print(f"trident_memory_map_vs_core_acked_throughput={min(acked) / min(trident):.2f}")


if __name__ == "__main__":
    main()
