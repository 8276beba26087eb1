"""Word count throughput: squall (with and without acking) against a plain PySpark job.

All runs share one local Spark context and the same sentences; figures are
ratios within this run. Prints one ``name=value`` per line.

    python benchmarks/word_count.py [--sentences 20000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import operator
import time
from pathlib import Path

from squall import BasicBolt, TopologyBuilder
from squall.runner import load_module
from squall.spark.context import spark_context
from squall.testing import FeederSpout, TestCluster

# The example's sentences and split bolt; its count bolt writes to SQLite, this one only counts.
EXAMPLE = load_module(Path(__file__).parent.parent / "examples" / "word_count.py")
SENTENCES, Split = EXAMPLE.SENTENCES, EXAMPLE.SplitSentence


class Count(BasicBolt):
    outputs = ("word", "count")

    def prepare(self, conf, context):
        self.counts = {}

    def execute(self, tup, collector):
        word = tup[0]
        self.counts[word] = self.counts.get(word, 0) + 1


def squall_run(sentences: list[str], conf: dict) -> tuple[float, int]:
    feeder = FeederSpout(["sentence"])
    b = TopologyBuilder()
    b.set_spout("sentences", feeder)
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    with TestCluster() as cluster:
        run = cluster.submit_topology("bench", conf, b.build())
        for s in sentences:
            feeder.feed([s])
        started = time.perf_counter()
        cluster.wait_idle()
        seconds = time.perf_counter() - started
        assert run.stats.of("count").executed == sum(len(s.split(" ")) for s in sentences)
        if conf.get("topology.acker.executors", 1):
            assert len(feeder.acked) == len(sentences)
        return seconds, run.stats.waves


def pyspark_run(sc, sentences: list[str]) -> float:
    started = time.perf_counter()
    counts = (
        sc.parallelize(sentences, 2)
        .flatMap(lambda s: s.split(" "))
        .map(lambda w: (w, 1))
        .reduceByKey(operator.add, 2)
        .collectAsMap()
    )
    seconds = time.perf_counter() - started
    assert sum(counts.values()) == sum(len(s.split(" ")) for s in sentences)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    sc, _ = spark_context(args.master)
    sentences = [SENTENCES[i % len(SENTENCES)] for i in range(args.sentences)]
    pyspark_run(sc, sentences[:1000])  # warm up the Python workers
    plain = min(pyspark_run(sc, sentences) for _ in range(3))
    print(f"sentences={len(sentences)}")
    print(f"pyspark_sentences_per_second={len(sentences) / plain:.0f}")
    for label, conf in [
        ("squall_acked_wave1000", {"squall.wave.spout.batch": 1000}),
        ("squall_acked_wave10000", {"squall.wave.spout.batch": 10000}),
        ("squall_unacked_wave10000", {"squall.wave.spout.batch": 10000, "topology.acker.executors": 0}),
    ]:
        seconds, waves = squall_run(sentences, conf)
        print(f"{label}_sentences_per_second={len(sentences) / seconds:.0f}")
        print(f"{label}_waves={waves}")
        print(f"{label}_ratio_to_pyspark={plain / seconds:.3f}")
    sc.stop()


if __name__ == "__main__":
    main()
