"""A transactional topology's batches on one worker: Storm's coordinated bolts, on the long-lived workers.

A try of a batch (its ``seq``, one per ``TransactionAttempt``) begins with ``BeginBatch``. The emitter tasks here
emit their partitions' slices (``emitters.py``), in the order batches begin, on one thread; every bolt task here
gets a fresh bolt instance, prepared for the attempt, as Storm makes one per batch. Tuples travel as ``Batch``es
(``wave`` = ``seq``) over the same links as waves; each producer ends its part with one ``last`` batch to each
reader, so a task knows when it has every tuple of the batch from every upstream task:

* a processing bolt then runs ``finish_batch``, and its emits and ``last`` batches go on;
* a committer's ``finish_batch`` waits for ``CommitBatch`` as well, which the driver sends in strict txid order
  once every processing bolt has finished; the bolts downstream of committers finish as their ``last`` batches
  come.

Each try runs on a thread of its own, so a batch whose bolt waits on something external holds up no other batch;
its bolt instances see only that thread. The worker tells the driver when each phase is done here
(``BatchReport``): ``EMITTED`` (with each partition's metadata), ``PROCESSED``, ``COMMITTED``. A tuple that fails, a
``finish_batch`` or an emitter that raises, fails the try: the driver sends ``AbortBatches`` and emits it again.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from squall.model.errors import FailedException
from squall.spark.bolt_task import BoltTask
from squall.spark.execution import execute_batch
from squall.spark.protocol import Batch, RunSettings
from squall.spark.shipping import ShippedTopology, new_component
from squall.transactional.builder import commit_phase
from squall.transactional.emitters import Emitters
from squall.transactional.messages import (
    COMMITTED,
    EMITTED,
    PROCESSED,
    AbortBatches,
    BatchReport,
    BeginBatch,
    CommitBatch,
)
from squall.transactional.resources import WorkerResources

log = logging.getLogger("squall.transactional")

FORGET_AFTER = 4096  # tries this far behind the newest are forgotten: their late messages are dropped anyway


class TaskInBatch:
    """One bolt task's part of one try."""

    def __init__(self, task: BoltTask, producers: set[int], readers: list[int], committer: bool, late: bool) -> None:
        self.task = task
        self.waiting = set(producers)
        self.readers = readers
        self.committer = committer  # finish_batch waits for the commit
        self.late = late  # in the commit phase: a committer, or downstream of one
        self.done = False


class TryOnWorker:
    """One try's bolt tasks on this worker, run on a thread of their own."""

    def __init__(self, host: BatchTasks, seq: int) -> None:
        self.host, self.seq = host, seq
        self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.tasks: dict[int, TaskInBatch] = {}
        self.began = self.committing = self.processed = self.finished = False
        self.request = False  # a request group's try: it waits for no commit and reports its results
        self.thread = threading.Thread(target=self._serve, name=f"squall-batch-{seq}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        early: list[Batch] = []  # peers' tuples that came before BeginBatch
        try:
            while not self.finished:
                message = self.inbox.get()
                if message is None:
                    return
                if isinstance(message, BeginBatch):
                    self._begin(message)
                    for batch in early:
                        self._deliver(batch)
                    early = []
                elif isinstance(message, Batch):
                    if self.began:
                        self._deliver(message)
                    else:
                        early.append(message)
                elif isinstance(message, CommitBatch):
                    self._commit()
        except Exception as exc:  # a bolt that cannot be made here, or a bug: the try fails, the worker goes on
            self._fail("".join(traceback.format_exception(exc)))
        finally:
            self.host.ended(self.seq)

    def _begin(self, message: BeginBatch) -> None:
        self.began = True
        self.attempt = message.attempt
        self.request = message.group is not None
        host = self.host
        for task_id in host.group_tasks.get(message.group, ()):
            component = host.topology.component_of(task_id)
            task = BoltTask(
                host.shipped,
                component,
                task_id,
                host.capturing if component in host.late else host.plain,
                batch_id=message.attempt,
                resources=host.resources,
            )
            task.begin_wave(host.generation, self.seq)
            task.collector.ship = host.send
            self.tasks[task_id] = TaskInBatch(
                task,
                host.producers[task_id],
                host.readers[task_id],
                component in host.committers,
                component in host.late,
            )
        for task in self.tasks.values():  # a task with no producer (none upstream emits) has every tuple now
            if not task.waiting:
                self._inputs_done(task)
        self._check_processed()

    def _deliver(self, batch: Batch) -> None:
        task = self.tasks[batch.target]
        if batch.values:
            if not self.request:
                self.host.commits.wait_for_commits()
            rows = getattr(task.task.bolt, "execute_rows", None)
            if rows is None:
                execute_batch(task.task, batch)
            elif not self._execute_rows(task.task, rows, batch):
                return
            status = task.task.collector.status
            if status.errors or status.failed:
                bolt = task.task.component
                self._fail(status.errors[0] if status.errors else f"{bolt} task {task.task.task}: tuple failed")
                return
        if batch.last:
            task.waiting.discard(batch.producer)
            if not task.waiting:
                self._inputs_done(task)

    def _execute_rows(
        self, task: BoltTask, execute_rows: Callable[[str, list[str], list[tuple]], None], batch: Batch
    ) -> bool:
        """A bolt that takes a producer's rows at once (``execute_rows(component, streams, rows)``): no ``Tuple`` is
        made per row. What it raises fails the try."""
        task.collector.status.executed += len(batch.values)
        try:
            execute_rows(batch.component, batch.streams, batch.values)
        except Exception as exc:
            self._fail(f"{task.component} task {task.task}: {''.join(traceback.format_exception(exc))}")
            return False
        return True

    def _inputs_done(self, task: TaskInBatch) -> None:
        if task.committer and not self.committing:
            self._check_processed()
        else:
            self._finish(task)

    def _finish(self, task: TaskInBatch) -> None:
        bolt_task = task.task
        if not bolt_task.basic:
            try:
                bolt_task.bolt.finish_batch()
            except FailedException as exc:
                self._fail(f"{bolt_task.component} task {bolt_task.task}: FailedException in finish_batch: {exc}")
                return
            except Exception as exc:
                text = "".join(traceback.format_exception(exc))
                self._fail(f"{bolt_task.component} task {bolt_task.task}: {text}")
                return
        for batch in bolt_task.collector.take_last_batches(task.readers):
            self.host.send(batch)
        task.done = True
        if task.late:
            self._check_committed()
        else:
            self._check_processed()

    def _check_processed(self) -> None:
        if self.processed or self.finished:
            return
        if not all(task.done for task in self.tasks.values() if not task.late):
            return
        self.processed = True
        early = [t for t in self.tasks.values() if not t.late]
        self._report(PROCESSED, early, {t.task.component: [] for t in early} if self.request else None)
        if not any(t.late for t in self.tasks.values()):  # nothing here commits: this worker is done with it
            self.finished = True

    def _commit(self) -> None:
        self.committing = True
        self.host.resources.saw_committed(self.attempt.txid - 1)  # commits come in txid order
        with self.host.commits.running():
            for task in self.tasks.values():
                if task.committer and not task.waiting and not task.done and not self.finished:
                    self._finish(task)
        self._check_committed()

    def _check_committed(self) -> None:
        if not self.committing or self.finished or not all(t.done for t in self.tasks.values() if t.late):
            return
        late = [t for t in self.tasks.values() if t.late]
        self._report(COMMITTED, late, {t.task.component: [] for t in late})
        self.finished = True

    def _report(self, phase: str, tasks: list[TaskInBatch], captured: dict | None = None) -> None:
        statuses = {t.task.task: (t.task.component, t.task.collector.status) for t in tasks}
        if captured is not None:
            for t in tasks:
                captured[t.task.component].extend(t.task.collector.captured)
        self.host.report(
            BatchReport(self.host.generation, self.seq, self.host.index, phase, statuses, {}, captured or {})
        )

    def _fail(self, text: str) -> None:
        if self.finished:
            return
        log.warning("batch %r failed on worker %d: %s", getattr(self, "attempt", self.seq), self.host.index, text)
        self.host.report(BatchReport(self.host.generation, self.seq, self.host.index, PROCESSED, failure=text))
        self.finished = True


class CommitsFirst:
    """While a try commits on this worker, the other tries' bolts wait before their next tuples, and the emitters
    before their next batch, for up to ``HOLD_SECS`` of each commit.

    Commits run one after the other in txid order, so the one running holds up every later batch's commit, while
    the tries still processing are ahead of what can commit. Sharing the GIL with them made a commit take about
    three times as long; so they wait for it (a commit never waits for them: its tuples are all in). A commit
    still running after ``HOLD_SECS`` is taken to be waiting on something outside (a database, a broker), and
    the others go on."""

    HOLD_SECS = 0.1

    def __init__(self) -> None:
        self._started: dict[int, float] = {}  # thread id -> when its commit began (time.monotonic)
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._changed:
            self._started[me] = time.monotonic()
        try:
            yield
        finally:
            with self._changed:
                del self._started[me]
                self._changed.notify_all()

    def wait_for_commits(self) -> None:
        """Return once no commit here is younger than ``HOLD_SECS``."""
        if not self._started:
            return
        with self._changed:
            while self._started:
                left = min(self._started.values()) + self.HOLD_SECS - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)


class BatchTasks:
    """A worker's bolt and emitter tasks of a transactional topology, for one generation."""

    def __init__(
        self,
        shipped: ShippedTopology,
        settings: RunSettings,
        generation: int,
        index: int,
        tasks: list[int],
        emitter_tasks: list[int],
        placement: dict[int, int],
        to_peer: Callable[[int, Any], None],
        to_driver: Callable[[Any], None],
    ) -> None:
        self.shipped, self.topology = shipped, shipped.topology
        self.generation, self.index, self.tasks, self.placement = generation, index, tasks, placement
        self.plain = RunSettings(settings.run_id, settings.seed, False, False)
        self.capturing = RunSettings(settings.run_id, settings.seed, False, True)  # commit-phase bolts: for on_commit
        self.committers = settings.committers
        self.late = frozenset(commit_phase(self.topology, settings.committers))
        self.spout_id = settings.batch_spout
        emitter_tasks = [t for t in emitter_tasks if self.topology.component_of(t) == self.spout_id]
        groups = settings.request_groups or {}
        self.group_tasks: dict[str | None, list[int]] = {}  # request spout (None: the batches) -> its tasks here
        for task in tasks:
            component = self.topology.component_of(task)
            group = next((g for g, components in groups.items() if component in components), None)
            self.group_tasks.setdefault(group, []).append(task)
        self.producers: dict[int, set[int]] = {}
        self.readers: dict[int, list[int]] = {}
        for task in tasks:
            component = self.topology.component_of(task)
            self.producers[task] = {t for c in self.topology.sources_of(component) for t in self.topology.task_ids(c)}
            self.readers[task] = self.topology.reader_tasks(component)
        self._to_peer, self._to_driver = to_peer, to_driver
        self.commits = CommitsFirst()
        self.resources = WorkerResources()
        self._send_lock = threading.Lock()  # the links to the peers
        self._report_lock = threading.Lock()  # the channel to the driver: a report waits for no peer's batch
        self._closed = False
        self._tries: dict[int, TryOnWorker] = {}
        self._ended: set[int] = set()
        self._aborted: set[int] = set()
        self._newest = 0
        self._lock = threading.Lock()
        self.emitters = (
            Emitters(
                self.topology,
                self.spout_id,
                {t: new_component(shipped, self.spout_id, t) for t in emitter_tasks},
                generation,
                shipped.conf,
            )
            if emitter_tasks
            else None
        )
        self._emits: queue.SimpleQueue[BeginBatch | None] = queue.SimpleQueue()
        if self.emitters is not None:
            threading.Thread(target=self._emit_in_order, name="squall-emitters", daemon=True).start()

    # -- messages from the worker's serving loop ---------------------------------------------------
    def handle(self, message: Any) -> None:
        if isinstance(message, BeginBatch):
            self.resources.saw_committed(message.last_committed)
            if self.emitters is not None and message.group is None:
                self._emits.put(message)
            if self.group_tasks.get(message.group):
                self._route(message.seq, message)
            for batch in message.batches:  # emitted in the driver's process: this worker's
                if self.placement.get(batch.target) == self.index:
                    self._route(batch.wave, batch)
        elif isinstance(message, Batch):
            self._route(message.wave, message)
        elif isinstance(message, CommitBatch):
            self._route(message.seq, message)
        elif isinstance(message, AbortBatches):
            with self._lock:
                for seq in message.seqs:
                    self._ended.add(seq)
                    self._aborted.add(seq)
                    attempt = self._tries.pop(seq, None)
                    if attempt is not None:
                        attempt.inbox.put(None)
        else:
            raise TypeError(f"worker {self.index}: unexpected message {type(message).__name__}")

    def _route(self, seq: int, message: Any) -> None:
        with self._lock:
            attempt = self._tries.get(seq)  # a live try takes its messages however far behind the newest it is
            if attempt is None and (seq in self._ended or seq <= self._newest - FORGET_AFTER):
                return
            if attempt is None:
                attempt = self._tries[seq] = TryOnWorker(self, seq)
                if seq > self._newest:
                    self._newest = seq
                    self._ended = {s for s in self._ended if s > seq - FORGET_AFTER}
                    self._aborted = {s for s in self._aborted if s > seq - FORGET_AFTER}
        attempt.inbox.put(message)

    def ended(self, seq: int) -> None:
        with self._lock:
            self._ended.add(seq)
            self._tries.pop(seq, None)

    def close(self) -> None:
        with self._send_lock, self._report_lock:
            self._closed = True
        self._emits.put(None)
        with self._lock:
            tries, self._tries = list(self._tries.values()), {}
        for attempt in tries:
            attempt.inbox.put(None)
        self.resources.close()

    # -- sending, from any try's thread ----------------------------------------------------------------
    def send(self, batch: Batch) -> None:
        worker = self.placement[batch.target]
        if worker == self.index:
            self._route(batch.wave, batch)
        else:
            with self._send_lock:
                if not self._closed:
                    self._to_peer(worker, batch)

    def report(self, report: BatchReport) -> None:
        with self._report_lock:
            if self._closed:  # the run stopped, or this generation ended: nothing is waiting for it
                return
            try:
                self._to_driver(report)
            except OSError:  # the driver went away: the worker stops too
                self._closed = True

    # -- the emitter tasks here, one batch after the other ---------------------------------------------
    def _emit_in_order(self) -> None:
        while True:
            begin = self._emits.get()
            if begin is None:
                self.emitters.close()
                return
            with self._lock:
                if begin.seq in self._aborted:
                    continue
            self.commits.wait_for_commits()
            emitted = self.emitters.emit(begin.seq, begin.attempt, begin.plans, self.send, begin.last_committed)
            statuses = {task: (self.spout_id, status) for task, status in emitted.statuses.items()}
            report = BatchReport(
                self.generation, begin.seq, self.index, EMITTED, statuses, emitted.metas, failure=emitted.failure
            )
            self.report(report)
