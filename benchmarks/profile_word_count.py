"""Where a wave's time goes: the benchmark's word count under cProfile (driver) and Spark's Python profiler
(workers), with the wave's wall time split into driver work and the Spark job.

    python benchmarks/profile_word_count.py [--words 200000] [--batch 1000] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from word_count import Sentences, make_sentences, topology

from squall.spark import wave as wave_module
from squall.spark.context import spark_context
from squall.testing import TestCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--words", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000, help="squall.wave.spout.batch")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    sc, _ = spark_context("local[2]", settings={"spark.python.profile": "true"})
    sentences = make_sentences(args.words)

    in_jobs = 0.0
    run_wave = wave_module.run_wave

    def timed_run_wave(*a, **k):
        nonlocal in_jobs
        started = time.perf_counter()
        try:
            return run_wave(*a, **k)
        finally:
            in_jobs += time.perf_counter() - started

    import squall.spark.driver as driver_module

    driver_module.run_wave = timed_run_wave
    spout = Sentences(sentences)
    profile = cProfile.Profile()
    with TestCluster() as cluster:
        run = cluster.submit_topology("profile", {"squall.wave.spout.batch": args.batch}, topology(spout))
        started = time.perf_counter()
        profile.enable()
        cluster.wait_idle()
        profile.disable()
        total = time.perf_counter() - started
        waves = run.stats.waves
    words = len(sentences) * 8
    print(f"words={words} waves={waves} seconds={total:.1f} words_per_second={words / total:.0f}")
    print(f"per_wave_ms={total / waves * 1000:.0f} in_spark_job_share={in_jobs / total:.2f}")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print("== driver (cProfile, by own time) ==")
    print(out.getvalue())
    print("== Python workers (Spark's profiler, summed over tasks, by own time) ==")
    worker = None
    for _, profiler, _ in sc.profiler_collector.profilers:
        stats = profiler.stats()
        if stats is None:
            continue
        worker = stats if worker is None else worker.add(stats)
    if worker is not None:
        worker.stream = io.StringIO()
        worker.sort_stats("tottime").print_stats(args.top)
        print(worker.stream.getvalue())
    sc.stop()


if __name__ == "__main__":
    main()
