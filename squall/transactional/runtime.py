"""Transactional topologies on Spark.

Each try of a batch is one Spark job per phase, each job a single stage with
no shuffle:

1. **Emit** (in txid order): the spout's emitters run in Spark tasks, partition
   ``p`` on emitter task ``p mod parallelism``. The job returns the emitted
   tuples, grouped per target task, and the partitions' metadata, which the
   driver stores durably before anything else happens to the batch.
2. **Process** (up to ``topology.max.spout.pending`` batches at once, from a
   thread pool): every bolt that is neither a committer nor downstream of one.
   Each bolt task is one Spark task, handed exactly the tuples sent to it: a
   fresh ``BoltTask`` prepared for the batch (``prepare(..., batch_id)``), the
   tuples run through it by ``execute_batch`` as a wave's task runs them, and
   ``finish_batch``. Its emits come back with its report. A bolt that
   reads another bolt of the same phase runs in a later job.
3. **Commit** (strictly in txid order): the committers and the bolts downstream
   of them, the same way.

A ``FailedException`` (or any other error) in a bolt or emitter fails the
attempt; the coordinator then fails it and every later active transaction, and
emits them again. A Python worker that dies is retried by Spark.
"""

from __future__ import annotations

import logging
import pickle
import queue
import threading
import time
import traceback
import uuid
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from pyspark import SparkContext

from squall.model import config as cfg
from squall.model.errors import FailedException, SquallError, TopologyFailed
from squall.model.topology import Topology
from squall.spark.bolt_task import BoltTask
from squall.spark.clock import Clock
from squall.spark.collectors import OutputCollector
from squall.spark.driver import WaveInfo
from squall.spark.execution import execute_batch
from squall.spark.failures import TaskSetupError, stop_reason
from squall.spark.protocol import Batch as ProtocolBatch
from squall.spark.protocol import (
    BatchTaskReport,
    Delivery,
    EmitterCounts,
    EmitterFailed,
    PartitionEmitted,
    RunSettings,
)
from squall.spark.shipping import load_shipped, pickle_component, ship_topology
from squall.spark.stats import RunStats
from squall.time import use_simulated_time
from squall.transactional.builder import TransactionalTopology
from squall.transactional.coordinator import Commit, TransactionAttempt, TransactionCoordinator
from squall.transactional.spouts import OpaquePartitionedTransactionalSpout
from squall.transactional.store import open_coordinator_store

log = logging.getLogger("squall.transactional")


# -- worker side ---------------------------------------------------------------
def _deliveries(topology: Topology, collector: OutputCollector):
    """A collector's emits, one ``Delivery`` per target task."""
    for batch in collector.take_batches():
        yield Delivery(topology.component_of(batch.target), batch)


def _emit_task(run_id, topology_bc, spout_blob, spout_id, attempt, plan, index, _rows):
    use_simulated_time(None)  # batches run on the wall clock
    topology = load_shipped(run_id, topology_bc).topology
    task_id = topology.task_ids(spout_id)[index]
    try:
        spout = pickle.loads(spout_blob)
    except Exception as exc:
        raise TaskSetupError(spout_id, task_id, "the emitter cannot be unpickled on a Spark worker", exc) from exc
    collector = OutputCollector(topology, spout_id, task_id, acking=False, capture=False)
    for partition, mode, meta in plan.get(index, ()):
        try:
            if mode == "replay":
                spout.emit_partition_batch(attempt, collector, partition, meta)
                new_meta = meta
            elif isinstance(spout, OpaquePartitionedTransactionalSpout):
                new_meta = spout.emit_partition_batch(attempt, collector, partition, meta)
            else:
                new_meta = spout.emit_partition_batch_new(attempt, collector, partition, meta)
        except Exception as exc:
            failure = "".join(traceback.format_exception(exc))
            yield EmitterFailed(f"{spout_id} emitter task {task_id}, partition {partition}: {failure}")
            return
        yield PartitionEmitted(partition, new_meta)
    yield EmitterCounts(collector.status.emitted, collector.status.malformed)
    yield from _deliveries(topology, collector)


def _batch_task(run_id, topology_bc, attempt, tasks, index, inputs):
    """Task ``tasks[index]`` of a batch: a fresh bolt task, prepared for the attempt, runs every tuple it was sent
    as a wave's task does (``execute_batch``), then ``finish_batch``. Any tuple that fails fails the batch."""
    use_simulated_time(None)  # batches run on the wall clock
    shipped = load_shipped(run_id, topology_bc)
    task_id = tasks[index]
    bolt = shipped.topology.component_of(task_id)
    task = BoltTask(shipped, bolt, task_id, RunSettings(run_id, 0, False, True), batch_id=attempt)
    task.begin_wave(0, attempt.txid)
    status = task.collector.status
    for batches in inputs:
        for batch in batches:
            execute_batch(task, batch)
    failure = None
    if status.errors:
        failure = status.errors[0]
    elif status.failed:
        failure = f"{bolt} task {task_id}: {status.failed} tuple(s) failed (FailedException)"
    elif not task.basic:
        try:
            task.bolt.finish_batch()
        except FailedException as exc:
            failure = f"{bolt} task {task_id}: FailedException in finish_batch: {exc}"
        except Exception as exc:
            failure = f"{bolt} task {task_id}: " + "".join(traceback.format_exception(exc))
            log.error("%s task %d failed batch %r", bolt, task_id, attempt, exc_info=True)
    if failure is None:  # a failed task's emits go nowhere: the batch is tried again
        yield from _deliveries(shipped.topology, task.collector)
    yield BatchTaskReport(bolt, task_id, status, task.collector.captured, failure)


# -- driver side ---------------------------------------------------------------
class Cancelled(Exception):
    """The batch was failed (with a later or an earlier one) while it was being processed."""


@dataclass
class Batch:
    """A batch on the driver: the tuples emitted for it, held per target task until that task's bolt runs."""

    attempt: TransactionAttempt
    tuples: int
    seq: int  # emits so far, counting this one
    inputs: dict[int, list[ProtocolBatch]] = field(default_factory=lambda: defaultdict(list))  # task -> its tuples
    cancelled: bool = False

    def deliver(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            self.inputs[delivery.batch.target].append(delivery.batch)

    def release(self) -> None:
        self.cancelled = True
        self.inputs = defaultdict(list)


@dataclass
class PhaseResult:
    failures: list[str]
    captured: dict[str, list[tuple]]


RECENT_COMMITS = 20  # kept for the web page


class TransactionalRun:
    """The driver of one transactional topology: coordinator, emits, processing and commits."""

    def __init__(self, name: str, ttopo: TransactionalTopology, conf: dict, sc: SparkContext, clock: Clock) -> None:
        self.name = name
        self.ttopo = ttopo
        self.topology: Topology = ttopo.topology
        self.conf = cfg.resolve_config(ttopo.topology.conf, conf)
        self.sc, self.clock = sc, clock
        max_pending = self.conf[cfg.TOPOLOGY_MAX_SPOUT_PENDING] or 1
        self.store = open_coordinator_store(str(self.conf[cfg.SQUALL_TRANSACTIONAL_STORE]), ttopo.id)
        self.coordinator = TransactionCoordinator(self.store, max_pending)
        self.stats = RunStats()
        self.run_id = f"{name}-{uuid.uuid4().hex}"
        self._topology_bc = ship_topology(sc, self.topology, self.conf, list(self.topology.bolts))
        pickle_component(ttopo.spout_id, ttopo.spout)  # a spout that cannot travel is refused at submit
        self.failure: TopologyFailed | None = None  # set when a failure no retry can fix stopped the topology
        self._failed_jobs_in_a_row = 0
        self._pool = ThreadPoolExecutor(max_pending, thread_name_prefix=f"squall-{name}")
        self._events: queue.Queue = queue.Queue()
        self._batches: dict[TransactionAttempt, Batch] = {}
        self._lock = threading.Lock()
        self.commits: list[tuple[TransactionAttempt, int, dict[str, list[tuple]]]] = []
        self.on_commit = []  # callbacks(attempt, tuples, captured)
        self.last_activity = clock.now()
        self._emits = 0
        self._last_empty_commit = 0  # seq of the latest committed batch that had no tuples
        self._malformed_counted_through = 0  # the latest txid whose malformed entries are counted
        self.started_at = clock.now()
        self._phases: dict[TransactionAttempt, tuple[str, float]] = {}  # in flight: phase, when it began (epoch s)
        self._began: dict[TransactionAttempt, float] = {}  # in flight: when its emit began (epoch s)
        self._recent: deque[tuple[TransactionAttempt, int, float]] = deque(maxlen=RECENT_COMMITS)

    # -- the loop ------------------------------------------------------------
    def step(self) -> WaveInfo:
        """Move transactions along; raises ``TopologyFailed`` once a failure no retry can fix stopped them."""
        if self.failure is not None:
            raise self.failure
        moved = self._drain_events()
        for instruction in self.coordinator.poll(ready=self.ttopo.spout.is_ready()):
            if isinstance(instruction, Commit):
                self._commit(instruction.attempt)
                if self.failure is not None:
                    raise self.failure
                moved += 1
                continue
            batch = self._emit(instruction.attempt)
            if self.failure is not None:
                raise self.failure
            if batch is None:
                self._fail(instruction.attempt)
                continue
            moved += 1
            self._pool.submit(self._process, batch)
        return WaveInfo(0, moved)

    def _drain_events(self) -> int:
        n = 0
        while True:
            try:
                kind, attempt = self._events.get_nowait()
            except queue.Empty:
                return n
            n += 1
            if kind == "processed":
                self.coordinator.processed(attempt)
            else:
                self._fail(attempt)

    def _fail(self, attempt: TransactionAttempt) -> None:
        self._leave(attempt)
        if self.coordinator.failed(attempt):
            with self._lock:
                later = [self._batches.pop(a) for a in list(self._batches) if a.txid >= attempt.txid]
                self.stats.failed_waves += 1
            for batch in later:
                self._leave(batch.attempt)
                batch.release()

    def settled(self, since: int = 0) -> bool:
        """No emitted tuple is waiting to commit, and an empty batch emitted after emit number
        ``since`` has committed: the source had nothing more."""
        with self._lock:
            pending = any(b.tuples for b in self._batches.values())
        return not pending and self._last_empty_commit > since

    def idle_for(self) -> float:
        return self.clock.now() - self.last_activity if self.settled() else 0.0

    # -- phases --------------------------------------------------------------
    def _plan(self, attempt: TransactionAttempt) -> tuple[list[tuple], int]:
        spout = self.ttopo.spout
        previous = self.coordinator.metadata(attempt.txid - 1) or {"partitions": 0, "p": {}}
        stored = self.coordinator.metadata(attempt.txid)
        if stored is not None and not isinstance(spout, OpaquePartitionedTransactionalSpout):
            return [(p, "replay", stored["p"][str(p)]) for p in range(stored["partitions"])], stored["partitions"]
        n = spout.num_partitions()
        return [(p, "new", previous["p"].get(str(p))) for p in range(n)], n

    def _enter(self, attempt: TransactionAttempt, phase: str) -> None:
        now = time.time()
        with self._lock:
            self._phases[attempt] = (phase, now)
            self._began.setdefault(attempt, now)

    def _leave(self, attempt: TransactionAttempt) -> float:
        """The attempt is no longer in flight; returns how long it was."""
        with self._lock:
            self._phases.pop(attempt, None)
            return time.time() - self._began.pop(attempt, time.time())

    def attempt_phases(self) -> dict[TransactionAttempt, tuple[str, float]]:
        """The attempts in flight: the phase each is in (emit, process, commit) and since when (epoch seconds)."""
        with self._lock:
            return dict(self._phases)

    def recent_commits(self) -> list[tuple[TransactionAttempt, int, float]]:
        """The last commits, newest first: the attempt, its tuples and its seconds from emit to commit."""
        with self._lock:
            return list(reversed(self._recent))

    def _emit(self, attempt: TransactionAttempt) -> Batch | None:
        self._enter(attempt, "emit")
        plan, partitions = self._plan(attempt)
        emitters = self.ttopo.parallelism
        by_task: dict[int, list] = defaultdict(list)
        for entry in plan:
            by_task[entry[0] % emitters].append(entry)
        try:
            spout_blob = pickle_component(self.ttopo.spout_id, self.ttopo.spout)  # per batch: its data may grow
        except SquallError as exc:
            self._stop(str(exc))
            return None
        job = partial(
            _emit_task, self.run_id, self._topology_bc, spout_blob, self.ttopo.spout_id, attempt, dict(by_task)
        )
        try:
            rows = self.sc.parallelize(range(emitters), emitters).mapPartitionsWithIndex(job).collect()
        except Exception as exc:
            self._job_failed(exc, f"emitting batch {attempt!r}")
            return None
        failures = [row.text for row in rows if isinstance(row, EmitterFailed)]
        if failures:
            for text in failures:
                log.error("%s: batch %r: %s", self.name, attempt, text)
            return None
        self._job_succeeded()
        metas = {str(row.partition): row.meta for row in rows if isinstance(row, PartitionEmitted)}
        tuples = sum(row.emitted for row in rows if isinstance(row, EmitterCounts))
        malformed = sum(row.malformed for row in rows if isinstance(row, EmitterCounts))
        if not self.coordinator.record_metadata(attempt, {"partitions": partitions, "p": metas}):
            return None
        self._emits += 1
        batch = Batch(attempt, tuples, self._emits)
        batch.deliver([row for row in rows if isinstance(row, Delivery)])
        with self._lock:
            self._batches[attempt] = batch
        self.stats.of(self.ttopo.spout_id).emitted += tuples
        if attempt.txid > self._malformed_counted_through:  # a replay meets the same malformed entries again
            self._malformed_counted_through = attempt.txid
            self.stats.of(self.ttopo.spout_id).malformed += malformed
        if tuples:
            self.last_activity = self.clock.now()
        return batch

    def _run_bolts(self, batch: Batch, bolts: list[str]) -> PhaseResult:
        """A phase's bolts, one Spark job for each set of them whose upstream bolts have run.

        Each job has one Spark task per bolt task, given just the tuples sent to it. A task that fails
        fails the phase: the bolts downstream of it do not run.
        """
        failures, captured = [], defaultdict(list)
        remaining = list(bolts)
        while remaining and not failures:
            ready = [b for b in remaining if not set(self.topology.sources_of(b)) & set(remaining)]
            remaining = [b for b in remaining if b not in ready]
            if batch.cancelled:
                raise Cancelled(repr(batch.attempt))
            jobs = []
            for bolt in ready:
                tasks = self.topology.task_ids(bolt)
                inputs = [batch.inputs.pop(task, []) for task in tasks]
                body = partial(_batch_task, self.run_id, self._topology_bc, batch.attempt, tasks)
                jobs.append(self.sc.parallelize(inputs, len(tasks)).mapPartitionsWithIndex(body))
            rows = (self.sc.union(jobs) if len(jobs) > 1 else jobs[0]).collect()
            batch.deliver([row for row in rows if isinstance(row, Delivery)])
            reports = sorted((r for r in rows if isinstance(r, BatchTaskReport)), key=lambda r: (r.component, r.task))
            with self._lock:
                for report in reports:
                    self.stats.of(report.component).add(report.status)
                    self.stats.of_task(report.component, report.task).add(report.status)
                    for text in report.status.errors:
                        self.stats.record_error(report.component, report.task, text)
                    captured[report.component].extend(report.captured)
                    if report.failure:
                        failures.append(report.failure)
        return PhaseResult(failures, dict(captured))

    def _process(self, batch: Batch) -> None:
        self._enter(batch.attempt, "process")
        try:
            result = self._run_bolts(batch, self.ttopo.processing_phase_bolts)
            self._job_succeeded()
            ok = not result.failures
            for text in result.failures:
                log.warning("%s: batch %r failed in processing: %s", self.name, batch.attempt, text)
        except Cancelled:
            ok = False
        except Exception as exc:
            self._job_failed(exc, f"processing batch {batch.attempt!r}")
            ok = False
        ok = ok and not batch.cancelled  # failed with another batch while its last job ran
        self._events.put(("processed" if ok else "failed", batch.attempt))

    def _commit(self, attempt: TransactionAttempt) -> None:
        self._enter(attempt, "commit")
        batch = self._batches.get(attempt)
        try:
            result = self._run_bolts(batch, self.ttopo.commit_phase_bolts)
        except Exception as exc:
            self._job_failed(exc, f"committing batch {attempt!r}")
            if self.failure is not None:
                return
            result = PhaseResult(["commit job failed"], {})
        for text in result.failures:
            log.warning("%s: batch %r failed in commit: %s", self.name, attempt, text)
        if result.failures:
            self._fail(attempt)
            return
        self._job_succeeded()
        self.coordinator.committed(attempt)
        seconds = self._leave(attempt)
        with self._lock:
            self._batches.pop(attempt).release()
            self._recent.append((attempt, batch.tuples, seconds))
        self.commits.append((attempt, batch.tuples, result.captured))
        self.stats.waves += 1
        if batch.tuples:
            self.last_activity = self.clock.now()
        else:
            self._last_empty_commit = max(self._last_empty_commit, batch.seq)
        for callback in self.on_commit:
            callback(attempt, batch.tuples, result.captured)

    def _job_succeeded(self) -> None:
        with self._lock:
            self._failed_jobs_in_a_row = 0

    def _job_failed(self, exc: Exception, what: str) -> None:
        """A Spark job of a batch failed: the batch is retried, unless no retry can fix the failure."""
        with self._lock:
            self._failed_jobs_in_a_row += 1
            in_a_row = self._failed_jobs_in_a_row
        why = stop_reason(exc, in_a_row, self.conf[cfg.SQUALL_WAVE_MAX_FAILURES], f"Spark jobs (the last {what})")
        if why is None:
            log.exception("%s: %s failed", self.name, what)
            return
        self._stop(why)

    def _stop(self, why: str) -> None:
        if self.failure is None:
            self.failure = TopologyFailed(f"topology {self.name!r} stopped: {why}")
            log.error("%s", self.failure)

    def wait_settled(self, timeout: float = 300.0) -> None:
        """Run until everything emitted so far has committed (tests and ``squall run``)."""
        deadline = time.monotonic() + timeout
        since = self._emits
        while not self.settled(since):
            if time.monotonic() > deadline:
                raise TimeoutError(f"transactional topology {self.name!r} did not settle in {timeout}s")
            if self.step().idle:
                time.sleep(0.01)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._drain_events()
        for batch in self._batches.values():
            batch.release()
        self._batches.clear()
        self.store.close()
        self._topology_bc.destroy()
