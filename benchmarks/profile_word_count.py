"""Where the time goes: the benchmark's word count under cProfile (the driver) and Spark's Python profiler (the
worker tasks, reported once the run's worker job ends).

    python benchmarks/profile_word_count.py [--words 400000] [--top 15] [--conf squall.workers=2]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time

from word_count import Sentences, make_sentences, topology

from squall.spark.context import spark_context
from squall.testing import TestCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--words", type=int, default=400_000)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--conf", action="append", default=[], help="key=value (JSON value), repeatable")
    args = parser.parse_args()
    conf = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.conf)}
    sc, _ = spark_context("local[2]", settings={"spark.python.profile": "true"})
    sentences = make_sentences(args.words)
    spout = Sentences(sentences)
    profile = cProfile.Profile()
    with TestCluster() as cluster:
        run = cluster.submit_topology("profile", conf, topology(spout))
        started = time.perf_counter()
        profile.enable()
        cluster.wait_idle()
        profile.disable()
        total = time.perf_counter() - started
        waves, workers = run.stats.waves, run.scheduler.workers
    words = len(sentences) * 8
    print(f"words={words} workers={workers} waves={waves} seconds={total:.2f} words_per_second={words / total:.0f}")
    print(f"mean_wave_ms={total / waves * 1000:.1f} final_wave_size={run.sizer.size}")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print("== driver (cProfile, by own time) ==")
    print(out.getvalue())
    print("== worker tasks (Spark's Python profiler, summed, by own time) ==")
    worker = None
    for _, profiler, _ in sc.profiler_collector.profilers:
        stats = profiler.stats()
        if stats is not None:
            worker = stats if worker is None else worker.add(stats)
    if worker is not None:
        worker.stream = io.StringIO()
        worker.sort_stats("tottime").print_stats(args.top)
        print(worker.stream.getvalue())
    sc.stop()


if __name__ == "__main__":
    main()
