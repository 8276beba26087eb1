"""Transactional topologies on Spark: batches through the topology's long-lived workers.

The coordinator stays on the driver, as Storm's single coordinator spout: it decides txids and their order. The
batches themselves run on the same worker job, workers and links as an at-least-once topology's waves
(``squall/spark/scheduler.py``); no Spark job is launched per batch or per phase. Each try of a batch is:

1. ``BeginBatch`` to every worker. The emitter tasks (Storm's emitter bolt, of the spout's parallelism; partition
   ``p`` on emitter task ``p mod parallelism``) emit their slices, on the workers under ``LocalCluster`` and
   ``squall run`` or in the driver's process under ``TestCluster``, and each bolt task gets a fresh bolt prepared
   for the attempt (``squall/transactional/batches.py``);
2. processing, up to ``topology.max.spout.pending`` batches at once, each on a thread of its own on every
   worker: a bolt runs ``finish_batch`` once it has every tuple of the batch from every upstream task. When every
   worker has said ``PROCESSED`` the partitions' metadata is stored and the coordinator marks the batch processed;
3. ``CommitBatch``, strictly in txid order: the committers run ``finish_batch``, then the bolts downstream of
   them; when they are all done the coordinator records the commit.

A ``FailedException`` (or any other error) in a bolt or an emitter fails the try: the coordinator fails it and
every later active transaction, the workers drop them (``AbortBatches``), and they are emitted again. A lost
worker fails every try in flight; the run goes on under a new generation of workers, as waves do.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark import SparkContext

from squall.model import config as cfg
from squall.model.errors import TopologyFailed
from squall.model.topology import Topology
from squall.reliability.ids import IdGenerator
from squall.security.keys import run_keys
from squall.spark.clock import Clock
from squall.spark.collectors import OutputCollector
from squall.spark.failures import ErrorStreak, fatal_message
from squall.spark.protocol import RunSettings, TaskStatus
from squall.spark.run import TRANSACTIONAL, WaveInfo
from squall.spark.scheduler import WaveScheduler, worker_count
from squall.spark.shipping import pickle_component, ship_topology, shipped_here
from squall.spark.stats import RunStats
from squall.transactional.batches import BatchTasks
from squall.transactional.builder import TransactionalTopology
from squall.transactional.coordinator import Commit, TransactionAttempt, TransactionCoordinator
from squall.transactional.messages import (
    COMMITTED,
    EMITTED,
    AbortBatches,
    BatchReport,
    BeginBatch,
    CommitBatch,
    EmitPlan,
)
from squall.transactional.requests import RequestAttempt, RequestGroup
from squall.transactional.spouts import OpaquePartitionedTransactionalSpout
from squall.transactional.stores import open_coordinator_store

log = logging.getLogger("squall.transactional")

RECENT_COMMITS = 20  # kept for the web page
WAIT_SECS = 0.02  # a step waits this long for the workers' reports while batches are in flight
QUIET_MAX_SECS = 0.05  # after empty batches, new ones begin at most this far apart
MAX_REQUESTS_IN_FLIGHT = 16  # request tries at once


@dataclass
class TryInFlight:
    """One try of a batch on the driver: which workers still owe which phase."""

    attempt: TransactionAttempt
    seq: int
    began: float  # epoch seconds
    partitions: int
    emitting: set[int]  # workers whose emitter tasks have not reported
    processing: set[int]  # workers whose processing has not finished
    committing: set[int]  # workers hosting commit-phase tasks that have not finished
    metas: dict[int, Any] = field(default_factory=dict)
    tuples: int = 0
    malformed: int = 0
    phase: str = "emit"  # emit, process, commit
    processed: bool = False
    captured: dict[str, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    request: RequestGroup | None = None  # a request group's try: ``attempt`` is the request's id
    results: list[Any] = field(default_factory=list)


class TransactionalRun:
    """The driver of one transactional topology: the coordinator, and its batches through the workers. A
    ``squall.spark.run.Run``."""

    kind = TRANSACTIONAL
    acker_task_ids: list[int] = []  # no tuple trees: nothing to ack
    wanted_active = True  # a transactional topology's spout cannot be deactivated

    def __init__(
        self,
        name: str,
        ttopo: TransactionalTopology,
        conf: dict,
        sc: SparkContext,
        clock: Clock,
        spouts_here: bool = False,
        remote_requests: Callable[[dict], Any] | None = None,
    ) -> None:
        """``spouts_here``: the emitter tasks run on a worker in this process (``TestCluster``), else on the
        Spark job's workers. ``remote_requests(conf)``: the ``RequestSource`` of request groups given none (the
        DRPC servers of the config)."""
        self.name = name
        self.ttopo = ttopo
        self.topology: Topology = ttopo.topology
        self.conf = cfg.resolve_config(ttopo.topology.conf, conf)
        self.sc, self.clock = sc, clock
        max_pending = self.conf[cfg.TOPOLOGY_MAX_SPOUT_PENDING] or 1
        self.store = open_coordinator_store(str(self.conf[cfg.SQUALL_TRANSACTIONAL_STORE]), ttopo.id, self.conf)
        self.coordinator = TransactionCoordinator(self.store, max_pending)
        self.stats = RunStats()
        self.run_id = f"{name}-{uuid.uuid4().hex}"
        self.conf[cfg.TOPOLOGY_NAME], self.conf[cfg.SQUALL_RUN_ID] = name, self.run_id
        self.failure: TopologyFailed | None = None  # set when a failure no retry can fix stopped the topology
        self.woken = threading.Event()  # a request came: the cluster's idle pause ends
        spout_id = ttopo.spout_id
        spouts = {spout_id: ttopo.spout} if ttopo.spout is not None else {}
        for cid, spout in spouts.items():
            pickle_component(cid, spout)  # a spout that cannot travel is refused at submit
        shipped = list(self.topology.bolts) + ([] if spouts_here else list(spouts))
        self._broadcast = ship_topology(sc, self.topology, self.conf, shipped, spouts)
        here = shipped_here(self.topology, self.conf, spouts) if spouts_here else None
        workers = worker_count(sc, self.topology, self.conf[cfg.SQUALL_WORKERS], hosts_spouts=not spouts_here)
        settings = RunSettings(
            self.run_id,
            IdGenerator().next_id(),
            False,
            False,
            batch_host=BatchTasks,
            committers=ttopo.committers,
            batch_spout=spout_id if ttopo.spout is not None else None,
            request_groups={g.spout_id: g.components for g in ttopo.requests},
        )
        self.scheduler = WaveScheduler(
            sc,
            self.topology,
            settings,
            self._broadcast,
            workers,
            self.conf[cfg.SQUALL_WAVE_MAX_FAILURES],
            name,
            replace_timeout=self.conf[cfg.SQUALL_WORKER_REPLACE_TIMEOUT_SECS],
            keys=run_keys(self.conf, dict(sc.getConf().getAll())),
            handshake_timeout=self.conf[cfg.SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS],
            max_proving=self.conf[cfg.SQUALL_LINKS_MAX_CONNECTIONS],
            here=here,
        )
        self.scheduler.on_message = self._on_message
        self.scheduler.on_generation = self._on_generation
        self.scheduler.on_setup_error = self.stats.setup_failed
        # Batches failing with the same error, try after try, with no commit in between stop the topology.
        self._failures = ErrorStreak(
            "", 0, self.conf[cfg.SQUALL_MAX_REPEATED_ERRORS], f"the batches of topology {name!r} failed with"
        )
        late = set(ttopo.commit_phase_bolts)
        self._late_tasks = [t for b in late for t in self.topology.task_ids(b)]
        self._tries: dict[int, TryInFlight] = {}  # seq -> try in flight
        self._seq = 0
        self._moved = 0
        self.commits: list[tuple[TransactionAttempt, int, dict[str, list[tuple]]]] = []
        self.on_commit = []  # callbacks(attempt, tuples, captured)
        self.last_activity = clock.now()
        self._last_empty_commit = 0  # seq of the latest committed batch that had no tuples
        self._malformed_counted_through: dict[int, int] = {}  # emitter task -> latest txid whose malformed are counted
        self._quiet = 0.0  # after an empty batch: seconds until a new one begins
        self._quiet_until = 0.0  # time.monotonic()
        self.started_at = clock.now()
        self._recent: deque[tuple[TransactionAttempt, int, float, float]] = deque(maxlen=RECENT_COMMITS)
        interval = self.conf.get(cfg.TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS)
        self._emit_interval = (interval or 0) / 1000  # seconds between two batches' beginnings, at least
        self._last_begin = 0.0
        self._decided: dict[int, list[Any]] = {}  # txid -> what the spout's driver side decided it emits
        self._remote = None  # the DRPC servers' requests, for the groups given no source
        if any(g.source is None for g in ttopo.requests):
            if remote_requests is None:
                raise TopologyFailed(f"topology {name!r}: its DRPC streams need a LocalDRPC here")
            self._remote = remote_requests(self.conf)
        self._requests = [g if g.source is not None else replace(g, source=self._remote) for g in ttopo.requests]
        for group in self._requests:
            group.source.register(group.function, self.wake)

    # -- the loop ------------------------------------------------------------
    def step(self) -> WaveInfo:
        """Move batches along; raises ``TopologyFailed`` once a failure no retry can fix stopped them."""
        if self.failure is not None:
            raise self.failure
        try:
            self.scheduler.serve(WAIT_SECS if self._tries else 0.0)
        except TopologyFailed as failure:
            self.failure = failure
            raise
        if self.failure is not None:
            raise self.failure
        moved, self._moved = self._moved, 0
        if self.scheduler.ready or not self.scheduler.hosts:
            paced = 1 if self._emit_interval else None  # one new batch per interval, as Storm's throttle
            instructions = self.coordinator.poll(ready=self._may_begin(), most=paced)
            # the commit first: every later batch waits for it, while a batch begun now has the others ahead of it
            for instruction in sorted(instructions, key=lambda i: not isinstance(i, Commit)):
                if isinstance(instruction, Commit):
                    self._commit(instruction.attempt)
                else:
                    self._begin(instruction.attempt)
                if self.failure is not None:
                    raise self.failure
                moved += 1
            moved += self._begin_requests()
        return WaveInfo(0, moved or (1 if self._tries else 0))

    def _may_begin(self) -> bool:
        spout, now = self.ttopo.spout, time.monotonic()
        if spout is None or now < self._quiet_until or now < self._last_begin + self._emit_interval:
            return False
        return spout.is_ready()

    def wake(self) -> None:
        """A request came (from any thread): a step waiting for the workers returns, and so does an idle pause."""
        self.woken.set()
        hub = self.scheduler.hub
        if hub is not None:
            hub.wake()

    def interrupt(self) -> None:
        self.scheduler.interrupt()
        self.woken.set()

    def settled(self, since: int = 0) -> bool:
        """No emitted tuple is waiting to commit, and an empty batch begun after try number ``since`` has
        committed: the source had nothing more."""
        pending = any(t.tuples or t.emitting for t in list(self._tries.values()))  # read from other threads too
        if self.ttopo.spout is None:  # it only serves requests: nothing of its own to finish
            return not pending
        return not pending and self._last_empty_commit > since

    def idle_for(self) -> float:
        return self.clock.now() - self.last_activity if self.settled() else 0.0

    def attempt_phases(self) -> dict[TransactionAttempt, tuple[str, float]]:
        """The attempts in flight: the phase each is in (emit, process, commit) and since when (epoch seconds)."""
        return {t.attempt: (t.phase, t.began) for t in list(self._tries.values()) if t.request is None}

    def recent_commits(self) -> list[tuple[TransactionAttempt, int, float, float]]:
        """The last commits, newest first: the attempt, its tuples, its seconds from emit to commit and when it
        began (epoch seconds)."""
        return list(reversed(self._recent))

    # -- a try's life ----------------------------------------------------------
    def _plan(self, attempt: TransactionAttempt) -> tuple[dict[int, list[EmitPlan]], int]:
        """Each emitter task's slices: a transactional spout replays a stored txid exactly; otherwise each
        partition continues from the txid before, as stored or, while that one is in flight, as its emitter
        task emitted it."""
        spout, txid = self.ttopo.spout, attempt.txid
        stored = self.coordinator.metadata(txid)
        if stored is not None and not isinstance(spout, OpaquePartitionedTransactionalSpout):
            n = stored["partitions"]
            plans = [EmitPlan(p, True, stored["p"][str(p)]) for p in range(n)]
        elif hasattr(spout, "initialize_transaction"):  # the driver decides each new batch: its emitters replay it
            n = spout.num_partitions()
            if txid not in self._decided:  # decided once: a retry before its metadata is stored is the same batch
                self._decided[txid] = spout.initialize_transaction(txid)
            plans = [EmitPlan(p, True, self._decided[txid][p]) for p in range(n)]
        else:
            n = spout.num_partitions()
            if txid - 1 > self.coordinator.last_committed:
                plans = [EmitPlan(p, False, None, True) for p in range(n)]
            else:
                previous = self.coordinator.metadata(txid - 1) or {"p": {}}
                plans = [EmitPlan(p, False, previous["p"].get(str(p))) for p in range(n)]
        tasks = self.topology.task_ids(self.ttopo.spout_id)
        by_task: dict[int, list[EmitPlan]] = defaultdict(list)
        for plan in plans:
            by_task[tasks[plan.partition % len(tasks)]].append(plan)
        return dict(by_task), n

    def _begin(self, attempt: TransactionAttempt) -> None:
        self._last_begin = time.monotonic()
        self._seq += 1
        seq, scheduler = self._seq, self.scheduler
        plans, partitions = self._plan(attempt)
        placement = scheduler.placement
        hosts = set(placement.values())
        flight = TryInFlight(
            attempt,
            seq,
            time.time(),
            partitions,
            set(scheduler.spout_workers.values()),
            set(hosts),
            {placement[t] for t in self._late_tasks},
        )
        self._tries[seq] = flight
        generation, last = scheduler.generation, self.coordinator.last_committed
        scheduler.send_to(None, BeginBatch(generation, seq, attempt, plans, [], last))

    def _emitted(self, flight: TryInFlight, metas: dict[int, Any], statuses: dict[int, TaskStatus]) -> None:
        flight.metas.update(metas)
        spout = self.stats.of(self.ttopo.spout_id)
        emitted = sum(status.emitted for status in statuses.values())
        flight.tuples += emitted
        flight.phase = "process"
        spout.emitted += emitted
        txid = flight.attempt.txid
        for task, status in statuses.items():  # a replay meets the same malformed entries: count each txid once
            if txid > self._malformed_counted_through.get(task, 0):
                self._malformed_counted_through[task] = txid
                spout.malformed += status.malformed
        if emitted:
            self.last_activity = self.clock.now()

    def _on_message(self, report: Any) -> None:
        if not isinstance(report, BatchReport) or report.generation != self.scheduler.generation:
            return
        flight = self._tries.get(report.seq)
        if flight is None:  # aborted: what it still said is of no use
            return
        self._moved += 1
        if flight.request is not None:
            self._request_report(flight, report)
            return
        if report.failure is not None:
            fatal = fatal_message(RuntimeError(report.failure))
            if fatal is not None:
                self._stop(fatal)
                return
            log.warning("%s: batch %r failed: %s", self.name, flight.attempt, report.failure)
            if not self._failed_again(report.failure):
                self._fail(flight.attempt)
            return
        if report.phase == EMITTED:
            flight.emitting.discard(report.worker)
            self._emitted(flight, report.metas, {task: status for task, (_, status) in report.statuses.items()})
            self._check_processed(flight)
            return
        for task, (component, status) in report.statuses.items():
            self._count(component, task, status)
        if report.phase == COMMITTED:
            for component, rows in report.captured.items():
                flight.captured[component].extend(rows)
            flight.committing.discard(report.worker)
            if not flight.committing and flight.phase == "commit":
                self._committed(flight)
        else:
            flight.processing.discard(report.worker)
            self._check_processed(flight)

    # -- requests ----------------------------------------------------------------------------------------
    def _begin_requests(self) -> int:
        """Each request waiting at a source begins its try, up to ``MAX_REQUESTS_IN_FLIGHT`` at once."""
        begun = 0
        for group in self._requests:
            room = MAX_REQUESTS_IN_FLIGHT - sum(1 for t in self._tries.values() if t.request is not None)
            if room <= 0:
                break
            for request_id, args in group.source.take(group.function, room):
                self._begin_request(group, request_id, args)
                begun += 1
        return begun

    def _begin_request(self, group: RequestGroup, request_id: int, args: str) -> None:
        """The request's ``[args]``, emitted here to the tasks that read the group's spout, with the try's
        ``last`` batches."""
        self._seq += 1
        seq, scheduler = self._seq, self.scheduler
        (task,) = self.topology.task_ids(group.spout_id)
        collector = OutputCollector(self.topology, group.spout_id, task, acking=False, capture=False)
        sent: list[Any] = []
        collector.generation, collector.wave, collector.ship = scheduler.generation, seq, sent.append
        collector.emit(group.values(request_id, args))
        batches = sent + collector.take_last_batches(self.topology.reader_tasks(group.spout_id))
        placement = scheduler.placement
        hosts = {placement[t] for c in group.components for t in self.topology.task_ids(c)}
        attempt = RequestAttempt(request_id, self.coordinator.last_committed)
        flight = TryInFlight(attempt, seq, time.time(), 0, set(), hosts, set(), phase="process", request=group)
        self._tries[seq] = flight
        begin = BeginBatch(scheduler.generation, seq, attempt, {}, batches, attempt.committed, group.spout_id)
        scheduler.send_to(sorted(hosts), begin)

    def _request_report(self, flight: TryInFlight, report: BatchReport) -> None:
        if report.failure is not None:
            self._request_failed(flight, report.failure)
            self.scheduler.send_to(None, AbortBatches(self.scheduler.generation, (flight.seq,)))
            return
        for task, (component, status) in report.statuses.items():
            self._count(component, task, status)
        for rows in report.captured.values():
            flight.results.extend(rows)
        flight.processing.discard(report.worker)
        if not flight.processing:
            del self._tries[flight.seq]
            self.last_activity = self.clock.now()
            answer = flight.request.answer(flight.results)
            if answer is None:
                flight.request.source.fail(int(flight.attempt), "request failed: the topology gave no result")
            else:
                flight.request.source.result(int(flight.attempt), answer)

    def _request_failed(self, flight: TryInFlight, why: str) -> None:
        self._tries.pop(flight.seq, None)
        request_id = int(flight.attempt)
        log.warning("%s: request %s of %r failed: %s", self.name, request_id, flight.request.function, why)
        flight.request.source.fail(request_id, f"request failed: {why.strip().splitlines()[-1]}")

    def _count(self, component: str, task: int, status: TaskStatus) -> None:
        self.stats.of(component).add(status)
        self.stats.of_task(component, task).add(status)
        for text in status.errors:
            self.stats.record_error(component, task, text)

    def _check_processed(self, flight: TryInFlight) -> None:
        """Every worker has emitted and processed the try: its metadata is stored, then it may commit."""
        if flight.processed or flight.emitting or flight.processing:
            return
        flight.processed = True
        metas = {"partitions": flight.partitions, "p": {str(p): m for p, m in sorted(flight.metas.items())}}
        if self.coordinator.record_metadata(flight.attempt, metas):
            self.coordinator.processed(flight.attempt)

    def _commit(self, attempt: TransactionAttempt) -> None:
        flight = next(t for t in self._tries.values() if t.attempt == attempt)
        flight.phase = "commit"
        if not flight.committing:  # no committer
            self._committed(flight)
            return
        self.scheduler.send_to(sorted(flight.committing), CommitBatch(self.scheduler.generation, flight.seq))

    def _committed(self, flight: TryInFlight) -> None:
        attempt = flight.attempt
        if not self.coordinator.committed(attempt):
            return
        del self._tries[flight.seq]
        self.scheduler.progressed()
        self._failures.progressed()
        seconds = time.time() - flight.began
        captured = dict(flight.captured)
        self._recent.append((attempt, flight.tuples, seconds, flight.began))
        self.commits.append((attempt, flight.tuples, captured))
        self.stats.waves += 1
        if flight.tuples:
            self.last_activity = self.clock.now()
            self._quiet = 0.0
        else:
            self._last_empty_commit = max(self._last_empty_commit, flight.seq)
            self._quiet = min(max(2 * self._quiet, 0.002), QUIET_MAX_SECS)
            self._quiet_until = time.monotonic() + self._quiet
        self._decided.pop(attempt.txid, None)
        committed = getattr(self.ttopo.spout, "on_committed", None)  # the driver's own instance of the spout
        if committed is not None:
            committed(attempt.txid)
        for callback in self.on_commit:
            callback(attempt, flight.tuples, captured)

    def _fail(self, attempt: TransactionAttempt) -> None:
        """Fail ``attempt`` and every later try in flight; the coordinator emits them again."""
        if not self.coordinator.failed(attempt):
            return
        dropped = [seq for seq, t in self._tries.items() if t.request is None and t.attempt.txid >= attempt.txid]
        for seq in dropped:
            del self._tries[seq]
        self.stats.failed_waves += 1
        self.scheduler.send_to(None, AbortBatches(self.scheduler.generation, tuple(dropped)))

    def _on_generation(self, generation: int) -> None:
        """Workers (re)started: every try in flight is lost with the tasks that held it; emit them again (a request
        fails)."""
        for flight in [t for t in self._tries.values() if t.request is not None]:
            self._request_failed(flight, "the workers restarted")
        data = [t for t in self._tries.values() if t.request is None]
        if data:
            oldest = min(data, key=lambda t: t.attempt.txid)
            log.warning("%s: workers restarted; batches from txid %d run again", self.name, oldest.attempt.txid)
            self._fail(oldest.attempt)

    def _failed_again(self, failure: str) -> bool:
        """A try failed with ``failure``: whether that stopped the topology (the same error, try after try, with no
        commit in between, ``squall.max.repeated.errors`` times)."""
        if self._failures.failed(failure):
            self._stop(self._failures.stop)
            return True
        return False

    def _stop(self, why: str) -> None:
        if self.failure is None:
            self.failure = TopologyFailed(f"topology {self.name!r} stopped: {why}")
            log.error("%s", self.failure)

    def wait_settled(self, timeout: float = 300.0) -> None:
        """Run until everything emitted so far has committed (tests and ``squall run``)."""
        deadline = time.monotonic() + timeout
        since = self._seq
        while not self.settled(since):
            if time.monotonic() > deadline:
                raise TimeoutError(f"transactional topology {self.name!r} did not settle in {timeout}s")
            if self.step().idle:
                time.sleep(0.002)

    def not_started(self) -> str | None:
        """Why the run's tasks are not up, when a worker could not set one up and none has come up since."""
        if self.scheduler.hub is None or self.scheduler.tasks_up:
            return None
        return self.scheduler.setup_failure

    def finish(self, fail_pending: bool) -> None:
        """Nothing to fail back: a try that has not committed is emitted again when the topology next runs."""

    def close(self) -> None:
        for group in self._requests:
            group.source.unregister(group.function)
        for flight in [t for t in self._tries.values() if t.request is not None]:
            self._request_failed(flight, "the topology stopped")
        self.scheduler.close()
        self._tries.clear()
        self.store.close()
        self._broadcast.destroy()
