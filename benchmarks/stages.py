"""Where a word's time goes in the workers, stage by stage: the benchmark's acked word count (as users write it)
on a ``LocalCluster``, with py-spy sampling both Python workers while it runs.

    python benchmarks/stages.py [--words 12000000] [--secs 10] [--rate 200] [--keep DIR] [--paced SENTENCES_PER_SEC]

With ``--paced``, the spout gives that many sentences a second, as the latency runs of ``word_count.py`` do, and
the µs a word are those of a lightly loaded topology: what each wave, part and message costs shows. Pausing the
workers 200 times a second would put a paced run behind its pace, so ``--nonblocking`` samples without pausing
them and without ``--native`` (the compiled stages then show as the Python that calls them).

py-spy samples with ``--native``, so that the compiled modules' own lines show; that pauses each worker at every
sample, so the run is slower than an unsampled one: read the shares, and the µs a word as what each stage takes of
the serving threads at the sampled run's rate. Only the serving thread (the one that runs the spout, the acker and
the bolts) is counted; the link readers' threads are not. Attaching needs root or ptrace permission.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from word_count import WORDS_PER_SENTENCE, Sentences, make_sentences, topology

from squall import LocalCluster
from squall.spark.context import spark_context

# Each sample goes to the first stage that one of its frames names, from the innermost frame out.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("gc", ("gc_collect",)),
    ("user: split's str.split", ("unicode_split",)),
    ("across a link: pickling, sealing, the socket", ("_pickle.c", "PeerLinks.send", "Session.seal", "encode (")),
    ("a Tuple made per row", ("tuple_row_tuple", "AllocateExtensionType")),
    (
        "emit: check, route, append (compiled)",
        ("emit (squall/spark/collectors", "EmitChecker", "hashing", "keyhash", "_plain_values", "_Open", "Shuffle"),
    ),
    ("ack in the bolts", ("ack (squall/spark/collectors", "ack_batch")),
    (
        "acks: edges drawn, XOR fold, acker messages",
        ("take_acks", "draw_edges", "_seal", "next_ids", "IdGenerator", "AckBatch", "_send_acks"),
    ),
    ("the acker: applying acks, settling trees", ("merge_acks", "Acker.", "PendingTrees", "settle", "acker_input")),
    ("spout: next_tuple, its emit, the wave's log", ("next_tuple", "SpoutHost", "SpoutOutputCollector", "run_wave")),
    ("user: count's body", ("Count.execute",)),
    ("user: split's body", ("Split.execute",)),
    ("user: sink's body", ("Sink.execute",)),
    ("the row loop (compiled)", ("execute_batch",)),
    ("serving: inbox, gate, freeing batches", ("Worker.", "WaveGate", "Inbox")),
]


def stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, marks in STAGES:
            if any(mark in frame for mark in marks):
                return name
    return "other"


def shares(paths: list[Path]) -> tuple[Counter, int]:
    """Samples of the workers' serving threads (those under ``run_worker``) per stage, and their total."""
    counts: Counter = Counter()
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            frames = stack.split(";")
            if not any("run_worker" in frame for frame in frames):
                continue
            counts[stage_of(frames)] += int(n)
            total += int(n)
    return counts, total


def sample(pids: list[int], secs: float, rate: int, directory: Path, nonblocking: bool = False) -> list[Path]:
    outputs = [directory / f"worker-{pid}.txt" for pid in pids]
    how = ["--nonblocking"] if nonblocking else ["--native"]
    command = [Path(sys.executable).parent / "py-spy", "record", *how, "--format", "raw"]
    procs = [
        subprocess.Popen(
            [*map(str, command), "--pid", str(pid), "--duration", str(secs), "--rate", str(rate), "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid, out in zip(pids, outputs, strict=True)
    ]
    for proc in procs:
        proc.wait()
    return [out for out in outputs if out.exists()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--words", type=int, default=12_000_000)
    parser.add_argument("--secs", type=int, default=10, help="how long py-spy samples, once the run is going")
    parser.add_argument("--rate", type=int, default=200, help="py-spy's samples a second")
    parser.add_argument("--keep", help="a directory to keep py-spy's raw samples in")
    parser.add_argument("--paced", type=int, help="sentences a second from the spout (default: as fast as it goes)")
    parser.add_argument("--nonblocking", action="store_true", help="sample without pausing the workers, nor --native")
    args = parser.parse_args()
    sc, _ = spark_context("local[2]")
    if args.paced:  # enough for the sampled seconds and the start before them
        args.words = args.paced * (args.secs + 15) * WORDS_PER_SENTENCE
    sentences = make_sentences(args.words)
    directory = Path(args.keep or tempfile.mkdtemp(prefix="squall-stages-"))
    directory.mkdir(parents=True, exist_ok=True)
    with LocalCluster() as cluster:
        cluster.submit_topology("warm", {}, topology(Sentences(sentences[:50_000])))
        cluster.wait_idle("warm")
        cluster.kill_topology("warm")
        run = cluster.submit_topology("stages", {}, topology(Sentences(sentences, rate=args.paced)))
        while run.stats.of("sentences").acked < len(sentences) // 10:
            time.sleep(0.05)
        pids = [summary.pid for summary in run.scheduler.worker_summaries()]
        acked_before, started = run.stats.of("sentences").acked, time.monotonic()
        found = sample(pids, args.secs, args.rate, directory, args.nonblocking)
        words = (run.stats.of("sentences").acked - acked_before) * WORDS_PER_SENTENCE
        elapsed = time.monotonic() - started
        stats = run.stats.of("sentences")
        p50, p99 = stats.latency_percentile(50), stats.latency_percentile(99)
        cluster.kill_topology("stages")
    sc.stop()
    counts, total = shares(found)
    if not total:
        sys.exit("py-spy took no sample of the workers (it needs root or ptrace permission)")
    serving_secs = total / args.rate
    print(f"stages_sampled_words_per_second={words / elapsed:.0f}")
    print(f"stages_serving_thread_us_per_word={serving_secs / words * 1e6:.2f}")
    print(f"stages_complete_latency_p50_ms={p50:.1f} p99_ms={p99:.1f}")
    for name, n in counts.most_common():
        print(f"stage share={100 * n / total:5.1f}% us_per_word={serving_secs * n / total / words * 1e6:.2f} {name}")
    print(f"raw samples in {directory}")


if __name__ == "__main__":
    main()
