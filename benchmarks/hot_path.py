"""The workers' per-word Python, without Spark: the word count's bolt tasks run their batches in this process.

The benchmark's topology (``word_count.py``) as its two workers run it: a wave of sentence rows (each the root
of a tree) through ``split``, its batches to the two ``count`` tasks, ``count``'s to the two ``sink`` tasks (a
batch between tasks of different workers through the wire's pickling), then every task's acks reduced.
Nothing else runs, so the figure is the framework's Python per word plus the bolts' own bodies, which
``word_count.py``'s runs spread over processes, threads and sockets.

It also prints the time the cyclic garbage collector took (``hot_path_gc_us_per_word``), with the collector set as
a worker sets it (``squall.worker.gc.threshold``, 50,000 by default) or, with ``--gc-threshold N``, at ``N``
(0: Python's own settings).

With ``--no-acking`` the tasks run as with ``topology.acker.executors: 0``: no edges, no acks.

``hot_path_spout_us_per_sentence`` is the spout's side, which the line above leaves out: the benchmark's
``Sentences`` spout called as a worker calls it (``SpoutHost.call``), one sentence a ``next_tuple``, each a new
tree, then its wave taken (edges drawn) and the trees' inits merged into their acker, per sentence.

``hot_path_bodies_only_us_per_word`` is the floor under both: the same three bolts' ``execute`` called from a plain
loop, each tuple a minimal object and each emit appended to a list, with no routing, batch, link or ack.

    python benchmarks/hot_path.py [--words 400000] [--gc-threshold 50000] [--no-acking] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pickle
import pstats
import time

from word_count import Sentences, make_sentences, topology

from squall.model.config import DEFAULTS, SQUALL_WORKER_GC_THRESHOLD
from squall.spark.bolt_task import BoltTask
from squall.spark.execution import execute_batch
from squall.spark.protocol import HEADER, Batch, RunSettings, encode
from squall.spark.shipping import ShippedTopology, pack
from squall.spark.spouts import SpoutHost
from squall.spark.stats import RunStats
from squall.spark.trees import PendingTrees
from squall.spark.worker import collector_tuned
from squall.spark.worker_spouts import TopologyTime

WAVE_SENTENCES = 2_000


def tasks_of(built, acking: bool = True) -> dict[str, list[BoltTask]]:
    stripped = built.with_objects(dict.fromkeys(built.components))
    blobs = {c: pack(built.components[c].obj) for c in ("split", "count", "sink")}
    shipped = ShippedTopology(stripped, {}, blobs)
    settings = RunSettings("hot-path", 7, acking=acking, capture=False)
    workers = [frozenset(built.task_ids(c)[i] for c in ("split", "count", "sink")) for i in range(2)]
    return {
        c: [BoltTask(shipped, c, t, settings, workers[i]) for i, t in enumerate(built.task_ids(c))]
        for c in ("split", "count", "sink")
    }


def run(sentences: list[str], tasks: dict[str, list[BoltTask]], spout_task: int) -> None:
    by_id = {task.task: task for group in tasks.values() for task in group}
    worker_of = {task.task: i for group in tasks.values() for i, task in enumerate(group)}  # task i on worker i
    for wave, start in enumerate(range(0, len(sentences), WAVE_SENTENCES), 1):
        for task in by_id.values():
            task.begin_wave(0, wave)
        rows = sentences[start : start + WAVE_SENTENCES]
        for i, task in enumerate(tasks["split"]):
            mine = rows[i :: len(tasks["split"])]
            batch = Batch(0, wave, spout_task, "sentences", spout_task, task.task)
            for n, sentence in enumerate(mine, 1):
                batch.add("default", (sentence,), root=(wave << 32) | n, edge=n)
            execute_batch(task, batch)
        for stage in ("split", "count"):
            for task in tasks[stage]:
                for batch in task.collector.take_batches():
                    if worker_of[task.task] != worker_of[batch.target]:  # through the wire, as between workers
                        batch = pickle.loads(encode(batch, 0)[HEADER.size :])
                    execute_batch(by_id[batch.target], batch)
        for task in by_id.values():
            task.collector.take_batches()
            task.collector.take_acks()


def spout_path(sentences: list[str], acking: bool = True) -> float:
    """Seconds a sentence of the spout's side: ``next_tuple`` and its emit, the wave taken, the inits merged."""
    built = topology(Sentences(sentences))
    spout = built.components["sentences"].obj
    trees = PendingTrees(num_ackers=2, ackers=[0]) if acking else None
    host = SpoutHost(
        built,
        {},
        RunStats(),
        trees,
        TopologyTime(),
        None,
        None,
        tasks=list(built.task_ids("sentences")),
        make_spout=lambda *_: pickle.loads(pack(spout)),
    )
    started = time.perf_counter()
    while host.call(WAVE_SENTENCES * 5):
        host.take_wave()
        host.merge_inits()
    return (time.perf_counter() - started) / len(sentences)


class _Row:
    """The least a bolt's ``execute`` needs of a tuple here: its values by index."""

    __slots__ = ("values",)

    def __init__(self, values: tuple) -> None:
        self.values = values

    def __getitem__(self, index: int):
        return self.values[index]


class _ListCollector:
    """Emits appended to a list; acks dropped."""

    def __init__(self) -> None:
        self.emitted: list[tuple] = []

    def emit(self, values, anchors=None, stream="default"):
        self.emitted.append(tuple(values))

    def ack(self, tup) -> None:
        pass


def bodies_only(sentences: list[str]) -> float:
    """Seconds the word count's three bolt bodies take over ``sentences``, called from a plain loop."""
    built = topology(Sentences([]))
    split, count, sink = (pickle.loads(pack(built.components[c].obj)) for c in ("split", "count", "sink"))
    collector = _ListCollector()
    count.prepare({}, None, collector)
    started = time.perf_counter()
    for sentence in sentences:
        split.execute(_Row((sentence,)), collector)
    words, collector.emitted = collector.emitted, []
    for word in words:
        count.execute(_Row(word))
    pairs, collector.emitted = collector.emitted, []
    for pair in pairs:
        sink.execute(_Row(pair), collector)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--words", type=int, default=400_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-acking", dest="acking", action="store_false", help="as with 0 acker executors")
    parser.add_argument(
        "--gc-threshold",
        type=int,
        default=DEFAULTS[SQUALL_WORKER_GC_THRESHOLD],
        help="as squall.worker.gc.threshold; 0: Python's own collector settings",
    )
    args = parser.parse_args()
    with collector_tuned(args.gc_threshold or None):
        measure(args)


class CollectorTime:
    """Seconds the cyclic garbage collector took, from its callbacks."""

    def __init__(self) -> None:
        self.seconds, self._started = 0.0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def measure(args: argparse.Namespace) -> None:
    sentences = make_sentences(args.words)
    built = topology(Sentences([]))
    spout_task = built.task_ids("sentences")[0]
    run(sentences[:20_000], tasks_of(built, args.acking), spout_task)  # warm up
    best, collector = float("inf"), CollectorTime()
    for _ in range(3):
        tasks = tasks_of(built, args.acking)
        started, collected = time.perf_counter(), collector.seconds
        run(sentences, tasks, spout_task)
        if time.perf_counter() - started < best:
            best, gc_seconds = time.perf_counter() - started, collector.seconds - collected
    words = len(sentences) * 8
    print(f"hot_path_us_per_word={best / words * 1e6:.3f}")
    print(f"hot_path_gc_us_per_word={gc_seconds / words * 1e6:.3f}")
    spout = min(spout_path(sentences, args.acking) for _ in range(3))
    print(f"hot_path_spout_us_per_sentence={spout * 1e6:.3f}")
    floor = min(bodies_only(sentences) for _ in range(3))
    print(f"hot_path_bodies_only_us_per_word={floor / words * 1e6:.3f}")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run, sentences, tasks_of(built, args.acking), spout_task)
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
