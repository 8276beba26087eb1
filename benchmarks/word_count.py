"""Word count throughput and latency: squall against plain PySpark on the same data, in one run.

Sentences of 8 words from a 10,000-word vocabulary. squall runs the topology as users write it:

    sentences (one a next_tuple) --shuffle--> split (2) --fields(word)--> count (2) --shuffle--> sink (2)

where count emits ``(word, count)`` anchored to its input and acks it, and the sink acks. Every run is one more
topology submitted to the same ``LocalCluster``, one after another, as a notebook user does, and killed once its
last sentence is acked. Against it, two plain PySpark jobs over the same sentences on the same SparkContext: one
with ``reduceByKey`` (combining words before the shuffle) and one that carries every word through a
``partitionBy`` shuffle to a counting ``mapPartitions``, which moves the data squall moves. Figures are ratios
within this run. Prints one ``name=value`` per line.

The figures a user's topology is judged by:

- ``squall_acked_vs_pyspark_carrying_throughput`` and ``squall_unacked_vs_pyspark_carrying_throughput``: words a
  second, each at its best of three, in three rounds of PySpark carrying every word, squall acked and squall
  unacked back to back, so that both sides run in the same minutes of the machine;
- ``squall_acking_on_vs_off_time_ratio``: three pairs of runs, acking on then off, the median pair's ratio;
- ``squall_half_capacity_complete_latency_p50_ms`` and ``_p99_ms``: the spout paced at half the acked throughput
  (the median of the four acked runs of the default configuration, ``squall_acked_default_median_words_per_second``)
  for ``--latency-secs`` (30 s), the latency from each sentence's emit to its ``ack`` as the spout sees it;
  beside it, what that run cost: its waves a second, and the cores and CPU a word its Python workers used
  (``squall_half_capacity_workers_cores``, ``_cpu_us_per_word``), against ``workers_cpu_us_per_word`` at full
  speed;
- ``squall_idle_round_trip_p50_ms``: one sentence every 0.3 s through the otherwise idle topology;
- ``squall_at_<rate>_sentences_per_second_complete_latency_p50_ms`` and ``_p99_ms`` (``--only latency`` with
  ``--latency-rates``): the same at each rate given.

``squall_acked_local_or_shuffle_sink_words_per_second`` is the same topology with the sink on
``local_or_shuffle``, where the counts stay in their worker: a second line, not the figure.

It also prints where the CPU goes in one acked run: the driver's own process, less the benchmark's own threads
(the /proc sampler and the loop that waits for the last ack) (``driver_cpu_us_per_word``) against the run's
Python workers, read from ``/proc`` (``workers_cpu_us_per_word``); their ratio, ``driver_bound_worker_cores``,
is how many worker cores one driver can keep busy. And the throughput with the count bolt's dict holding a
1,000,000-word vocabulary against a 1,000-word one (``squall_vocabulary_1m_vs_1k_throughput``).

The exactly-once word count runs twice against the acked one: split emitting ``[word]`` in the transactional
spout's default batches, and in the transactional page's style, the ``TransactionAttempt`` as the first field of
every tuple (``[attempt, word]``) in batches of 5,000 sentences a partition, each committing to SQLite in txid
order (``exactly_once_attempt_first_vs_acked_throughput``).

Encryption's cost: three pairs of acked runs, ``squall.links.encrypt`` on then off, and the median pair's
throughput ratio (``squall_encrypted_vs_plain_throughput``).

    python benchmarks/word_count.py [--words 2000000] [--master local[2]] [--tuned 1000,5000,20000]
    python benchmarks/word_count.py --only throughput|acking|vocabulary|exactly-once|latency|encryption
"""

from __future__ import annotations

import argparse
import atexit
import operator
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from squall import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder
from squall.spark.context import spark_context
from squall.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    SqliteKeyedState,
    TransactionalTopologyBuilder,
)
from squall.transactional.spouts import DEFAULT_TAKE_PER_BATCH

VOCABULARY = [f"w{i:04d}" for i in range(10_000)]
WORDS_PER_SENTENCE = 8
TRANSACTIONAL_PAGE_PER_PARTITION = 5_000  # the exactly-once figure in the transactional page's style


class SourceFiles:
    """The benchmark's source files: one per distinct list of sentences, removed at exit."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="squall-word-count-")
        self._paths: dict[int, str] = {}
        atexit.register(shutil.rmtree, self._dir, True)

    def write(self, sentences: list[str]) -> str:
        path = self._paths.get(id(sentences))
        if path is None:
            path = self._paths[id(sentences)] = os.path.join(self._dir, f"{len(self._paths)}.txt")
            Path(path).write_text("\n".join(sentences))
        return path


SOURCES = SourceFiles()


def make_sentences(words: int, seed: int = 7, vocabulary: list[str] = VOCABULARY) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choices(vocabulary, k=WORDS_PER_SENTENCE)) for _ in range(words // WORDS_PER_SENTENCE)]


# -- where the CPU goes: the driver's own process against the Python workers of this run ------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    return children


def python_processes_cpu() -> dict[int, float]:
    """CPU seconds (user and system) of each Python process Spark started for this driver: its JVM's
    descendants."""
    children, seconds = _children(), {}
    stack = list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            if b"python" not in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
    return seconds


class WorkersCpu:
    """The Python workers' CPU seconds over a span: with ``sampled``, each process is read every 0.1 s, so a
    worker that ends (Spark may stop it when its job does) still counts up to its last reading. Without it they
    are read at the start and at ``stop`` only, for a span whose workers all live to its end, and no thread of
    this process competes with the driver's meanwhile."""

    def __init__(self, sampled: bool = True) -> None:
        self._first = python_processes_cpu()
        self._last = dict(self._first)
        self._stop = threading.Event()
        self.own_seconds = 0.0  # the sampling's CPU, not the driver's
        self._thread = threading.Thread(target=self._sample, daemon=True) if sampled else None
        if self._thread is not None:
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self._last.update(python_processes_cpu())
        self.own_seconds = time.thread_time()

    def stop(self) -> float:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._last.update(python_processes_cpu())
        return sum(last - self._first.get(pid, 0.0) for pid, last in self._last.items())


def cpu_per_word(sentences: list[str], conf: dict) -> tuple[float, float]:
    """Microseconds of CPU per word in the driver's process and in the run's Python workers, from submitting
    the topology to its last ack (the SparkContext and the cluster object exist before and after)."""
    cpu: dict[str, float] = {}
    squall_throughput(sentences, conf, cpu)
    words = len(sentences) * WORDS_PER_SENTENCE
    return cpu["driver"] / words * 1e6, cpu["workers"] / words * 1e6


class Sentences(Spout):
    """Emits the sentences of a file, one a line, once each, msg id = line number; ``rate`` (sentences/s) paces
    it, if given. The file is read in ``open``, where the spout task runs: the source is read on the workers."""

    outputs = ("sentence",)

    def __init__(self, sentences: list[str], rate: float | None = None) -> None:
        self.path, self.rate = SOURCES.write(sentences), rate

    def open(self, conf, context, collector):
        self.sentences = Path(self.path).read_text().split("\n")
        self.collector, self.next, self.started = collector, 0, time.monotonic()

    def next_tuple(self):
        if self.next >= len(self.sentences):
            return
        if self.rate is not None and self.next >= self.rate * (time.monotonic() - self.started):
            return
        self.collector.emit([self.sentences[self.next]], msg_id=self.next)
        self.next += 1


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit([word])


class Count(Bolt):
    outputs = ("word", "count")

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        word = tup[0]
        count = self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, count], anchors=tup)
        self.collector.ack(tup)


class TimedCount(Count):
    """``Count`` with its own dictionary lines timed, to show what the user's dict costs with each vocabulary:
    each task writes the words it counted and their seconds to ``<directory>/task-<id>`` every 10,000 words."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.path, self.executed, self.dict_seconds = f"{self.directory}/task-{context.task_id}", 0, 0.0

    def execute(self, tup):
        started = time.perf_counter()
        word = tup[0]
        count = self.counts[word] = self.counts.get(word, 0) + 1
        self.dict_seconds += time.perf_counter() - started
        self.collector.emit([word, count], anchors=tup)
        self.collector.ack(tup)
        self.executed += 1
        if self.executed % 10_000 == 0:
            Path(self.path).write_text(f"{self.executed} {self.dict_seconds}")


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def topology(spout: Sentences, count: Bolt | None = None, local_sink: bool = False):
    b = TopologyBuilder()
    b.set_spout("sentences", spout)
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", count or Count(), 2).fields_grouping("split", ["word"])
    if local_sink:  # the second line only: the counts stay in their worker
        b.set_bolt("sink", Sink(), 2).local_or_shuffle_grouping("count")
    else:  # as users write it: half the counts cross a link
        b.set_bolt("sink", Sink(), 2).shuffle_grouping("count")
    return b.build()


class Submitted:
    """Every topology of the benchmark goes to one ``LocalCluster`` (``CLUSTER``), one after another, each under
    a name of its own, and is killed when its figures are taken."""

    cluster: LocalCluster | None = None
    count = 0

    def __init__(self, conf: dict, built) -> None:
        Submitted.count += 1
        self.name = f"bench-{Submitted.count}"
        self.run = self.cluster.submit_topology(self.name, conf, built)

    def __enter__(self):
        return self.run

    def __exit__(self, *exc: object) -> None:
        self.cluster.kill_topology(self.name)

    @classmethod
    def check(cls) -> None:
        if cls.cluster.failures:
            raise RuntimeError(f"a benchmark topology failed: {cls.cluster.failures}")


def squall_throughput(
    sentences: list[str], conf: dict, cpu: dict | None = None, count: Bolt | None = None, local_sink: bool = False
) -> tuple[float, int]:
    """Seconds from submitting to every sentence processed (all acked when acking is on), and waves run. The
    spout runs on a worker, as ``LocalCluster`` puts it; its acks are read from the run's stats. With ``cpu``,
    the driver's and the workers' CPU seconds over the same span go into it."""
    spout = Sentences(sentences)
    words = len(sentences) * WORDS_PER_SENTENCE
    acking = conf.get("topology.acker.executors") != 0
    built = topology(spout, count, local_sink)
    driver, workers = time.process_time(), WorkersCpu() if cpu is not None else None
    started = time.perf_counter()
    with Submitted(conf, built) as run:
        waiting = time.thread_time()  # this thread's polling below is the benchmark's, not the driver's
        while (run.stats.of("sentences").acked if acking else run.stats.of("sink").executed) < (
            len(sentences) if acking else words
        ):
            Submitted.check()
            time.sleep(0.01)
        seconds = time.perf_counter() - started
        waiting = time.thread_time() - waiting
        if workers is not None:
            cpu["workers"] = workers.stop()
            cpu["driver"] = time.process_time() - driver - workers.own_seconds - waiting
        assert run.stats.of("count").executed == words and run.stats.of("sink").executed == words
        if acking:
            assert run.stats.of("sentences").acked == len(sentences), run.stats.of("sentences").acked
        return seconds, run.stats.waves


def squall_latency(sentences: list[str], rate: float, conf: dict, load: dict | None = None) -> tuple[float, float]:
    """Complete latency p50 and p99 (ms) as the spout sees it, at ``rate`` sentences per second, real time. With
    ``load``, what the run took goes into it: its seconds, waves, and the Python workers' CPU seconds."""
    spout = Sentences(sentences, rate=rate)
    # The workers live until the run is killed, after they are read: no sampling thread beside the driver's.
    workers, started = WorkersCpu(sampled=False) if load is not None else None, time.perf_counter()
    with Submitted(conf, topology(spout)) as run:
        deadline = time.monotonic() + len(sentences) / rate * 3 + 120
        stats = run.stats.of("sentences")
        while stats.acked < len(sentences) and time.monotonic() < deadline:
            Submitted.check()
            time.sleep(0.01)
        if stats.acked < len(sentences):  # its figures would be those of the part that ran: none are printed
            raise RuntimeError(
                f"the latency run acked {stats.acked} of {len(sentences)} sentences before its deadline; "
                f"waves completed: {run.stats.waves}"
            )
        if workers is not None:
            load.update(seconds=time.perf_counter() - started, waves=run.stats.waves, workers=workers.stop())
        return stats.latency_percentile(50), stats.latency_percentile(99)


def squall_round_trip(conf: dict, tuples: int = 21) -> float:
    """p50 (ms) of one sentence from emit to ack on an otherwise idle topology: one sentence every 0.3 s."""
    sentences = [" ".join(VOCABULARY[i : i + WORDS_PER_SENTENCE]) for i in range(tuples)]
    return squall_latency(sentences, 1 / 0.3, conf)[0]


def pyspark_combining(sc, sentences: list[str]) -> float:
    started = time.perf_counter()
    counts = (
        sc.parallelize(sentences, 2)
        .flatMap(lambda s: s.split(" "))
        .map(lambda w: (w, 1))
        .reduceByKey(operator.add, 2)
        .collectAsMap()
    )
    seconds = time.perf_counter() - started
    assert sum(counts.values()) == len(sentences) * WORDS_PER_SENTENCE
    return seconds


def _count_partition(words):
    counts = Counter(word for word, _ in words)
    yield from counts.items()


def pyspark_carrying(sc, sentences: list[str]) -> float:
    started = time.perf_counter()
    counts = (
        sc.parallelize(sentences, 2)
        .flatMap(lambda s: [(w, 1) for w in s.split(" ")])
        .partitionBy(2)
        .mapPartitions(_count_partition)
        .collectAsMap()
    )
    seconds = time.perf_counter() - started
    assert sum(counts.values()) == len(sentences) * WORDS_PER_SENTENCE
    return seconds


class SplitBatch(BatchBolt):
    """Splits a batch's sentences; each tuple is ``(tx, sentence)``."""

    outputs = ("word",)

    def prepare(self, conf, context, collector, batch_id):
        self.emit = collector.emit

    def execute(self, tup):
        emit = self.emit
        for word in tup[1].split(" "):
            emit([word])


class SplitBatchWithAttempt(BatchBolt):
    """Splits a batch's sentences as the transactional page's examples do: the batch's ``TransactionAttempt``
    is the first field of every tuple it emits (``new Values(_id, word)``)."""

    outputs = ("id", "word")

    def prepare(self, conf, context, collector, batch_id):
        self.id, self.emit = batch_id, collector.emit

    def execute(self, tup):
        emit, attempt = self.emit, self.id
        for word in tup[1].split(" "):
            emit([attempt, word])


class CountCommitter(BatchBolt, Committer):
    """Adds a batch's counts to a SQLite table, guarded by txid (``TransactionalValue`` per word)."""

    def __init__(self, path: str, word_field: int = 0) -> None:
        self.path, self.word_field = path, word_field

    def prepare(self, conf, context, collector, batch_id):
        self.txid, self.counts = batch_id.txid, Counter()

    def execute(self, tup):
        self.counts[tup[self.word_field]] += 1

    def finish_batch(self):
        state = SqliteKeyedState(self.path, "counts")
        try:
            state.update(self.txid, self.counts)
        finally:
            state.close()


def exactly_once(sentences: list[str], per_partition: int | None, attempt_first: bool = False) -> float:
    """Seconds from submitting to the last sentence committed, for the exactly-once word count: a
    ``MemoryTransactionalSpout`` of 2 partitions, ``per_partition`` sentences each a batch, into split (2) and a
    committer count (2, fields grouping), max pending 4 (``per_partition`` None: the spout's default). With
    ``attempt_first`` split emits ``(attempt, word)``, as the transactional page's examples do. The counts in
    SQLite are checked against the exact ones."""
    work = tempfile.mkdtemp(prefix="squall-exactly-once-")
    try:
        half = len(sentences) // 2
        partitions = {0: [[s] for s in sentences[:half]], 1: [[s] for s in sentences[half:]]}
        spout = MemoryTransactionalSpout(partitions, ["sentence"], *([per_partition] if per_partition else []))
        builder = TransactionalTopologyBuilder("exactly-once-words", "spout", spout, 2)
        builder.set_bolt("split", SplitBatchWithAttempt() if attempt_first else SplitBatch(), 2).shuffle_grouping(
            "spout"
        )
        committer = CountCommitter(os.path.join(work, "counts.sqlite"), word_field=1 if attempt_first else 0)
        builder.set_bolt("count", committer, 2).fields_grouping("split", ["word"])
        conf = {
            "topology.max.spout.pending": 4,
            "squall.transactional.store": os.path.join(work, "coordinator.sqlite"),
        }
        started = time.perf_counter()
        with Submitted(conf, builder.build()) as run:
            while sum(tuples for _, tuples, _ in list(run.commits)) < len(sentences):
                Submitted.check()
                time.sleep(0.005)
            seconds = time.perf_counter() - started
        counted = {
            word: value.value for word, value in SqliteKeyedState(work + "/counts.sqlite", "counts").items().items()
        }
        exact = Counter(word for sentence in sentences for word in sentence.split(" "))
        if counted != exact:
            raise RuntimeError("the exactly-once word count is not exact")
        return seconds
    finally:
        shutil.rmtree(work, ignore_errors=True)


def vocabulary(sc, count: int, words: int) -> None:
    """State held: the count bolt's dict with a 1,000,000-word vocabulary against a 1,000-word one; and, for
    scale, what the same two vocabularies do to plain PySpark carrying every word into a dict per partition."""
    small = make_sentences(count, vocabulary=[f"v{i:07d}" for i in range(1_000)])  # words as long as the large ones
    large = make_sentences(count, vocabulary=[f"v{i:07d}" for i in range(1_000_000)])
    # interleaved, five times each: with three, one slow moment on a shared host moved the ratio by 0.05
    runs = [(squall_throughput(small, {})[0], squall_throughput(large, {})[0]) for _ in range(5)]
    small_secs, large_secs = min(r[0] for r in runs), min(r[1] for r in runs)  # each at its best, as above
    print(f"squall_vocabulary_1k_words_per_second={words / small_secs:.0f}")
    print(f"squall_vocabulary_1m_words_per_second={words / large_secs:.0f}")
    print(f"squall_vocabulary_1m_vs_1k_throughput={small_secs / large_secs:.3f}")
    # Where the difference goes: the count bolt's own two dictionary lines, timed inside it in one more run of each.
    small_ns, large_ns = count_dict_ns_per_word(small), count_dict_ns_per_word(large)
    extra = (large_ns - small_ns) * 1e-9 * words / 2  # seconds more for each of the 2 count tasks, on 2 workers
    print(f"count_bolt_dict_ns_per_word_1k={small_ns:.0f}")
    print(f"count_bolt_dict_ns_per_word_1m={large_ns:.0f}")
    print(f"count_bolt_dict_extra_seconds_per_task_1m={extra:.2f}")
    print(f"squall_vocabulary_1m_vs_1k_bound_by_the_dict={small_secs / (small_secs + extra):.3f}")
    print(f"squall_vocabulary_1m_vs_1k_without_the_dicts_extra={small_secs / (large_secs - extra):.3f}")
    small_secs = min(pyspark_carrying(sc, small) for _ in range(2))
    large_secs = min(pyspark_carrying(sc, large) for _ in range(2))
    print(f"pyspark_carrying_vocabulary_1m_vs_1k_throughput={small_secs / large_secs:.2f}")


def count_dict_ns_per_word(sentences: list[str]) -> float:
    """Nanoseconds a word the count bolt's dictionary lines take (``TimedCount``), over both its tasks."""
    directory = tempfile.mkdtemp(prefix="squall-count-dict-")
    try:
        squall_throughput(sentences, {}, count=TimedCount(directory))
        counted = [Path(directory, name).read_text().split() for name in os.listdir(directory)]
        return sum(float(seconds) for _, seconds in counted) / sum(int(n) for n, _ in counted) * 1e9
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def exactly_once_figures(sentences: list[str], words: int, per_partition: int | None = None) -> None:
    """The exactly-once word count against the acked one, interleaved, three runs each, each at its best: split
    emitting ``[word]`` in the spout's default batches, and the transactional page's style, split emitting the
    attempt first (``[attempt, word]``) in batches of 5,000 sentences a partition (``--per-partition`` sets both)."""
    page_batch = per_partition or TRANSACTIONAL_PAGE_PER_PARTITION
    runs = [
        (
            squall_throughput(sentences, {})[0],
            exactly_once(sentences, per_partition),
            exactly_once(sentences, page_batch, attempt_first=True),
        )
        for _ in range(3)
    ]
    acked, exact, attempt_first = (min(r[i] for r in runs) for i in range(3))
    print(f"exactly_once_sentences_per_partition_per_batch={per_partition or DEFAULT_TAKE_PER_BATCH}")
    print(f"exactly_once_acked_words_per_second={words / acked:.0f}")
    print(f"exactly_once_words_per_second={words / exact:.0f}")
    print(f"exactly_once_vs_acked_throughput={acked / exact:.2f}")
    print(f"exactly_once_attempt_first_sentences_per_partition_per_batch={page_batch}")
    print(f"exactly_once_attempt_first_words_per_second={words / attempt_first:.0f}")
    print(f"exactly_once_attempt_first_vs_acked_throughput={acked / attempt_first:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--tuned", default="1000,5000,20000", help="fixed wave sizes (spout calls per wave) to try")
    parser.add_argument("--latency-secs", type=float, default=30.0)
    parser.add_argument(
        "--latency-rates",
        default="",
        help="latency only: sentences/s, comma-separated, to measure complete latency at as well, for --latency-secs",
    )
    parser.add_argument(
        "--only",
        choices=["throughput", "acking", "acking-order", "vocabulary", "exactly-once", "latency", "encryption"],
        help="run only this part (throughput: plain PySpark carrying, then the acking pairs; acking-order: what "
        "the run right after PySpark's costs either side of an acking pair)",
    )
    parser.add_argument("--per-partition", type=int, help="exactly-once: sentences a partition a batch (the default's)")
    args = parser.parse_args()
    sc, _ = spark_context(args.master)
    sentences = make_sentences(args.words)
    words = len(sentences) * WORDS_PER_SENTENCE
    print(f"words={words}")
    print(f"sentences={len(sentences)}")
    with LocalCluster() as cluster:
        Submitted.cluster = cluster
        pyspark_combining(sc, sentences[:1000])  # warm up the Python workers
        squall_throughput(sentences, {})  # and squall's code in them, and the JVM: a whole run, not counted
        figures(sc, args, sentences, words)
    sc.stop()


def figures(sc, args: argparse.Namespace, sentences: list[str], words: int) -> None:
    if args.only == "vocabulary":
        vocabulary(sc, args.words, words)
        return
    if args.only == "exactly-once":
        exactly_once_figures(sentences, words, args.per_partition)
        return
    if args.only == "encryption":
        encryption_figures(sentences, words)
        return
    if args.only == "latency":  # capacity from three acked runs, then three latency runs at half of it
        default_secs = statistics.median(squall_throughput(sentences, {})[0] for _ in range(3))
        for _ in range(3):
            latency_figures(sentences, default_secs, args.latency_secs)
        print(f"squall_idle_round_trip_p50_ms={squall_round_trip({}):.1f}")
        for rate in (float(r) for r in args.latency_rates.split(",") if r):
            paced = make_sentences(max(1, int(rate * args.latency_secs)) * WORDS_PER_SENTENCE, seed=11)
            p50, p99 = squall_latency(paced, rate, {})
            print(f"squall_at_{rate:.0f}_sentences_per_second_complete_latency_p50_ms={p50:.1f}")
            print(f"squall_at_{rate:.0f}_sentences_per_second_complete_latency_p99_ms={p99:.1f}")
        return
    if args.only == "acking":
        acking_figures(sentences, words)
        return
    if args.only == "acking-order":
        acking_order(sc, sentences, words)
        return
    acked_runs = throughput_figures(sc, sentences, words)
    default_secs = min(acked_runs)
    if args.only == "throughput":
        return
    local_secs = min(squall_throughput(sentences, {}, local_sink=True)[0] for _ in range(2))
    print(f"squall_acked_local_or_shuffle_sink_words_per_second={words / local_secs:.0f}")

    best = default_secs
    for batch in (int(b) for b in args.tuned.split(",") if b):
        # A hand-tuned wave size: the cap, reached within a few waves and never shrunk (no target to meet).
        fixed = {"squall.wave.spout.batch": batch, "squall.wave.target.ms": 1e9}
        seconds, waves = squall_throughput(sentences, fixed)
        print(f"squall_acked_wave{batch}_words_per_second={words / seconds:.0f} (waves={waves})")
        best = min(best, seconds)
    # The default once more after the tuned runs, so that neither side has only the earlier (colder) runs.
    acked_runs.append(squall_throughput(sentences, {})[0])
    default_secs = min(acked_runs)
    print(f"squall_acked_default_best_words_per_second={words / default_secs:.0f}")
    print(f"squall_default_vs_best_tuned_throughput={best / default_secs:.2f}")

    driver_us, workers_us = cpu_per_word(sentences, {})
    print(f"driver_cpu_us_per_word={driver_us:.4f}")
    print(f"workers_cpu_us_per_word={workers_us:.2f}")
    print(f"driver_bound_worker_cores={workers_us / driver_us:.1f}")

    vocabulary(sc, args.words, words)
    exactly_once_figures(sentences, words, args.per_partition)
    encryption_figures(sentences, words)

    median_secs = statistics.median(acked_runs)
    print(f"squall_acked_default_median_words_per_second={words / median_secs:.0f}")
    latency_figures(sentences, median_secs, args.latency_secs)
    print(f"squall_idle_round_trip_p50_ms={squall_round_trip({}):.1f}")


def throughput_figures(sc, sentences: list[str], words: int) -> list[float]:
    """Plain PySpark combining at its best of two; then three rounds, each of PySpark carrying every word, squall
    acked and squall unacked, back to back, so that both sides see the same minutes of the machine. The ratios of
    squall's best acked and unacked runs to PySpark carrying's best, and the acking pairs. Returns the best acked
    runs' seconds."""
    combining = min(pyspark_combining(sc, sentences) for _ in range(2))
    print(f"pyspark_combining_words_per_second={words / combining:.0f}")
    rounds: list[float] = []
    acked_runs, unacked_secs = acking_figures(sentences, words, lambda: rounds.append(pyspark_carrying(sc, sentences)))
    default_secs = min(acked_runs)
    carrying = min(rounds)
    print(f"pyspark_carrying_words_per_second={words / carrying:.0f}")
    print(f"squall_acked_vs_pyspark_carrying_throughput={carrying / default_secs:.3f}")
    print(f"squall_unacked_vs_pyspark_carrying_throughput={carrying / unacked_secs:.3f}")
    return acked_runs


def acking_figures(
    sentences: list[str], words: int, before_each: Callable[[], object] | None = None
) -> tuple[list[float], float]:
    """Three pairs of runs, acking on then off, back to back (each after ``before_each()``, if given). Throughput
    is the best run of each; the acking ratio is the median of the three pairs' ratios, so that one run the machine
    slowed or sped does not decide it. Returns the acked runs' seconds and the best unacked run's."""
    runs = []
    for _ in range(3):
        if before_each is not None:
            before_each()
        runs.append((squall_throughput(sentences, {}), squall_throughput(sentences, {"topology.acker.executors": 0})))
    default_secs, default_waves = min(acked for acked, _ in runs)
    unacked_secs = min(unacked[0] for _, unacked in runs)
    pair_ratios = sorted(acked[0] / unacked[0] for acked, unacked in runs)
    print(f"squall_acked_default_words_per_second={words / default_secs:.0f}")
    print(f"squall_acked_default_waves={default_waves}")
    print(f"squall_unacked_default_words_per_second={words / unacked_secs:.0f}")
    print(f"squall_acking_on_vs_off_pair_ratios={','.join(f'{r:.3f}' for r in pair_ratios)}")
    print(f"squall_acking_on_vs_off_time_ratio={pair_ratios[1]:.3f}")
    return [acked[0] for acked, _ in runs], unacked_secs


def acking_order(sc, sentences: list[str], words: int, rounds: int = 4) -> None:
    """Each round: PySpark carrying, then an acking pair acking on first; PySpark again, then a pair acking off
    first. The pairs' ratios by which side ran first, and each side's rate first and second after PySpark."""
    off = {"topology.acker.executors": 0}
    by_order: dict[str, list[float]] = {"acked_first": [], "unacked_first": []}
    rates: dict[str, list[float]] = {"acked_first": [], "acked_second": [], "unacked_first": [], "unacked_second": []}
    for _ in range(rounds):
        pyspark_carrying(sc, sentences)
        acked, unacked = squall_throughput(sentences, {})[0], squall_throughput(sentences, off)[0]
        by_order["acked_first"].append(acked / unacked)
        rates["acked_first"].append(words / acked)
        rates["unacked_second"].append(words / unacked)
        pyspark_carrying(sc, sentences)
        unacked = squall_throughput(sentences, off)[0]
        acked = squall_throughput(sentences, {})[0]
        by_order["unacked_first"].append(acked / unacked)
        rates["unacked_first"].append(words / unacked)
        rates["acked_second"].append(words / acked)
    for order, ratios in by_order.items():
        print(f"squall_acking_on_vs_off_pair_ratios_{order}={','.join(f'{r:.3f}' for r in ratios)}")
        print(f"squall_acking_on_vs_off_time_ratio_{order}_median={statistics.median(ratios):.3f}")
    for side, values in rates.items():
        print(f"squall_{side}_after_pyspark_median_words_per_second={statistics.median(values):.0f}")


def encryption_figures(sentences: list[str], words: int) -> None:
    """Acked throughput with the links encrypted (AES-256-GCM) against plain: three pairs back to back, the
    median pair's ratio."""
    pairs = [
        tuple(squall_throughput(sentences, {"squall.links.encrypt": encrypt})[0] for encrypt in (True, False))
        for _ in range(3)
    ]
    ratios = sorted(plain / encrypted for encrypted, plain in pairs)
    print(f"squall_acked_encrypted_words_per_second={words / min(e for e, _ in pairs):.0f}")
    print(f"squall_acked_plain_words_per_second={words / min(p for _, p in pairs):.0f}")
    print(f"squall_encrypted_vs_plain_pair_ratios={','.join(f'{r:.3f}' for r in ratios)}")
    print(f"squall_encrypted_vs_plain_throughput={ratios[1]:.3f}")


def latency_figures(sentences: list[str], default_secs: float, seconds: float) -> None:
    """Complete latency with the spout paced at half the default configuration's acked throughput (``default_secs``
    a run: the median of its acked runs, which a minute the machine sped up does not decide), for ``seconds``: as
    many sentences as that takes, drawn as the others are."""
    rate = len(sentences) / default_secs / 2
    paced = make_sentences(max(1, int(rate * seconds)) * WORDS_PER_SENTENCE, seed=11)
    load: dict[str, float] = {}
    p50, p99 = squall_latency(paced, rate, {}, load)
    words = len(paced) * WORDS_PER_SENTENCE
    print(f"squall_half_capacity_sentences_per_second={rate:.0f}")
    print(f"squall_half_capacity_seconds={len(paced) / rate:.0f}")
    print(f"squall_half_capacity_complete_latency_p50_ms={p50:.1f}")
    print(f"squall_half_capacity_complete_latency_p99_ms={p99:.1f}")
    # What the paced run cost: against workers_cpu_us_per_word (a run at full speed), and the cores there are.
    print(f"squall_half_capacity_waves_per_second={load['waves'] / load['seconds']:.0f}")
    print(f"squall_half_capacity_workers_cores={load['workers'] / load['seconds']:.2f}")
    print(f"squall_half_capacity_workers_cpu_us_per_word={load['workers'] / words * 1e6:.2f}")


if __name__ == "__main__":
    main()
