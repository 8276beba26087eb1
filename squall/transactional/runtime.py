"""Transactional topologies on Spark.

Each try of a batch is three kinds of Spark work:

1. **Emit** (one job, in txid order): the spout's emitters run in Spark tasks,
   partition ``p`` on emitter task ``p mod parallelism``; the emitted tuples are
   persisted and the partitions' metadata comes back to the driver, which stores
   it durably before anything else happens to the batch.
2. **Process** (one job per batch, up to ``topology.max.spout.pending`` batches
   at once from a thread pool): every bolt that is neither a committer nor
   downstream of one. Each task gets a fresh bolt instance, ``prepare(...,
   batch_id)``, ``execute`` for each of its tuples (all of them: a shuffle
   stands between tasks) and ``finish_batch``.
3. **Commit** (one job, strictly in txid order): the committers and the bolts
   downstream of them, the same way.

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
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from pyspark import RDD, SparkContext, StorageLevel

from squall.model import config as cfg
from squall.model.components import BasicBolt
from squall.model.errors import FailedException, SquallError, TopologyFailed
from squall.model.topology import Topology, TopologyContext
from squall.model.tuple import Tuple
from squall.spark.clock import Clock
from squall.spark.collectors import BasicOutputCollector, OutputCollector
from squall.spark.driver import WaveInfo
from squall.spark.failures import TaskSetupError, stop_reason
from squall.spark.protocol import (
    BatchTaskReport,
    Delivery,
    EmitterCounts,
    EmitterFailed,
    PartitionEmitted,
    UpstreamFailed,
)
from squall.spark.shipping import load_shipped, new_component, pickle_component, ship_topology
from squall.spark.stats import RunStats
from squall.time import use_simulated_time
from squall.transactional.builder import TransactionalTopology
from squall.transactional.coordinator import Commit, TransactionAttempt, TransactionCoordinator
from squall.transactional.spouts import OpaquePartitionedTransactionalSpout
from squall.transactional.store import open_coordinator_store

log = logging.getLogger("squall.transactional")


# -- worker side ---------------------------------------------------------------
class _UpstreamFailed(Exception):
    pass


def _task_index(key: int) -> int:
    return key


def _deliveries(topology: Topology, collector: OutputCollector):
    """A collector's emits as ``(target task index, Delivery)`` records."""
    for batch in collector.take_batches():
        bolt = topology.component_of(batch.target)
        yield topology.task_ids(bolt).index(batch.target), Delivery(bolt, batch)


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
            yield (None, EmitterFailed(f"{spout_id} emitter task {task_id}, partition {partition}: {failure}"))
            return
        yield (None, PartitionEmitted(partition, new_meta))
    yield (None, EmitterCounts(collector.status.emitted, collector.status.malformed))
    yield from _deliveries(topology, collector)


def _batch_task(run_id, topology_bc, bolt, attempt, index, records):
    use_simulated_time(None)  # batches run on the wall clock
    shipped = load_shipped(run_id, topology_bc)
    topology = shipped.topology
    spec = topology.components[bolt]
    task_id = spec.tasks[index]
    collector = OutputCollector(topology, bolt, task_id, acking=False, capture=True)
    obj = new_component(shipped, bolt, task_id)
    context = TopologyContext(topology, bolt, task_id)
    task_conf = {**shipped.conf, **spec.conf}
    failure = None
    try:
        basic = isinstance(obj, BasicBolt)
        records = [message for _, message in records]
        broken = [message for message in records if isinstance(message, UpstreamFailed)]
        if broken:  # an upstream task failed: this task's input is partial, so it must not finish
            raise _UpstreamFailed(broken[0].what)
        try:
            if basic:
                obj.prepare(task_conf, context)
                basic_collector = BasicOutputCollector(collector)
            else:
                obj.prepare(task_conf, context, collector, attempt)
        except Exception as exc:
            raise TaskSetupError(bolt, task_id, "prepare() raised", exc) from exc
        for delivery in records:  # all Delivery: failure markers were checked above
            batch = delivery.batch
            for stream, values in batch.rows():
                fields = topology.stream_fields(batch.component, stream)
                tup = Tuple(values, fields, batch.component, batch.source, stream)
                collector.status.executed += 1
                if basic:
                    basic_collector.input = tup
                    obj.execute(tup, basic_collector)
                else:
                    obj.execute(tup)
        if not basic:
            obj.finish_batch()
    except TaskSetupError:
        raise  # Spark retries the task; if every attempt fails, the topology stops
    except _UpstreamFailed as exc:
        failure = f"{bolt} task {task_id}: not finished, as upstream {exc} failed"
    except FailedException as exc:
        failure = f"{bolt} task {task_id}: FailedException: {exc}"
    except Exception as exc:
        failure = f"{bolt} task {task_id}: " + "".join(traceback.format_exception(exc))
        logging.getLogger("squall.task").error("%s task %d failed batch %r", bolt, task_id, attempt, exc_info=True)
    if failure is None:
        yield from _deliveries(topology, collector)
    else:  # tell every downstream task, so that none finishes the batch on partial input
        for reader in {b for b, _ in topology.subscribers_of(bolt)}:
            for index in range(topology.components[reader].parallelism):
                yield (index, UpstreamFailed(reader, f"{bolt} task {task_id}"))
    yield (None, BatchTaskReport(bolt, task_id, collector.status, collector.captured, failure))


def _reports(records):
    for _, message in records:
        if isinstance(message, BatchTaskReport):
            yield message


def _emitter_messages(records):
    for _, message in records:
        if not isinstance(message, Delivery):
            yield message


def _inputs_of(bolt: str, records):
    for key, message in records:
        if isinstance(message, (Delivery, UpstreamFailed)) and message.bolt == bolt:
            yield key, message


# -- driver side ---------------------------------------------------------------
class Cancelled(Exception):
    """The batch was failed (with a later or an earlier one) while its job was being built."""


@dataclass
class Batch:
    attempt: TransactionAttempt
    tuples: int
    seq: int  # emits so far, counting this one
    outputs: dict[str, RDD] = field(default_factory=dict)  # component -> persisted output
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep(self, component: str, rdd: RDD) -> RDD:
        """Persist and hold ``rdd`` as ``component``'s output, unless the batch was released."""
        with self.lock:
            if self.cancelled:
                raise Cancelled(repr(self.attempt))
            self.outputs[component] = rdd.persist(StorageLevel.MEMORY_AND_DISK)
            return self.outputs[component]

    def release(self) -> None:
        with self.lock:
            self.cancelled = True
            outputs = list(self.outputs.values())
            self.outputs.clear()
        for rdd in outputs:
            rdd.unpersist(blocking=False)


@dataclass
class PhaseResult:
    failures: list[str]
    captured: dict[str, list[tuple]]


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
        if self.coordinator.failed(attempt):
            with self._lock:
                later = [self._batches.pop(a) for a in list(self._batches) if a.txid >= attempt.txid]
                self.stats.failed_waves += 1
            for batch in later:
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

    def _emit(self, attempt: TransactionAttempt) -> Batch | None:
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
        emitted = self.sc.parallelize(range(emitters), emitters).mapPartitionsWithIndex(job)
        emitted = emitted.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            rows = emitted.mapPartitions(_emitter_messages).collect()
        except Exception as exc:
            self._job_failed(exc, f"emitting batch {attempt!r}")
            emitted.unpersist()
            return None
        failures = [row.text for row in rows if isinstance(row, EmitterFailed)]
        if failures:
            for text in failures:
                log.error("%s: batch %r: %s", self.name, attempt, text)
            emitted.unpersist()
            return None
        self._job_succeeded()
        metas = {str(row.partition): row.meta for row in rows if isinstance(row, PartitionEmitted)}
        tuples = sum(row.emitted for row in rows if isinstance(row, EmitterCounts))
        malformed = sum(row.malformed for row in rows if isinstance(row, EmitterCounts))
        if not self.coordinator.record_metadata(attempt, {"partitions": partitions, "p": metas}):
            emitted.unpersist()
            return None
        self._emits += 1
        batch = Batch(attempt, tuples, self._emits, {self.ttopo.spout_id: emitted})
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
        for bolt in bolts:
            spec = self.topology.components[bolt]
            upstream = [
                batch.outputs[src].mapPartitions(partial(_inputs_of, bolt))
                for src in self.topology.sources_of(bolt)
                if src in batch.outputs
            ]
            inputs = (self.sc.union(upstream) if len(upstream) > 1 else upstream[0]).partitionBy(
                spec.parallelism, _task_index
            )
            task = partial(_batch_task, self.run_id, self._topology_bc, bolt, batch.attempt)
            batch.keep(bolt, inputs.mapPartitionsWithIndex(task))
        if not bolts:
            return PhaseResult([], {})
        reports = self.sc.union([batch.outputs[b].mapPartitions(_reports) for b in bolts]).collect()
        failures, captured = [], defaultdict(list)
        with self._lock:
            for report in sorted(reports, key=lambda r: (r.component, r.task)):
                self.stats.of(report.component).add(report.status)
                captured[report.component].extend(report.captured)
                if report.failure:
                    failures.append(report.failure)
        return PhaseResult(failures, dict(captured))

    def _process(self, batch: Batch) -> None:
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
        if batch.cancelled:
            batch.release()  # what the job persisted after the batch was failed
        self._events.put(("processed" if ok else "failed", batch.attempt))

    def _commit(self, attempt: TransactionAttempt) -> None:
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
        with self._lock:
            self._batches.pop(attempt).release()
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
