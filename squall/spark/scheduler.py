"""The wave scheduler: the shell around the run's workers on Spark, the waves in flight, and recovery.

At start the scheduler launches the run's *worker job*: one long-lived Spark
task per worker, each hosting some bolt tasks (``worker.py``). Waves go out as
``WaveInput`` messages, up to ``squall.wave.max.inflight`` at once; workers
pipeline them, each task strictly in wave order. A wave completes when every
bolt task and spout worker has reported it; ``WaveBook`` (``wave_book.py``)
hands completed waves back in wave order, each exactly once, and says when a
wave completed (``Commit``, with the last complete snapshot, up to which the
spout logs go).

When a worker is lost (its Python process or executor dies, Spark retries its
task, or the whole job fails and is launched again), the workers start again
under a new *generation*, and whatever an older one still had on the wire is
dropped. Every task restarts from the last complete snapshot
(``RecoveryPoint``, ``recovery.py``), and every wave sent since it runs again
from the spout tasks' logs, the ones in flight too; the acker tasks take each
task's acks of a wave once (``AckGate``). Nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark import SparkContext

from squall.model.errors import TopologyFailed
from squall.model.topology import Topology
from squall.security.keys import RunKeys
from squall.spark.context import runs_on_this_machine
from squall.spark.failures import fatal_message, setup_error_origin, stop_reason
from squall.spark.hub import Disconnected, Hub, Received
from squall.spark.load import LoadBalancer
from squall.spark.protocol import (
    FINAL_REPORT,
    Assign,
    Commit,
    Describe,
    Hello,
    LinkBroken,
    Release,
    RunSettings,
    SpoutReport,
    SpoutStatus,
    Stop,
    TaskReport,
    TaskStatus,
    TicksDue,
    WaveInput,
    WorkerFailed,
    WorkerReport,
    WorkerState,
)
from squall.spark.recovery import RecoveryPoint
from squall.spark.shipping import ShippedTopology
from squall.spark.snapshots import SnapshotStore
from squall.spark.wave_book import (
    CommitDue,
    GenerationStarted,
    SpoutsReported,
    SpoutsUncounted,
    TaskReported,
    WaveBook,
    WaveCompleted,
    WaveSent,
)
from squall.spark.worker import InProcessWorker
from squall.spark.worker_job import JobEnded, WorkerJob
from squall.spark.worker_spouts import acker_placement, spout_placement

log = logging.getLogger("squall")

READY_WARNING_SECS = 30.0
STALL_WARNING_SECS = 60.0  # with squall.wave.stall.secs 0: how often a wave in flight this long is warned of
LINK_GRACE_SECS = 1.0  # a broken link's peer may be lost: its loss, if it comes this soon, starts the recovery
GROW_CHECK_SECS = 2.0  # how often a run on fewer workers than it wants looks for executors that joined
FINAL_REPORTS_SECS = 1.0  # after the worker job ends, how long its workers' last reports may still take to come


@dataclass
class WaveInFlight:
    wave: int
    simulated_now: float | None
    checkpoint: int | None
    tasks: tuple[int, ...]  # the bolt tasks whose input from the driver ends with the wave
    sent_at: float
    tuples: int
    spout_calls: int = 0
    rotations: int = 0
    active: bool = True
    snapshot: bool = False
    replay: bool = False
    ticks: tuple[TicksDue, ...] = ()  # the tick tuples due, made by the workers of their tasks


@dataclass
class CompletedWave:
    wave: int
    seconds: float  # from sending, or from the wave before it completing if later, to its last report
    tuples: int  # the driver's tuples in it
    checkpoint: int | None
    status: dict[tuple[str, int], TaskStatus]
    captured: dict[tuple[str, int], list[tuple]]
    spouts: dict[int, tuple[str, SpoutStatus]] = field(default_factory=dict)  # when spouts run on the workers
    spout_emits: int = 0
    pending: int = 0  # trees pending at the spout tasks, as of this wave
    acks_behind: bool = False  # an acker task had not yet all the acks of a wave committed before this one
    holds_acks: bool = False  # stateful tasks sent acks that wait for a checkpoint at their ackers
    ackers: dict[int, tuple[int, int]] = field(default_factory=dict)  # acker task -> (acks merged, trees settled)
    state_parts: dict[int, tuple[int, bool]] = field(default_factory=dict)  # stateful task -> part it wrote
    inbox_peak_bytes: int = 0  # the most any worker's inbox held at once while it ran


def worker_count(sc: SparkContext, topology: Topology, wanted: int | None, hosts_spouts: bool = True) -> int:
    """Spark workers for the run: as asked, else one per task of the widest bolt (or spout, when they host the
    spouts), at most one per executor core.

    Each worker holds its core while the topology runs, as a Storm topology holds its worker slots.
    """
    components = {**topology.bolts, **(topology.spouts if hosts_spouts else {})}
    if not components:
        return 0
    if wanted:
        return wanted
    widest = max(spec.parallelism for spec in components.values())
    return max(1, min(widest, sc.defaultParallelism))


def hub_host(sc: SparkContext) -> str:
    master = sc.master
    if runs_on_this_machine(master):
        return "127.0.0.1"
    conf = sc.getConf()
    return conf.get("spark.driver.bindAddress") or conf.get("spark.driver.host") or "0.0.0.0"


@dataclass(frozen=True)
class WorkerSummary:
    """A connected worker, as the web UI lists it."""

    worker: int
    host: str
    pid: int
    started_at: float  # time.time() when it said hello
    tasks: list[int]  # the bolt and spout tasks it hosts
    ackers: list[int]  # the acker tasks it hosts, by acker index
    memory_bytes: int | None  # its resident memory as of its last report; None before one (or where unknown)


class WaveScheduler:
    tasks_up = False  # every task of the current generation has completed a wave: each was set up
    # Called with (component, task, text) when a worker could not set up a task (``WorkerFailed``).
    on_setup_error: Callable[[str, int, str], None] | None = None

    def __init__(
        self,
        sc: SparkContext,
        topology: Topology,
        settings: RunSettings,
        shipped: Any,
        workers: int,
        max_failures: int,
        name: str,
        stateful_tasks: frozenset[int] = frozenset(),
        restored: dict[int, dict] | None = None,
        replace_timeout: float = 10.0,
        *,
        keys: RunKeys,
        handshake_timeout: float = 10.0,
        max_proving: int = 256,
        here: ShippedTopology | None = None,
        stall_secs: float = 60.0,
    ) -> None:
        self.sc, self.topology, self.settings, self.name = sc, topology, settings, name
        # The Spark job, and a worker in this process after the job's, hosting every spout and acker task
        # (``TestCluster``).
        self.job = WorkerJob(sc, name, settings.run_id, shipped, keys, here)
        self.workers = workers
        self.wanted_workers = workers  # what the run started with; after a shrink, what it grows back to
        self.replace_timeout = replace_timeout
        self.interrupted = threading.Event()  # set by a kill: polls return at once
        self.stateful_tasks = stateful_tasks  # their acks wait for a checkpoint (stateful.py)
        self.max_failures = max_failures
        self.stall_secs = stall_secs  # squall.wave.stall.secs
        self.tasks = [t for spec in topology.bolts.values() for t in spec.tasks]
        self._task_index = {t: i for spec in topology.bolts.values() for i, t in enumerate(spec.tasks)}
        self.placement = self._placement(workers)
        self.balancer = LoadBalancer(workers) if settings.load_aware else None
        self.keys = keys  # the workers get them in the Spark task closure, never over a link
        log.info(
            "topology %s: links authenticated by challenge and %s; files under squall.checkpoint.dir %s",
            name,
            "encrypted (AES-256-GCM)" if keys.links.encrypt else "not encrypted",
            "encrypted (AES-256-GCM)" if keys.encrypt_checkpoints else "signed (HMAC-SHA256)",
        )
        sealer = keys.sealer()
        store = SnapshotStore(settings.snapshot_root, settings.run_id, sealer) if settings.snapshot_root else None
        if store is not None and (earlier := store.remove_earlier_runs(name)):
            log.info("topology %s: removed the snapshots and spout logs of earlier runs %s", name, earlier)
        self.recovery = RecoveryPoint(store, name, restored)  # where a lost worker's tasks restart from
        self.book = WaveBook()  # the waves in flight, oldest first (wave_book.py)
        self.applied = 0
        self._last_completed_at = 0.0  # time.monotonic() when the last wave completed
        self.next_wave = 1
        self.generation = 0
        self.ready = False
        self.failures_in_a_row = 0
        self.recoveries = 0
        self.failure: TopologyFailed | None = None
        self.final_spouts: dict[int, tuple[str, SpoutStatus]] = {}  # the spouts' last counters, once closed
        # Counters of spout reports no completed wave carries: of spouts a relaunch stopped, of waves run again
        self.stopped_spouts: list[dict[int, tuple[str, SpoutStatus]]] = []
        self.stopped_ackers: list[dict[int, tuple[int, int]]] = []  # the acker tasks' counts of those reports
        self._connections: dict[int, int] = {}  # worker -> connection
        self._addresses: dict[int, tuple[str, int] | None] = {}  # worker -> where it listens for its peers
        self._fatal: str | None = None  # a worker's setup error, kept for when its job fails
        self._closing = False
        self._stop: Stop | None = None  # what the workers are told as the run closes
        self._waiting_since = time.monotonic()
        self._lost_at: float | None = None  # when the run lost a worker it has not replaced yet
        self._broken_links: dict[int, tuple[float, str]] = {}  # peer -> (when, why): a link to it broke
        self._executors_seen = self.job.executors()  # when it last chose its worker count
        self._grow_checked_at = time.monotonic()
        self._stall_warned_at = time.monotonic()
        self._progress_at = time.monotonic()  # when a report last came, or the generation started
        self._asked = False  # the workers were asked what they wait for (``Describe``) since the last progress
        self._answered: set[int] = set()  # the workers that answered since they were last asked
        self._commit_due: Commit | None = None  # the latest Commit, sent with the next wave
        self.link_buffers: dict[int, int] = {}  # worker -> bytes its links held, as of its last report
        self.hellos: dict[int, tuple[str, int, float]] = {}  # worker -> (host, pid, time.time() of its hello)
        self.worker_memory: dict[int, int] = {}  # worker -> its process's resident bytes, as of its last report
        self.inbox_peaks: dict[int, int] = {}  # wave -> the most a worker's inbox held while it ran
        self.dropped_checkpoints: list[int] = []  # checkpoint waves dropped by a restart: they will not complete
        # A transactional topology's driver hears its own messages (``BatchReport``) and each new generation here.
        self.on_message: Callable[[Any], None] | None = None
        self.on_generation: Callable[[int], None] | None = None
        self.hub = Hub(hub_host(sc), keys.links, handshake_timeout, max_proving) if self.hosts else None
        if self.hosts:
            self.job.launch(self.hub, self.workers)

    @property
    def worker_here(self) -> InProcessWorker | None:
        """The worker in this process (``TestCluster``'s), if the run has one."""
        return self.job.worker_here

    @property
    def hosts(self) -> int:
        """The workers the run waits for: the Spark job's, and the one in this process if any (the last)."""
        return self.workers + self.job.has_worker_here

    def _placement(self, workers: int) -> dict[int, int]:
        """Bolt task *i* of every component on worker *i* mod ``workers``; the acker tasks and the spout tasks on
        the worker in this process if there is one, else spread over the workers too (``worker_spouts.py``)."""
        acking = self.settings.acking
        hosts = [workers] if self.job.has_worker_here else list(range(workers))
        self.acker_workers = acker_placement(self.settings.num_ackers, hosts) if acking else {}
        self.spout_workers = spout_placement(self.topology, self.acker_workers, hosts)
        return {t: self._task_index[t] % workers for t in self.tasks} if workers else {}

    # -- the worker job -----------------------------------------------------------
    def _relaunch(self, workers: int, why: str) -> None:
        """Start the run again on ``workers`` workers, every task from the last complete snapshot, as
        Nimbus reassigns a lost worker's executors to the slots that remain: the job's workers are stopped,
        what is left of it is cancelled, and a new job is launched."""
        log.warning("topology %s: %s; running on %d worker(s) (was %d)", self.name, why, workers, self.workers)
        # Their spouts fail their pending trees back before closing: the sources replay them.
        self.hub.send([(connection, Stop(fail_pending=True)) for connection in self._connections.values()])
        self.job.cancel()
        self._connections.clear()
        self.ready = False
        self.workers = workers
        self.placement = self._placement(workers)
        if self.balancer is not None:
            self.balancer.resized(workers)
        self._executors_seen = self.job.executors()
        self._lost_at = time.monotonic()  # a worker of the new job that never comes leads to another shrink
        self.job.launch(self.hub, self.workers)

    # -- sending ------------------------------------------------------------------
    def send(
        self,
        simulated_now: float | None,
        checkpoint: int | None = None,
        spout_calls: int = 0,
        rotations: int = 0,
        active: bool = True,
        snapshot: bool = False,
        ticks: tuple[TicksDue, ...] = (),
    ) -> int:
        """Send a wave: each spout task may get ``spout_calls`` calls, after ``rotations`` timeout rotations;
        ``ticks`` are the tick tuples due, which the tasks' workers make. Each bolt task gets the driver's empty
        ``last`` batch, which ends its input from the driver (made by its worker). Returns the wave number."""
        wave = self.next_wave
        self.next_wave += 1
        tasks = tuple(self.tasks)
        tuples = sum(due.count for due in ticks)
        flight = WaveInFlight(
            wave,
            simulated_now,
            checkpoint,
            tasks,
            time.monotonic(),
            tuples,
            spout_calls,
            rotations,
            active,
            snapshot,
            ticks=ticks,
        )
        if self.recovery.keeps:
            replay = WaveInFlight(wave, simulated_now, None, tasks, 0.0, 0, ticks=ticks, replay=True)
            self.recovery.sent(wave, replay, snapshot)
        self.book.handle(WaveSent(wave, flight))
        if self.ready:
            self._send_wave(flight)
        return wave

    def _send_wave(self, flight: WaveInFlight) -> None:
        per_worker: dict[int, list[int]] = {w: [] for w in range(self.hosts)}
        ticks: dict[int, list[TicksDue]] = {w: [] for w in range(self.hosts)}
        for task in flight.tasks:  # by where the tasks live now: a resize moves them
            per_worker[self.placement[task]].append(task)
        for due in flight.ticks:
            ticks[self.placement[due.task]].append(due)
        messages = []
        commit, self._commit_due = self._commit_due, None
        if commit is not None and commit.generation != self.generation:
            commit = None  # of the workers before a restart: Assign tells the new ones what was applied
        weights = self.balancer.weights if self.balancer is not None else None
        for worker, markers in per_worker.items():
            messages.append(
                (
                    self._connections[worker],
                    WaveInput(
                        self.generation,
                        flight.wave,
                        flight.simulated_now,
                        tuple(markers),
                        flight.checkpoint,
                        flight.spout_calls,
                        flight.rotations,
                        flight.active,
                        flight.snapshot,
                        flight.replay,
                        commit,
                        weights,
                        tuple(ticks[worker]),
                    ),
                )
            )
        self.hub.send(messages)

    # -- receiving ------------------------------------------------------------------
    def poll(self, wait_for: int = 0, timeout: float | None = None) -> list[CompletedWave]:
        """Handle what the workers said; return the waves completed, in order.

        Blocks until at most ``wait_for`` waves are in flight (0: all done), or ``timeout`` seconds pass.
        """
        done: list[CompletedWave] = []
        if self.hub is None:
            self.book.clear()
            return done
        deadline = None if timeout is None else time.monotonic() + timeout
        self._check_workers()
        while True:
            if self.interrupted.is_set():
                return done
            block = len(self.book) > wait_for
            left = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            event = self.hub.next_event(left if block else 0.0)
            if event is None:  # none in time, or woken: nothing is left to read
                self._check_workers(quiet=True)
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    return done
                continue
            self._handle(event, done)
            if self.failure is not None:
                raise self.failure

    def serve(self, timeout: float) -> None:
        """Handle what the workers said, waiting up to ``timeout`` seconds for the first message: for a run that
        sends no waves (a transactional topology's batches)."""
        if self.hub is None:
            return
        self._check_workers()
        wait: float | None = timeout
        while not self.interrupted.is_set():
            event = self.hub.next_event(wait or 0.0)
            if event is None:
                return
            wait = None
            self._handle(event, [])
            if self.failure is not None:
                raise self.failure

    def send_to(self, workers: list[int] | None, message: Any) -> None:
        """Send ``message`` to ``workers`` (None: every worker)."""
        if self.hub is None or not self.ready:
            return
        targets = self._connections if workers is None else {w: self._connections.get(w) for w in workers}
        self.hub.send([(connection, message) for connection in targets.values() if connection is not None])

    def progressed(self) -> None:
        """Work completed: the worker restarts counted toward giving up start over."""
        self.failures_in_a_row = 0

    @property
    def setup_failure(self) -> str | None:
        """What a worker last said when it could not set up a task (``WorkerFailed``), if any."""
        return self._fatal

    def _handle(self, event: Any, done: list[CompletedWave]) -> None:
        if isinstance(event, Received):
            message = event.message
            if isinstance(message, TaskReport):
                self._report(message, done)
            elif isinstance(message, WorkerReport):
                if self.balancer is not None:
                    self.balancer.observe(message.worker, message.cpu_seconds, time.monotonic())
                self.link_buffers[message.worker] = message.buffered_bytes
                self.worker_memory[message.worker] = message.memory_bytes
                if message.reports:
                    wave = message.reports[0].wave
                    self.inbox_peaks[wave] = max(self.inbox_peaks.get(wave, 0), message.inbox_peak_bytes)
                for report in message.reports:
                    if isinstance(report, TaskReport):
                        self._report(report, done)
                    else:
                        self._spout_report(report, done)
            elif isinstance(message, SpoutReport):
                self._spout_report(message, done)
            elif isinstance(message, Hello):
                self._hello(event.connection, message)
            elif isinstance(message, LinkBroken):
                if message.generation == self.generation and self.ready:  # else a new generation has new links
                    why = f"worker {message.worker}'s link to worker {message.peer} broke ({message.reason})"
                    self._broken_links.setdefault(message.peer, (time.monotonic(), why))
            elif isinstance(message, WorkerState):
                self._answered.add(message.worker)
                state = (message.worker, message.generation, message.text)
                log.warning("topology %s: worker %d (generation %d) says: %s", self.name, *state)
            elif isinstance(message, WorkerFailed):
                self._fatal = fatal_message(RuntimeError(message.message))
                log.error("topology %s: worker %d cannot go on: %s", self.name, message.worker, message.message)
                origin = setup_error_origin(message.message)
                if origin is not None and self.on_setup_error is not None:
                    self.on_setup_error(*origin)
            elif self.on_message is not None:
                self.on_message(message)
        elif isinstance(event, Disconnected):
            if event.worker is not None and self._connections.get(event.worker) == event.connection:
                del self._connections[event.worker]
                if not self._closing:
                    self._lost(f"worker {event.worker} disconnected")
                    if self.job.has_worker_here and event.worker == self.workers and self.failure is None:
                        self._here_lost()
        elif isinstance(event, JobEnded) and event.launch == self.job.launches and not self._closing:
            self._job_ended(event.error)

    def _hello(self, connection: int, hello: Hello) -> None:
        if hello.launch != self.job.launches or hello.worker >= self.hosts:  # of a job given up on
            self.hub.close_connection(connection)
            return
        previous = self._connections.get(hello.worker)
        self._connections[hello.worker] = connection
        self._addresses[hello.worker] = hello.address
        self.hellos[hello.worker] = (hello.host, hello.pid, time.time())
        self.worker_memory.pop(hello.worker, None)  # of the process before, if any
        if previous is not None:  # a retried attempt: the old connection is dead, whatever it says
            self.hub.close_connection(previous)
            self._lost(f"worker {hello.worker} started again (attempt {hello.attempt})")
        if len(self._connections) == self.hosts:
            self._start_generation()

    def _lost(self, why: str) -> None:
        if self.ready:
            log.warning("topology %s: %s; the waves in flight will run again", self.name, why)
        self._not_ready()
        self._waiting_since = time.monotonic()
        self.failures_in_a_row += 1
        self.recoveries += 1
        if self.failures_in_a_row >= self.max_failures:
            why = self._fatal or f"{self.max_failures} worker restarts in a row with no wave completed; the last: {why}"
            self.failure = TopologyFailed(f"topology {self.name!r} stopped: {why}")
            log.error("%s", self.failure)

    def _here_lost(self) -> None:
        """The worker in this process went: it starts again, as Spark retries a lost worker's task, unless it
        could not set up a task (the run stops, as a Spark job failing on such an error does)."""
        if self._fatal is not None:
            self.failure = TopologyFailed(f"topology {self.name!r} stopped: {self._fatal}")
            log.error("%s", self.failure)
            return
        self.job.start_here(self.hub, self.workers)

    def worker_summaries(self) -> list[WorkerSummary]:
        """The workers connected now, each with its host, pid, start, memory and the tasks it hosts; safe to call
        from any thread."""
        placement, spouts, ackers = dict(self.placement), dict(self.spout_workers), dict(self.acker_workers)
        summaries = []
        for worker in sorted(dict(self._connections)):
            hello = self.hellos.get(worker)
            if hello is None:
                continue
            host, pid, since = hello
            tasks = sorted(t for t, w in [*placement.items(), *spouts.items()] if w == worker)
            mine = sorted(a for a, w in ackers.items() if w == worker)
            memory = self.worker_memory.get(worker)
            summaries.append(WorkerSummary(worker, host, pid, since, tasks, mine, memory or None))
        return summaries

    def buffered_bytes(self) -> tuple[int, int]:
        """Bytes held on the way: by the hub (to the workers, not yet sent), and by the workers' links (received
        and not yet handled, or sent to a peer and not yet acknowledged), as of each worker's last report."""
        if self.hub is None:
            return 0, 0
        return self.hub.buffered_bytes(), sum(self.link_buffers.values())

    def _not_ready(self) -> None:
        """Waves wait for the workers; the replace timeout counts from the first loss since the run was ready."""
        self.link_buffers = {}  # the workers' figures come again with their next reports
        if self.ready or self._lost_at is None:
            self._lost_at = time.monotonic()
        self.ready = False

    def _job_ended(self, error: BaseException | None) -> None:
        here = self._connections.get(self.workers) if self.job.has_worker_here else None
        if here is not None:  # the worker in this process goes too: the next launch starts its own
            self.hub.send([(here, Stop(fail_pending=True))])
        self._connections.clear()
        self._not_ready()
        if error is None:
            error = RuntimeError("the worker job ended while the topology was running")
        why = (
            fatal_message(error)
            or self._fatal
            or stop_reason(error, self.failures_in_a_row + 1, self.max_failures, "worker jobs")
        )
        if why is not None:
            self.failure = TopologyFailed(f"topology {self.name!r} stopped: {why}")
            log.error("%s", self.failure)
            return
        self.failures_in_a_row += 1
        log.warning("topology %s: the worker job failed; launching it again", self.name, exc_info=error)
        self.job.launch(self.hub, self.workers)

    def _check_workers(self, quiet: bool = False) -> None:
        """Shrink onto the workers that remain when a lost one is not replaced within the replace timeout;
        grow back when executors joined since the run last chose its size; recover from a broken link, and, when
        ``quiet`` (the hub had nothing to read), from a stalled wave. A failure no retry can fix found on the way is
        raised, as one found handling a worker's message is."""
        self._look_at_workers(quiet)
        if self.failure is not None:
            raise self.failure

    def _look_at_workers(self, quiet: bool = False) -> None:
        if self.hub is None or self._closing:
            return
        now = time.monotonic()
        if self.ready and self._broken_links:
            self._recover_links(now)
        if not self.ready:
            lost_for = now - self._lost_at if self._lost_at is not None else 0.0
            remaining = sum(1 for worker in self._connections if worker < self.workers)  # of the Spark job's
            if lost_for > self.replace_timeout and 0 < remaining < self.workers:
                self._relaunch(
                    remaining, f"{self.workers - remaining} worker(s) not replaced within {self.replace_timeout}s"
                )
            self._check_ready()
        elif len(self.book):
            self._watch_oldest_wave(now, quiet)
        if self.ready and self.workers < self.wanted_workers and now - self._grow_checked_at > GROW_CHECK_SECS:
            self._grow_checked_at = now
            executors = self.job.executors()
            if executors > self._executors_seen:
                self._relaunch(self.wanted_workers, f"{executors - self._executors_seen} executor(s) joined")
            else:
                self._executors_seen = executors  # one lost since is not a reason to grow when it comes back

    def _recover_links(self, now: float) -> None:
        """A link between two workers broke, and what it carried is lost; the worker at its far end is still
        connected a grace period later (a lost one starts the next generation itself). Every worker starts again
        from the last completed wave, as after a loss, and the waves in flight run again on new links. Links that
        keep breaking stop the run, as workers that keep failing do."""
        since, why = min(self._broken_links.values())
        if now - since < LINK_GRACE_SECS:
            return
        if not all(peer in self._connections for peer in self._broken_links):
            self._broken_links = {}  # a peer that went: its loss starts the next generation
            return
        self._start_again(why)

    def _start_again(self, why: str) -> None:
        """Every worker starts again from the last complete snapshot, as after a loss, though none was lost: the
        waves in flight run again. Counted toward ``squall.wave.max.failures``, as a loss is."""
        self._lost(why)
        if self.failure is None and len(self._connections) == self.hosts:
            self._start_generation()

    def _watch_oldest_wave(self, now: float, quiet: bool) -> None:
        """The oldest wave in flight, with no report since half of ``squall.wave.stall.secs``: named in the log
        with what it waits for, and every worker asked what it waits for (``Describe``). After all of it, with
        nothing left to read and every worker's answer in (none is at work in a component), the workers start
        again from the last complete snapshot: the wave would never complete (architecture.md, Faults)."""
        flight = self.book.flights()[0]
        waited = now - max(flight.sent_at, self._progress_at)
        if self.stall_secs and waited >= self.stall_secs and quiet and self._answered >= set(self._connections):
            self._start_again(f"wave {flight.wave} made no progress in {waited:.0f}s (squall.wave.stall.secs)")
            return
        warn_after = self.stall_secs / 2 if self.stall_secs else STALL_WARNING_SECS
        if waited < warn_after or now - self._stall_warned_at < warn_after:
            return
        self._stall_warned_at = now
        busy = sorted(set(self._connections) - self._answered) if self._asked else []
        if busy:  # still in a component (a sink waiting for its broker, say): that is no stall
            log.warning(
                "topology %s: workers %s did not say what they wait for: at work in a bolt or spout", self.name, busy
            )
        self._asked, self._answered = True, set()
        _, missing, spout_workers = self.book.oldest_missing()
        log.warning(
            "topology %s: wave %d (generation %d) in flight for %.0fs; no report yet from tasks %s on workers %s, "
            "nor from the spouts on workers %s",
            self.name,
            flight.wave,
            self.generation,
            now - flight.sent_at,
            missing,
            sorted({self.placement[t] for t in missing}),
            spout_workers,
        )
        self.hub.send([(connection, Describe()) for connection in self._connections.values()])

    def _check_ready(self) -> None:
        if not self.ready and time.monotonic() - self._waiting_since > READY_WARNING_SECS:
            log.warning(
                "topology %s: %d of %d workers connected after %.0fs; a worker needs a free executor core",
                self.name,
                len(self._connections),
                self.hosts,
                time.monotonic() - self._waiting_since,
            )
            self._waiting_since = time.monotonic()

    def _start_generation(self) -> None:
        """Every worker (re)starts its tasks from the snapshots of the last completed wave; the waves in flight
        go out again."""
        self.generation += 1
        self._progressed(self.generation)
        self._broken_links = {}  # the Assign below hands out the peers' addresses again: new links
        self.tasks_up = False  # until a wave of this generation completes
        self.placement_of_worker = {w: [t for t in self.tasks if self.placement[t] == w] for w in range(self.hosts)}
        messages = [
            (
                connection,
                Assign(
                    self.generation,
                    worker,
                    self.settings,
                    self.placement,
                    self.placement_of_worker[worker],
                    self.recovery.start(self.applied),
                    {t: self.recovery.snapshot_of(t) for t in self.placement_of_worker[worker]},
                    {w: self._addresses[w] for w in self._connections},
                    [t for t, w in self.spout_workers.items() if w == worker],
                    [a for a, w in self.acker_workers.items() if w == worker],
                    self.acker_workers,
                    self.applied,
                    sorted(set(self.spout_workers.values()) & set(self.acker_workers.values())),
                ),
            )
            for worker, connection in self._connections.items()
        ]
        self.hub.send(messages)
        self.ready = True
        self._lost_at = None
        if self.on_generation is not None:
            self.on_generation(self.generation)
        # Every wave since the last complete snapshot runs again from the spouts' logs, the ones in flight too
        # (their acks may have been applied): the acker tasks withdraw what they applied of those in flight and
        # take the run again's acks instead (AckGate).
        self.dropped_checkpoints.extend(f.checkpoint for f in self.book.flights() if f.checkpoint is not None)
        self._act(self.book.handle(self._generation_started()), [])
        self.next_wave = self.recovery.start(self.applied) + 1
        for replay in self.recovery.restart():
            flight = replace(replay, sent_at=time.monotonic())
            # One that had completed is silent: it was counted the first time. One that was in flight is not.
            self.book.handle(WaveSent(flight.wave, flight, replay=flight.wave <= self.applied))
            self._send_wave(flight)
            self.next_wave = flight.wave + 1

    def _progressed(self, generation: int) -> None:
        """A report of this generation came: the waves are moving (``_watch_oldest_wave``)."""
        if generation == self.generation:
            self._progress_at, self._asked, self._answered = time.monotonic(), False, set()

    def _generation_started(self) -> GenerationStarted:
        return GenerationStarted(self.generation, frozenset(self.tasks), frozenset(self.spout_workers.values()))

    def _report(self, report: TaskReport, done: list[CompletedWave]) -> None:
        self._progressed(report.generation)
        self._act(self.book.handle(TaskReported(report.generation, report.wave, report.task, report)), done)

    def _spout_report(self, report: SpoutReport, done: list[CompletedWave]) -> None:
        if report.wave == FINAL_REPORT:  # spouts stopped (a relaunch): what they did as they closed still counts
            self.stopped_spouts.append(report.spouts)
            return
        self._progressed(report.generation)
        self._act(self.book.handle(SpoutsReported(report.generation, report.wave, report.worker, report)), done)

    def _act(self, instructions: list[WaveCompleted | CommitDue | SpoutsUncounted], done: list[CompletedWave]) -> None:
        for instruction in instructions:
            if isinstance(instruction, WaveCompleted):
                done.append(self._complete(instruction))
            elif isinstance(instruction, SpoutsUncounted):  # what those spouts and ackers did counts, wave or not
                self.stopped_spouts.extend(report.spouts for report in instruction.spout_reports)
                self.stopped_ackers.extend(report.ackers for report in instruction.spout_reports if report.ackers)
            else:  # told the workers with the next wave: their spout logs and ack records up to the snapshot go
                self._commit_due = Commit(instruction.generation, instruction.wave, self.recovery.wave)

    def flush_commit(self) -> None:
        """Send the latest Commit now, when no wave is about to carry it (the run pauses, or stops)."""
        commit, self._commit_due = self._commit_due, None
        if commit is not None and commit.generation == self.generation and self.ready:
            self.hub.send([(c, commit) for c in self._connections.values()])

    def release(self, wave: int) -> None:
        """A checkpoint holding the stateful tasks' state as of ``wave`` is complete: the acks they sent up to it
        may be applied."""
        if self.hub is not None:
            self.hub.send([(c, Release(self.generation, wave)) for c in self._connections.values()])

    def _complete(self, completed: WaveCompleted) -> CompletedWave:
        flight = completed.flight
        self.applied = flight.wave
        if not flight.replay:  # a wave run again from the logs calls no spout: it proves no task's setup
            self.failures_in_a_row = 0
            self.tasks_up = True
        inbox_peak = self.inbox_peaks.pop(flight.wave, 0)
        for earlier in [w for w in self.inbox_peaks if w < flight.wave]:  # of waves that ran again
            del self.inbox_peaks[earlier]
        status, captured, parts, written = {}, {}, {}, {}
        holds_acks = False
        for task, report in completed.reports.items():
            if report.written is not None:  # at a snapshot wave
                written[task] = report.written
            if report.part is not None:
                parts[task] = report.part
            status[(report.component, task)] = report.status
            if report.captured:
                captured[(report.component, task)] = report.captured
            if task in self.stateful_tasks and (report.status.acked or report.status.failed or report.status.emitted):
                holds_acks = True
        spouts: dict[int, tuple[str, SpoutStatus]] = {}
        ackers: dict[int, tuple[int, int]] = {}
        for spout_report in completed.spout_reports.values():
            spouts.update(spout_report.spouts)
            ackers.update(spout_report.ackers)
            captured.update(spout_report.captured)
        if flight.snapshot:
            self.recovery.completed(flight.wave, written)
        now = time.monotonic()
        seconds = now - max(flight.sent_at, self._last_completed_at)  # its own time, not its wait behind another
        self._last_completed_at = now
        return CompletedWave(
            flight.wave,
            seconds,
            flight.tuples,
            flight.checkpoint,
            status,
            captured,
            spouts,
            sum(r.emits for r in completed.spout_reports.values()),
            sum(r.pending for r in completed.spout_reports.values()),
            any(r.acks_behind for r in completed.spout_reports.values()),
            holds_acks,
            ackers,
            parts,
            inbox_peak,
        )

    # -- stopping -----------------------------------------------------------------------
    def interrupt(self) -> None:
        """Make any poll, now or later, return at once: the run is being killed."""
        self.interrupted.set()
        if self.hub is not None:
            self.hub.wake()  # a poll waiting for events returns

    def take_stopped_ackers(self) -> list[dict[int, tuple[int, int]]]:
        """The acker tasks' counts (acks merged, trees settled) of spout reports whose wave ran again."""
        stopped, self.stopped_ackers = self.stopped_ackers, []
        return stopped

    def take_stopped_spouts(self) -> list[dict[int, tuple[str, SpoutStatus]]]:
        """The counters of spout tasks stopped since the last call (a relaunch), and of spout reports whose wave
        ran again, to fold into the run's."""
        stopped, self.stopped_spouts = self.stopped_spouts, []
        return stopped

    def _read_until_the_job_ends(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the worker job to end, reading what the workers send meanwhile."""
        deadline = time.monotonic() + timeout
        while self.job.running and (left := deadline - time.monotonic()) > 0:
            event = self.hub.next_event(min(left, 0.1))
            if isinstance(event, JobEnded) and event.launch == self.job.launches:
                self.job.join(left)
            self._take_final_report(event)

    def _take_final_report(self, event: Any) -> None:
        """What a worker's spouts did as they stopped (trees failed back) counts in ``final_spouts``."""
        message = event.message if isinstance(event, Received) else None
        if isinstance(message, SpoutReport) and message.wave == FINAL_REPORT:
            self.final_spouts.update(message.spouts)
        elif isinstance(message, SpoutReport):  # held on its worker for its bolts' reports, which never came
            self._act([SpoutsUncounted([message])], [])
        elif isinstance(message, Hello) and self._stop is not None:  # a worker that came up as the run stopped
            self.hub.send([(event.connection, self._stop)])

    def close(self, timeout: float = 10.0, fail_pending: bool = False, active: bool = True) -> None:
        """Stop the workers (their spouts failing their pending trees back first, with ``fail_pending``); a job
        that does not end (a worker waits for a core) is cancelled."""
        if self.hub is None:
            return
        self.flush_commit()
        self._closing = True
        stop = self._stop = Stop(fail_pending, active, final=True)
        self.hub.send([(connection, stop) for connection in self._connections.values()])
        self._read_until_the_job_ends(timeout if self.ready else min(timeout, 1.0))
        if self.job.running:
            self.job.cancel()
            self._read_until_the_job_ends(timeout)
        deadline = time.monotonic() + timeout
        while self.worker_here is not None and self.worker_here.alive and time.monotonic() < deadline:
            self._take_final_report(self.hub.next_event(0.05))
        # What the workers sent before the job ended: read until each closed its connection, or for a moment.
        deadline = time.monotonic() + FINAL_REPORTS_SECS
        while self.hub.connections and time.monotonic() < deadline:
            self._take_final_report(self.hub.next_event(0.05))
        while (event := self.hub.next_event(0.0)) is not None:
            self._take_final_report(event)
        self.hub.close()
        log.info(
            "topology %s: the hub carried %d bytes from the workers and %d to them in %d waves",
            self.name,
            self.hub.bytes_in,
            self.hub.bytes_out,
            self.next_wave - 1,
        )
        self.recovery.remove()
