"""squall on real Spark clusters, with workers and executors killed mid-run.

A Spark standalone cluster (a master and workers of 1 core each, from the pyspark
package's own ``bin/spark-class``) runs on free loopback ports for this module.
Drivers run in processes of their own, as users run them: ``squall run`` on the
main example, and a script-like driver whose components are defined right here.
Each test prints its figures (``pytest -s`` shows them; docs/cluster.md quotes them).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from servers import SparkStandaloneCluster

from squall import BasicBolt, Bolt, Fields, LocalCluster, TopologyBuilder
from squall.connectors import QueueSpout, ReliableQueue
from squall.security import BlobSealer, checkpoint_key
from squall.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    SqliteKeyedState,
    TransactionalTopologyBuilder,
)

SEALER = BlobSealer(checkpoint_key({}))  # the key every run here signs its checkpoints with (the default key file)

ROOT = Path(__file__).parent.parent
SENTENCES = 20_000


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    yield cluster
    cluster.stop()


def _example():
    spec = importlib.util.spec_from_file_location("word_count_example", ROOT / "examples" / "word_count.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _queue_counts(path: Path) -> dict[str, int]:
    queue = ReliableQueue(path, "sentences")
    try:
        return queue.counts()
    finally:
        queue.close()


def _wait(condition, process, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None if hasattr(process, "poll") else process.is_alive(), f"driver ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.2)


def test_word_count_on_a_standalone_cluster_survives_a_worker_kill_and_uses_a_new_worker(standalone, tmp_path):
    """``squall run examples/word_count.py --master spark://...``; SIGKILL a worker with its executor mid-run."""
    data = tmp_path / "data"
    log = tmp_path / "driver.log"
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "examples" / "word_count.py")]
    args += ["--master", standalone.url, "--idle-secs", "5", "--spark-conf", "spark.task.maxFailures=8"]
    args += ["--conf", f"example.dir={data}", "--conf", f"example.sentences={SENTENCES}"]
    args += ["--conf", "topology.max.spout.pending=5000"]
    # The lost task waits for the worker that joins, however slowly its JVM starts (the shrink has its own test).
    args += ["--conf", "squall.worker.replace.timeout.secs=120"]
    started = time.monotonic()
    with open(log, "w") as out:
        driver = subprocess.Popen(args, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        queue = data / "sentences.sqlite"
        # Ready is 0 for a moment while the queue is being filled: progress is fewer ready than were put.
        _wait(lambda: queue.exists() and 0 < _queue_counts(queue)["ready"] <= SENTENCES * 0.8, driver, "progress")
        acked_at_kill = SENTENCES - sum(_queue_counts(queue).values())
        standalone.kill_worker(0)  # the worker, its executor and its Python workers
        killed_at = time.monotonic()
        standalone.add_worker()  # elastic: a third worker joins mid-run
        driver.wait(timeout=600)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    output = log.read_text()
    assert driver.returncode == 0, output[-5000:]
    assert "is not local: a cluster needs shared storage" in output  # the default checkpoint dir is local

    left = _queue_counts(data / "sentences.sqlite")
    assert left == {"ready": 0, "pending": 0, "dead": 0}  # every sentence acked
    example = _example()
    exact = Counter(w for i in range(SENTENCES) for w in example.SENTENCES[i % len(example.SENTENCES)].split(" "))
    with sqlite3.connect(data / "word_counts.sqlite") as db:
        counted = dict(db.execute("SELECT word, count FROM word_counts").fetchall())
    assert set(counted) == set(exact)
    below = {w: (counted[w], n) for w, n in exact.items() if counted[w] < n}
    assert below == {}  # no count below the exact count
    new_worker_tasks = standalone.tasks_run_by(2)
    assert new_worker_tasks > 0  # the worker that joined mid-run received tasks
    print(
        f"\nstandalone at-least-once: sentences={SENTENCES} words={sum(exact.values())}"
        f" acked_at_kill={acked_at_kill} worker_killed_after={killed_at - started:.0f}s"
        f" duplicate_words={sum(counted.values()) - sum(exact.values())}"
        f" tasks_on_new_worker={new_worker_tasks} total={time.monotonic() - started:.0f}s"
    )


# -- exactly-once: a transactional word count whose components live in this module ---------
PARTITIONS = 4
WORDS_PER_PARTITION = 1500
TAKE_PER_BATCH = 40
VOCABULARY = ["storm", "spark", "tuple", "acker", "batch", "commit", "spout", "bolt", "wave", "txid"]


def word_data() -> dict[int, list[list[str]]]:
    return {
        p: [[VOCABULARY[(p * 7 + i * i) % len(VOCABULARY)]] for i in range(WORDS_PER_PARTITION)]
        for p in range(PARTITIONS)
    }


class PartialCount(BatchBolt):
    outputs = ("word", "count")

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.counts = collector, Counter()

    def execute(self, tup):
        self.counts[tup["word"]] += 1

    def finish_batch(self):
        for word, n in sorted(self.counts.items()):
            self.collector.emit([word, n])


class CommitCounts(BatchBolt, Committer):
    """Adds a batch's counts to SQLite once per txid (the value is stored with its txid)."""

    outputs = ("word", "count")

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.counts = attempt, Counter()

    def execute(self, tup):
        self.counts[tup["word"]] += tup["count"]

    def finish_batch(self):
        state = SqliteKeyedState(self.db_path, "word_counts")
        state.update(self.attempt.txid, dict(self.counts))
        state.close()


def transactional_word_count(db_path: str):
    spout = MemoryTransactionalSpout(word_data(), ["word"], TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder("cluster-words", "spout", spout, 2)
    builder.set_bolt("partial", PartialCount(), 2).fields_grouping("spout", Fields("word"))
    builder.set_bolt("commit", CommitCounts(db_path), 2).fields_grouping("partial", Fields("word"))
    return builder.build()


def drive_transactional(master: str, db_path: str) -> None:
    """The driver process: what a user's script would do."""
    with LocalCluster({"squall.spark.master": master, "squall.spark.conf": {"spark.task.maxFailures": "8"}}) as c:
        run = c.submit_topology("cluster-words", {"topology.max.spout.pending": 3}, transactional_word_count(db_path))
        while not run.settled():
            if c.failures:
                raise SystemExit(f"stopped: {c.failures}")
            time.sleep(0.2)


def _committed(db_path: Path) -> int:
    if not db_path.exists():
        return 0
    state = SqliteKeyedState(str(db_path), "word_counts")
    try:
        return sum(state.values().values())
    except sqlite3.OperationalError:
        return 0
    finally:
        state.close()


def test_transactional_word_count_on_a_standalone_cluster_is_exact_through_a_worker_kill(standalone, tmp_path):
    if standalone.alive() < 2:
        standalone.add_worker()
    db_path = tmp_path / "counts.sqlite"
    total = PARTITIONS * WORDS_PER_PARTITION
    started = time.monotonic()
    driver = multiprocessing.get_context("spawn").Process(
        target=drive_transactional, args=(standalone.url, str(db_path))
    )
    driver.start()
    try:
        _wait(lambda: _committed(db_path) >= total // 4, driver, "commits")
        killed_at_words = _committed(db_path)
        victim = next(i for i, p in enumerate(standalone.workers) if p.poll() is None)
        standalone.kill_worker(victim)
        driver.join(timeout=600)
    finally:
        if driver.is_alive():
            driver.kill()
    assert driver.exitcode == 0
    state = SqliteKeyedState(str(db_path), "word_counts")
    counts = state.values()
    state.close()
    exact = Counter(row[0] for rows in word_data().values() for row in rows)
    assert counts == dict(exact)  # exactly once, through the kill
    print(
        f"\nstandalone exactly-once: words={total} batches={-(-WORDS_PER_PARTITION // TAKE_PER_BATCH)}"
        f" committed_words_at_kill={killed_at_words} counts_exact=True total={time.monotonic() - started:.0f}s"
    )


# -- two executors in one JVM cluster ---------------------------------------------------------
class SplitWords(BasicBolt):
    outputs = ("msg", "word")

    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([tup["sentence"], word])


class RecordWords(Bolt):
    """Appends ``word`` lines to a file per task, then acks: a word is acked once it is written down."""

    outputs = ()

    def __init__(self, out: str) -> None:
        self.out = out

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.file = open(os.path.join(self.out, f"words-{context.task_id}.log"), "a")  # noqa: SIM115

    def execute(self, tup):
        self.file.write(tup["word"] + "\n")
        self.file.flush()
        self.collector.ack(tup)


def drive_queue_word_count(master: str, queue_path: str, out: str) -> None:
    b = TopologyBuilder()
    b.set_spout("sentences", QueueSpout(queue_path, "sentences", fields=["sentence"]))
    b.set_bolt("split", SplitWords(), 2).shuffle_grouping("sentences")
    b.set_bolt("record", RecordWords(out), 2).fields_grouping("split", Fields("word"))
    conf = {"topology.max.spout.pending": 300, "topology.message.timeout.secs": 20}
    with LocalCluster({"squall.spark.master": master}) as cluster:
        run = cluster.submit_topology("local-cluster-words", conf, b.build())
        while True:
            time.sleep(0.5)
            if cluster.failures:
                raise SystemExit(f"stopped: {cluster.failures}")
            if run.idle_for() > 3:
                return


def _executors_of(pid: int) -> list[int]:
    """The pids of Spark executor JVMs descended from ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in cmdline:
                found.append(child)
            stack.append(child)
    return found


def test_local_cluster_with_two_executors_loses_nothing_when_one_is_killed(tmp_path):
    messages = 3000
    queue_path, out = tmp_path / "queue.sqlite", tmp_path / "out"
    out.mkdir()
    producer = ReliableQueue(queue_path, "sentences")
    sentences = [f"w{i % 97} w{i % 13} w{i % 5}" for i in range(messages)]
    producer.put_many([s] for s in sentences)
    producer.close()
    started = time.monotonic()
    driver = multiprocessing.get_context("spawn").Process(
        target=drive_queue_word_count, args=("local-cluster[2,1,1024]", str(queue_path), str(out))
    )
    driver.start()
    try:
        _wait(lambda: len(_executors_of(driver.pid)) == 2, driver, "two executors", timeout=120)
        _wait(lambda: _queue_counts(queue_path)["ready"] <= messages * 0.7, driver, "progress")
        victim = _executors_of(driver.pid)[0]
        os.kill(victim, signal.SIGKILL)
        driver.join(timeout=600)
    finally:
        if driver.is_alive():
            driver.kill()
    assert driver.exitcode == 0
    assert _queue_counts(queue_path) == {"ready": 0, "pending": 0, "dead": 0}  # every message acked
    recorded = Counter(w for p in out.glob("words-*.log") for w in p.read_text().split())
    exact = Counter(w for s in sentences for w in s.split())
    assert {w: n for w, n in exact.items() if recorded[w] < n} == {}  # nothing lost
    assert set(recorded) == set(exact)
    print(
        f"\nlocal-cluster[2,1,1024]: messages={messages} words={sum(exact.values())} executor_killed=1"
        f" duplicate_words={sum(recorded.values()) - sum(exact.values())} total={time.monotonic() - started:.0f}s"
    )


# -- stateful bolts: counts in a KeyValueState, through driver and worker kills -------------------
def test_stateful_word_count_on_a_standalone_cluster_survives_driver_and_worker_kills(standalone, tmp_path):
    """``squall run tests/stateful_word_count.py --master spark://...``: two drivers SIGKILLed at random points,
    a Spark worker SIGKILLed under the second; no count ends below the exact one."""
    from stateful_word_count import NAME, PENDING

    from squall.state.providers import FileStateProvider

    while standalone.alive() < 2:
        standalone.add_worker()
    queue_path, checkpoints = tmp_path / "queue.sqlite", tmp_path / "checkpoints"
    producer = ReliableQueue(queue_path, "q")
    words = [f"w{i % 89}" for i in range(4000)]
    producer.put_many([w] for w in words)
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "tests" / "stateful_word_count.py")]
    args += ["--master", standalone.url, "--idle-secs", "3", "--spark-conf", "spark.task.maxFailures=8"]
    args += ["--conf", "squall.worker.replace.timeout.secs=2"]  # no spare core: go on on the survivor at once
    args += ["--conf", f"test.queue={queue_path}", "--conf", f"squall.checkpoint.dir={checkpoints}"]

    def gone() -> int:
        return len(words) - sum(producer.counts().values())

    started = time.monotonic()
    rnd = random.Random(3)
    for kill in range(3):
        with open(tmp_path / f"driver-{kill}.log", "w") as out:
            driver = subprocess.Popen(args, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if kill == 2:  # the last driver runs to the end
                driver.wait(timeout=600)
                break
            wanted = gone() + rnd.randint(200, 700)
            _wait(lambda wanted=wanted: gone() >= wanted, driver, f"progress of driver {kill + 1}")
            if kill == 1:  # a Spark worker dies under this driver, which goes on on the other
                victim = next(i for i, p in enumerate(standalone.workers) if p.poll() is None)
                standalone.kill_worker(victim)
                wanted = gone() + 200  # on the survivor alone
                _wait(lambda wanted=wanted: gone() >= wanted, driver, "progress after the worker kill")
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
        if kill == 1:  # a new worker for the next driver (added while this one ran, it could leave the next none)
            standalone.add_worker()
    output = (tmp_path / "driver-2.log").read_text()
    assert driver.returncode == 0, output[-5000:]
    assert producer.counts() == {"ready": 0, "pending": 0, "dead": 0}

    counts = Counter()
    for state in FileStateProvider(str(checkpoints / NAME / "state"), SEALER).load().states.values():
        counts.update(state)
    exact = Counter(words)
    assert set(counts) == set(exact) and all(counts[w] >= exact[w] for w in exact)  # never below
    duplicates = sum(counts.values()) - len(words)
    assert duplicates <= 3 * PENDING
    print(
        f"\nstandalone stateful: words={len(words)} driver_kills=2 worker_kills=1 duplicates={duplicates}"
        f" total={time.monotonic() - started:.0f}s"
    )


# -- a cluster that shrinks keeps running, and one that grows is used -------------------------------
def test_word_count_goes_on_when_a_worker_is_lost_with_no_spare_core_and_spreads_out_when_one_joins(tmp_path):
    """Two 1-core workers and no spare: SIGKILL one mid-run, and the run completes on the survivor with nothing
    lost; then start a worker, and tasks move to it: the sentences queued after that are counted there too."""
    sentences, later = 30_000, 10_000
    (tmp_path / "spark").mkdir()
    spark = SparkStandaloneCluster(tmp_path / "spark", workers=2)
    data, log = tmp_path / "data", tmp_path / "driver.log"
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "examples" / "word_count.py")]
    args += ["--master", spark.url, "--idle-secs", "0", "--no-ui"]  # it runs until interrupted, as Ctrl-C does
    args += ["--conf", f"example.dir={data}", "--conf", f"example.sentences={sentences}"]
    args += ["--conf", "topology.max.spout.pending=5000", "--conf", "squall.worker.replace.timeout.secs=5"]
    example = _example()
    started = time.monotonic()
    with open(log, "w") as out:
        driver = subprocess.Popen(args, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        queue = data / "sentences.sqlite"

        def acked() -> int:
            return sentences - sum(_queue_counts(queue).values()) if queue.exists() else 0

        _wait(lambda: queue.exists() and 0 < _queue_counts(queue)["ready"] <= sentences * 0.9, driver, "progress")
        spark.kill_worker(0)  # its executor and Python workers with it; no core is left to replace it
        killed_at, acked_at_kill = time.monotonic(), acked()
        _wait(lambda: "running on 1 worker(s)" in log.read_text(), driver, "the shrink", timeout=120)
        shrunk_at = time.monotonic()
        _wait(lambda: acked() == sentences, driver, "every sentence acked on the surviving worker")
        completed_on_one_at = time.monotonic()
        assert "running on 2 worker(s)" not in log.read_text()  # the survivor alone did it

        spark.add_worker()
        _wait(lambda: "running on 2 worker(s)" in log.read_text(), driver, "the grow", timeout=120)
        grown_at = time.monotonic()
        producer = ReliableQueue(queue, "sentences")
        producer.put_many([example.SENTENCES[i % len(example.SENTENCES)]] for i in range(sentences, sentences + later))
        producer.close()
        _wait(
            lambda: _queue_counts(queue) == {"ready": 0, "pending": 0, "dead": 0}, driver, "the later sentences acked"
        )
        driver.send_signal(signal.SIGINT)
        driver.wait(timeout=120)
        tasks_on_new_worker = spark.tasks_run_by(2)
    finally:
        try:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
        finally:
            spark.stop()
    output = log.read_text()
    assert driver.returncode == 0, output[-5000:]
    assert _queue_counts(data / "sentences.sqlite") == {"ready": 0, "pending": 0, "dead": 0}  # every sentence acked
    exact = Counter(
        w for i in range(sentences + later) for w in example.SENTENCES[i % len(example.SENTENCES)].split(" ")
    )
    with sqlite3.connect(data / "word_counts.sqlite") as db:
        counted = dict(db.execute("SELECT word, count FROM word_counts").fetchall())
    assert set(counted) == set(exact)
    assert {w: (counted[w], n) for w, n in exact.items() if counted[w] < n} == {}  # no count below the exact one
    assert tasks_on_new_worker > 0  # the worker that joined hosts tasks again
    print(
        f"\nstandalone shrink and grow: sentences={sentences}+{later} acked_at_kill={acked_at_kill}"
        f" shrink_after={shrunk_at - killed_at:.1f}s"
        f" completed_on_one_worker_after={completed_on_one_at - shrunk_at:.1f}s"
        f" grow_after_join={grown_at - completed_on_one_at:.1f}s"
        f" duplicate_words={sum(counted.values()) - sum(exact.values())}"
        f" tasks_on_new_worker={tasks_on_new_worker} total={time.monotonic() - started:.0f}s"
    )
