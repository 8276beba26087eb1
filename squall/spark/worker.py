"""A squall worker: one long-lived Spark task that hosts bolt tasks, spout and acker tasks
(``worker_spouts.py``), for the whole run (``TestCluster``'s spout and acker tasks: ``InProcessWorker``).

The run's worker job has one Spark task per worker. Each connects to the
driver's hub, says ``Hello`` and is told by ``Assign`` which tasks it hosts
and the state they start from. Then it serves messages until ``Stop``:

* ``WaveInput`` starts a wave: the spout calls here, and the driver's tuples (ticks) for the tasks here;
* ``Commit`` and ``Release`` let the acker tasks here apply a wave's acks; ``AckerInput`` brings them;
* ``Batch`` brings an upstream task's tuples, from this worker (handed over in
  memory, never pickled) or from another one (over its link, ``links.py``);
  ``execute_batch`` runs each row through the task's bolt.

A task works on one wave at a time, in wave order (``wave_gate.WaveGate`` says
what runs when). It executes every batch of its current wave as it arrives, in
each producer's emission order, and holds batches of later waves. Whenever the
worker's inbox is empty, what its tasks emitted so far leaves, and then a plain
task's acks so far, XOR-reduced per root, go to the workers of their acker tasks
as a part of the wave's (``AckerInput``, ``final`` False). Once every producer
(the driver and each task upstream) has sent its ``last`` batch, the task ends
the wave: its remaining emits leave as ``last`` batches to every downstream
task, the rest of its acks go as the wave's final part, and a ``TaskReport``
with its counters (and, at a snapshot wave, where it wrote its state) goes to
the driver. Then the task moves on to the next wave.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

from pyspark import TaskContext, cloudpickle

from squall.model.config import (
    DEFAULTS,
    SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS,
    SQUALL_LINKS_MAX_CONNECTIONS,
    SQUALL_WORKER_GC_THRESHOLD,
    SQUALL_WORKER_SWITCH_INTERVAL_MS,
)
from squall.model.state import StateDelta, dump_delta
from squall.reliability.acks import AckBatch
from squall.security.keys import RunKeys
from squall.security.sealing import BlobSealer
from squall.spark.bolt_task import LIVE, UNSAVED, BoltTask, forget_other_runs, keep_live, start_task
from squall.spark.execution import execute_batch
from squall.spark.failures import TaskSetupError
from squall.spark.links import NOTHING, Inbox, PeerLinks, PeerListener
from squall.spark.load import TaskWeights
from squall.spark.open_wave import CallSpouts, EndSpoutPart
from squall.spark.protocol import (
    DRIVER,
    FINAL_REPORT,
    AckerInput,
    Assign,
    Batch,
    Commit,
    Describe,
    Hello,
    LinkBroken,
    Release,
    RunSettings,
    Snapshot,
    SpoutReport,
    Stop,
    TaskReport,
    WaveInput,
    WorkerChannel,
    WorkerFailed,
    WorkerReport,
    WorkerState,
)
from squall.spark.shipping import ShippedTopology, forget_run, load_shipped
from squall.spark.snapshots import SnapshotStore
from squall.spark.wave_gate import Arrived, Assigned, EndWave, Execute, Take, WaveBegan, WaveGate
from squall.spark.worker_spouts import WorkerSpouts
from squall.state.providers import COMPACT_EVERY, StatePart
from squall.time import use_simulated_time

log = logging.getLogger("squall.worker")


def run_of(store: SnapshotStore) -> str:
    return store.base.rsplit("/", 1)[-1]


class HostedTask:
    """A bolt task here; which wave it is on, and which batches it runs when, is the ``WaveGate``'s."""

    def __init__(self, task: BoltTask, readers: list[int]) -> None:
        self.task = task
        self.readers = readers  # every downstream task, each sent a last batch per wave
        self.started = False  # it has begun its current wave
        self.process_seconds = 0.0  # this wave's, for its report: see ``TaskStatus.process_seconds``
        self.inputs: dict[tuple[str, str], int] = {}  # this wave's executes per (source component, stream)


class Worker:
    def __init__(
        self,
        shipped: ShippedTopology,
        channel: WorkerChannel,
        index: int,
        inbox: Inbox,
        links: PeerLinks,
        sealer: BlobSealer,
    ) -> None:
        self.shipped = shipped
        self.sealer = sealer  # seals and opens what this worker writes under squall.checkpoint.dir
        self.topology = shipped.topology
        self.channel = channel
        self.index = index
        self.inbox = inbox  # from the driver and from the peers
        self.links = links  # to the peers
        links.on_broken = self._link_broken
        self.generation = -1
        self.placement: dict[int, int] = {}
        self.tasks: dict[int, HostedTask] = {}
        self.times: dict[int, float | None] = {}  # wave -> its simulated time
        self.checkpoints: dict[int, int] = {}  # wave -> the state checkpoint it carries
        self.local: deque[Any] = deque()  # batches between tasks of this worker
        self.spouts: WorkerSpouts | None = None  # its spout and acker tasks, when spouts run on the workers
        self.acker_workers: dict[int, int] = {}  # every acker task -> its worker, when spouts run on the workers
        self.tree_workers: list[int] = []  # the workers whose acker tasks hold trees: those hosting spout tasks
        self.num_ackers = 0
        self.store: SnapshotStore | None = None  # when spouts run on the workers: snapshots on an interval
        self.snapshot_waves: set[int] = set()  # waves at whose end every bolt task writes its state
        self.snapshot_horizon = self.checkpoint_horizon = 0  # waves of the last complete snapshot and checkpoint
        self.reports: dict[int, list[TaskReport | SpoutReport]] = defaultdict(list)  # wave -> reports made
        self.state_provider: Any = None  # where stateful tasks write their checkpoint parts, when spouts run here
        self._state_spec: Any = None
        self.weights = TaskWeights()  # the workers' load weights, read by every shuffle here when load-aware
        self.gate = WaveGate()  # which messages are taken, and when a task executes a batch or ends a wave
        self.batches: Any = None  # a run of batches: its tasks here, as its ``RunSettings.batch_host`` hosts them
        self.final = False  # the run is over: nothing of it is kept in this Python process
        self.arrivals: dict[int, float] = {}  # id of a batch taken and not executed yet -> when it was taken
        self.unshipped: set[int] = set()  # tasks that executed a batch since their emits and acks last left
        self.mixed_streams = frozenset(  # components that emit on more than one stream: their batches are counted
            cid for cid, spec in self.topology.components.items() if len(spec.streams) > 1
        )
        self._memory = (0.0, 0)  # (when read, resident bytes): read at most once a second

    # -- messages ----------------------------------------------------------------
    def serve(self) -> None:
        receive, local, inbox = self.inbox.get, self.local, self.inbox
        while True:
            if local:
                message = local.popleft()
            else:
                if self.unshipped and inbox.empty():  # nothing else to do: what the tasks made so far leaves now
                    self._ship_early()
                    if local:
                        continue
                spouts = self.spouts
                if spouts is not None and spouts.unsettled and inbox.empty():  # then logs, and acks
                    spouts.settle_due()
                    continue
                due = spouts.open_due(time.monotonic()) if spouts is not None and inbox.empty() else None
                if isinstance(due, CallSpouts):  # an open wave: its spouts called again, their emits leave
                    spouts.call_again(self._send)
                    continue
                if isinstance(due, EndSpoutPart):
                    self._end_open_wave()
                    continue
                message = receive(max(0.0, due.when - time.monotonic())) if due is not None else receive()
                if message is NOTHING:
                    continue
            if message is None:
                return
            if isinstance(message, Stop):
                self.final = message.final
                self._send_held_spout_reports()
                if self.spouts is not None:  # what closing did (trees failed back) reaches the run's counters
                    self.spouts.close(message.fail_pending, message.active)
                    statuses = self.spouts.take_statuses()
                    self.channel.send(SpoutReport(self.generation, FINAL_REPORT, self.index, statuses, 0, 0))
                    self.spouts = None
                return
            self._receive(message)

    def _receive(self, message: Any) -> None:
        if isinstance(message, Assign):
            self._assign(message)
        elif isinstance(message, Batch) and self.batches is None:
            self.arrivals.setdefault(id(message), time.perf_counter())  # held by the gate: its first arrival
            self._carry_out(self.gate.handle(Arrived(message, batch=True)))
        elif isinstance(message, Describe):  # it has no generation: answered whatever the gate holds
            self.channel.send(WorkerState(self.index, self.generation, self.describe()))
        else:
            for taken in self.gate.handle(Arrived(message)):
                self._take(taken.message)

    def _carry_out(self, steps: list[Take | Execute | EndWave]) -> None:
        for step in steps:
            if isinstance(step, Execute):
                self._execute(step.task, step.batch)
            elif isinstance(step, EndWave):
                self._end_wave(step.task, step.wave)
            else:
                self._receive(step.message)

    def _take(self, message: Any) -> None:
        """A message of this worker's generation, other than a wave's batch."""
        if self.batches is not None:
            self.batches.handle(message)
        elif isinstance(message, AckerInput):
            if self.spouts is not None:
                self.spouts.acker_input(message)
        elif isinstance(message, WaveInput):
            self._wave(message)
        elif isinstance(message, Commit):
            if self.spouts is not None:
                self.spouts.commit(message.wave, message.snapshot)
            self._restorable(snapshot=message.snapshot)
        elif isinstance(message, Release):
            if self.spouts is not None:
                self.spouts.release(message.wave)
            self._restorable(checkpoint=message.wave)
        else:
            raise TypeError(f"worker {self.index}: unexpected message {type(message).__name__}")

    def describe(self) -> str:
        """What this worker waits for, in words (``Describe``)."""
        parts = []
        for task, (wave, waiting, held) in sorted(self.gate.waits().items()):
            producers = ", ".join("the driver" if p == DRIVER else str(p) for p in waiting)
            parts.append(
                f"task {task} is on wave {wave}, waiting for the last batch of {producers or 'no one'}"
                + (f", holding batches of waves {held}" if held else "")
            )
        if self.spouts is not None and self.spouts.spout_tasks:
            parts.append(self.spouts.describe())
        if self.reports:
            parts.append(f"reports held for waves {sorted(self.reports)}")
        parts.append(f"{len(self.local)} local batches; inbox {'empty' if self.inbox.empty() else 'not empty'}")
        return "; ".join(parts)

    def _link_broken(self, peer: int, why: str) -> None:
        """The link to ``peer`` broke, and what went on it since is lost: the driver hears of it, and starts the
        workers again from the last completed wave (``LinkBroken``)."""
        with contextlib.suppress(OSError):  # the driver went too: nobody to tell
            self.channel.send(LinkBroken(self.generation, self.index, peer, why))

    def _send_held_spout_reports(self) -> None:
        """The reports of waves held here for the bolt tasks' (``_report``), dropped: their waves run again, or
        the run stops. What the spouts did in them happened, and still counts (``SpoutsUncounted``)."""
        for held in self.reports.values():
            for report in held:
                if isinstance(report, SpoutReport):
                    self.channel.send(report)
        self.reports = defaultdict(list)

    def _restorable(self, snapshot: int | None = None, checkpoint: int | None = None) -> None:
        """A snapshot or a checkpoint completed: blobs released before both the last complete snapshot and the
        last complete checkpoint are named by no state a task could be restored from, and go."""
        if snapshot is not None:
            self.snapshot_horizon = max(self.snapshot_horizon, snapshot)
        if checkpoint is not None:
            self.checkpoint_horizon = max(self.checkpoint_horizon, checkpoint)
        horizon = min(self.snapshot_horizon, self.checkpoint_horizon)
        for hosted in self.tasks.values():
            state = hosted.task.state
            if state is not None and state.blobs is not None:
                try:
                    state.blobs.collect(horizon)
                except Exception:  # the store is away: they go at the next collection
                    log.warning("%s task %d: released blobs not deleted yet", hosted.task.component, hosted.task.task)

    def _wave(self, message: WaveInput) -> None:
        if message.commit is not None and self.spouts is not None:  # the acks of waves before it may apply now
            self.spouts.commit(message.commit.wave, message.commit.snapshot)
        if message.commit is not None:
            commit = message.commit
            self._restorable(snapshot=commit.snapshot)
        self.times[message.wave] = message.simulated_now
        self.weights.update(message.weights, self.placement)
        if message.checkpoint is not None:
            self.checkpoints[message.wave] = message.checkpoint
        if message.snapshot:
            self.snapshot_waves.add(message.wave)
        self._carry_out(self.gate.handle(WaveBegan(message.wave)))  # peers' batches that came before it
        for due in message.ticks:  # before the driver's marker that ends the task's input from it
            self._deliver(due.batch(self.generation, message.wave))
        for task in message.markers:
            self._deliver(Batch(message.generation, message.wave, DRIVER, "", DRIVER, task, last=True))
        if self.spouts is not None and self.spouts.spout_tasks:  # a worker with acker tasks only has no calls
            report = self.spouts.run_wave(message, self.index, self._send)
            if report is not None:  # else its spout part stays open, or waits for the open one
                self._report(message.wave, report)

    def _end_open_wave(self) -> None:
        for report in self.spouts.end_open(self.index, self._send):
            self._report(report.wave, report)

    def _assign(self, message: Assign) -> None:
        """(Re)start the tasks here from the snapshots of wave ``base_wave``; everything older is dropped."""
        previous = [hosted.task for hosted in self.tasks.values()]
        self.close()
        self.tasks, self.times, self.checkpoints = {}, {}, {}
        self.snapshot_waves = set()
        self._send_held_spout_reports()
        self.local.clear()
        self.arrivals.clear()
        self.unshipped.clear()
        self.generation, self.placement = message.generation, message.placement
        # Restored tasks may have gone back to an older state: only what completes from now on lets blobs go.
        self.snapshot_horizon = self.checkpoint_horizon = 0
        self.links.update(message.peers)
        settings = message.settings
        if settings.state_store is not None:  # the key never travels with it: it is this worker's, from the closure
            settings = replace(settings, state_store=settings.state_store.sealed_with(self.sealer))
        if settings.snapshot_root is not None and (self.store is None or run_of(self.store) != settings.run_id):
            self.store = SnapshotStore(settings.snapshot_root, settings.run_id, self.sealer)
        forget_other_runs(settings.run_id)
        if settings.state_store != self._state_spec:
            self._state_spec = settings.state_store
            self.state_provider = settings.state_store.open() if settings.state_store is not None else None
        if settings.batch_host is not None:
            self.batches = settings.batch_host(
                self.shipped,
                settings,
                self.generation,
                self.index,
                message.tasks,
                message.spout_tasks,
                self.placement,
                self.links.send,
                self.channel.send,
            )
            self._carry_out(self.gate.handle(Assigned(self.generation, {})))
            return
        mine = frozenset(message.tasks)
        self._assign_spouts(message, settings)
        waves: dict[int, tuple[int, frozenset[int]]] = {}
        for task_id in message.tasks:
            snapshot = message.snapshots.get(task_id)
            if snapshot is not None and snapshot.path is not None:  # written by a worker: read it here
                snapshot = Snapshot(snapshot.version, self._read_snapshot(task_id, snapshot.path))
            task = start_task(self.shipped, task_id, settings, snapshot, mine, self._load_weights(settings))
            task.whole_part_due = True  # its first checkpoint part since a (re)start holds all of its state
            component = self.topology.component_of(task_id)
            upstream = self.topology.sources_of(component)
            producers = frozenset([DRIVER, *(t for source in upstream for t in self.topology.task_ids(source))])
            readers = self.topology.reader_tasks(component)
            self.tasks[task_id] = HostedTask(task, readers)
            waves[task_id] = (message.base_wave + 1, producers)
        self._release_dropped(settings.run_id, previous)
        self._carry_out(self.gate.handle(Assigned(self.generation, waves)))  # what came early for this generation

    def _release_dropped(self, run_id: str, previous: list[BoltTask]) -> None:
        """Task instances this worker no longer runs (restarted from a snapshot, or hosted elsewhere now) release
        what they hold (a connection, a file) at once. A bolt and its collector refer to each other, so only the
        cyclic collector frees a dropped instance, and an instance that ran for a while waits for a full
        collection, which may not come for the rest of the run: the worker's file descriptors would grow with
        every restart. An instance kept for a task hosted elsewhere now is not kept either: the task's state moves
        on where it runs, so a later start here would seldom find the instance at its snapshot."""
        running = {id(hosted.task) for hosted in self.tasks.values()}
        for key in [key for key in LIVE if key[0] == run_id and id(LIVE[key]) not in running]:
            previous.append(LIVE.pop(key))
        if any(id(task) not in running for task in previous):
            previous.clear()
            gc.collect()

    def _load_weights(self, settings: RunSettings) -> TaskWeights | None:
        return self.weights if settings.load_aware else None

    def _read_snapshot(self, task: int, path: str) -> bytes:
        try:
            return self.store.read_task(path)
        except Exception as exc:
            raise TaskSetupError(
                self.topology.component_of(task), task, f"its snapshot {path} cannot be read", exc
            ) from exc

    def _report(self, wave: int, report: TaskReport | SpoutReport) -> None:
        """Reports go to the driver together, one message a wave, once every task here (and the spout tasks) has
        made its own: with the worker's CPU time, from which the driver reads its load, acking on or off."""
        reports = self.reports[wave]
        reports.append(report)
        if len(reports) == len(self.tasks) + bool(self.spouts is not None and self.spouts.spout_tasks):
            buffered = self.inbox.buffered + self.links.unsent_bytes()
            report = WorkerReport(
                self.reports.pop(wave),
                self.index,
                time.process_time(),
                buffered,
                self.inbox.take_peak(),
                self._resident_bytes(),
            )
            self.channel.send(report)

    def _resident_bytes(self) -> int:
        """This process's resident memory, read from /proc at most once a second (0 where there is none)."""
        read_at, resident = self._memory
        now = time.monotonic()
        if now - read_at >= 1.0:
            resident = resident_bytes()
            self._memory = (now, resident)
        return resident

    def _assign_spouts(self, message: Assign, settings: RunSettings) -> None:
        """The spout and acker tasks here: those that stay keep their instances (their pending trees fail back to
        them), those that left are closed, and new ones are made."""
        self.acker_workers, self.num_ackers = message.acker_workers, settings.num_ackers
        self.tree_workers = message.tree_workers
        bolt_tasks = sum(spec.parallelism for spec in self.topology.bolts.values())
        same = (
            self.spouts is not None
            and self.spouts.spout_tasks == frozenset(message.spout_tasks)
            and self.spouts.ackers == frozenset(message.ackers)
            and self.spouts.settings.run_id == settings.run_id
        )
        if same:
            self.spouts.restart(message.applied, bolt_tasks, message.base_wave)
            return
        if self.spouts is not None:
            self.spouts.close(fail_pending=True)
            self.spouts = None
        if message.spout_tasks or message.ackers:
            self.spouts = WorkerSpouts(
                self.shipped,
                settings,
                message.spout_tasks,
                message.ackers,
                bolt_tasks,
                message.applied,
                self.store,
                self._load_weights(settings),
            )

    def _ship_early(self) -> None:
        """The worker has nothing else to do: the tasks that executed since they last shipped send their emits
        downstream now, and then a plain task's acks so far go to the acker tasks as a part of its wave's (they
        hold the edges of the children just sent, so no tree is acked before its children are on their way).
        Under load the inbox is seldom empty and batches grow; when it is light, tuples and acks move on at once."""
        for task_id in self.unshipped:
            hosted = self.tasks.get(task_id)
            if hosted is None or not hosted.started:
                continue
            task = hosted.task
            for batch in task.collector.take_batches():
                self._send(batch)
            if self.acker_workers and task.state is None:
                acks = task.collector.take_acks()
                if len(acks):
                    self._send_acks(task.collector.wave, task, acks, final=False)
        self.unshipped.clear()

    def _send_acks(self, wave: int, task: BoltTask, acks: AckBatch, final: bool = True) -> None:
        """A bolt task's acks of one wave, to the worker of each root's acker task: at the end of its wave, one
        message to every worker whose acker tasks hold trees (those hosting spout tasks: a tree's root is drawn for
        an acker task beside its spout task), even when it has nothing for it; a part before it (``final`` False)
        only to those it has acks for."""
        parts: dict[int, list[AckBatch]] = {w: [] for w in self.tree_workers} if final else {}
        if len(acks):
            for acker, part in enumerate(acks.by_partition(self.num_ackers)):
                if len(part):
                    parts.setdefault(self.acker_workers[acker], []).append(part)
        held = task.state is not None
        for worker, batches in parts.items():
            message = AckerInput(self.generation, wave, task.task, AckBatch.combine(batches), held, final)
            if worker == self.index:
                if self.spouts is not None:
                    self.spouts.acker_input(message)
            else:
                self.links.send(worker, message)

    def _send(self, batch: Batch) -> None:
        worker = self.placement[batch.target]
        if worker == self.index:
            self.local.append(batch)
        else:
            self.links.send(worker, batch)

    # -- waves ---------------------------------------------------------------------
    def _deliver(self, batch: Batch) -> None:
        self.arrivals.setdefault(id(batch), time.perf_counter())
        self._carry_out(self.gate.handle(Arrived(batch, batch=True)))

    def _execute(self, task_id: int, batch: Batch) -> None:
        hosted = self.tasks[task_id]
        task = hosted.task
        if not hosted.started:
            hosted.started = True
            task.begin_wave(self.generation, batch.wave)
            task.collector.ship = self._send
            use_simulated_time(self.times.get(batch.wave))
        arrived = self.arrivals.pop(id(batch), None)
        if batch.values:
            execute_batch(task, batch)
            self.unshipped.add(task_id)
            rows = len(batch.values)
            if arrived is not None:
                hosted.process_seconds += (time.perf_counter() - arrived) * rows
            inputs, component = hosted.inputs, batch.component
            if component in self.mixed_streams:
                for stream in set(batch.streams):
                    inputs[(component, stream)] = inputs.get((component, stream), 0) + batch.streams.count(stream)
            else:
                key = (component, batch.streams[0])
                inputs[key] = inputs.get(key, 0) + rows

    def _end_wave(self, task_id: int, wave: int) -> None:
        hosted = self.tasks[task_id]
        task = hosted.task
        collector = task.collector
        for batch in collector.take_last_batches(hosted.readers):
            self._send(batch)
        self.unshipped.discard(task_id)
        status = collector.status
        status.process_seconds, status.inputs = hosted.process_seconds, hosted.inputs
        hosted.process_seconds, hosted.inputs = 0.0, {}
        checkpoint = self.checkpoints.get(wave)
        if checkpoint is not None and task.state is not None:
            try:
                task.bolt.pre_commit(checkpoint)
            except Exception as exc:
                log.error("%s task %d: pre_commit(%d) raised", task.component, task.task, checkpoint, exc_info=True)
                collector.report_error(exc)
        written = self._interval_snapshot(task, wave, status.executed) if self.store is not None else None
        part = None
        if checkpoint is not None and task.state is not None and self.state_provider is not None:
            part = self._write_part(task, checkpoint)
        if task.state is not None and task.state.blobs is not None:
            task.state.blobs.end_wave(wave)
        acks = collector.take_acks()
        if self.acker_workers:  # a replayed wave's too: the acker tasks take each task's acks of a wave once
            self._send_acks(wave, task, acks)
        report = TaskReport(self.generation, wave, task.component, task.task, status, collector.captured, written, part)
        self._report(wave, report)
        hosted.started = False
        oldest = min(self.gate.wave_of(other) for other in self.tasks)  # the gate has this task on the next wave
        for done in [w for w in self.times if w < oldest]:
            del self.times[done]  # no task here still needs that wave's time
            self.checkpoints.pop(done, None)
            self.snapshot_waves.discard(done)

    def _interval_snapshot(self, task: BoltTask, wave: int, executed: int) -> Snapshot | None:
        """Snapshots on an interval: at the end of a snapshot wave, a task that executed anything since its last
        snapshot writes its state to the store (where it is written is returned). A task that executed anything
        since is no longer its last snapshot's live instance."""
        if executed:
            task.dirty, task.version = True, UNSAVED
        if wave not in self.snapshot_waves or not task.dirty:
            return None
        started = time.perf_counter()
        path = self.store.write_task(wave, task.task, task.whole_snapshot(wave))
        task.collector.status.snapshot_seconds = time.perf_counter() - started
        task.collector.status.unpicklable = task.lost_on_restore()
        task.dirty = False
        return Snapshot(wave, b"", path=path)

    def _write_part(self, task: BoltTask, checkpoint: int) -> tuple[int, bool] | None:
        """The task's part of ``checkpoint``, written through the state provider: what its state changed since
        its last part, or all of it. A store that is away leaves the changes for the next checkpoint; a value that
        cannot be pickled stops the topology, naming the component and the key."""
        started = time.perf_counter()
        task.unsaved.absorb(task.state.take_changes())
        whole = task.whole_part_due or checkpoint % COMPACT_EVERY == 0
        part = (
            StatePart(dict(task.state.items()), [], True)
            if whole
            else StatePart(task.unsaved.puts, task.unsaved.deletes)
        )
        try:
            self.state_provider.prepare(checkpoint, task.task, part)
        except Exception as exc:
            try:
                dump_delta(task.component, StateDelta(part.puts, part.deletes), cloudpickle.dumps)
            except Exception as unpicklable:
                raise TaskSetupError(task.component, task.task, "its state cannot be saved", unpicklable) from exc
            log.error("%s task %d: its part of checkpoint %d was not written", task.component, task.task, checkpoint)
            task.collector.report_error(exc)
            return None
        task.unsaved, task.whole_part_due = StateDelta(), False
        task.collector.status.state_changes = len(part)
        task.collector.status.state_seconds = time.perf_counter() - started
        return checkpoint, whole

    def close(self) -> None:
        """Keep the tasks that stand between waves for a later start in this process; a task cut off
        mid-wave holds part of a wave that will be replayed, so it is dropped."""
        if self.batches is not None:
            self.batches.close()
            self.batches = None
        if self.store is not None:
            self.store.close()
        if self.final:
            return
        for hosted in self.tasks.values():
            if not hosted.started:
                keep_live(hosted.task)


@contextmanager
def collector_tuned(threshold: int | None) -> Iterator[None]:
    """The cyclic garbage collector as ``squall.worker.gc.threshold`` sets it: what the process holds at the start
    (modules, the topology) frozen out of its scans, and its first threshold raised, since each tuple makes a few
    short-lived containers and a scan every 700 costs the workers' Python about 8% (docs/performance.md). Python's
    own settings come back when the worker ends: Spark reuses the process."""
    if threshold is None:
        yield
        return
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@contextmanager
def switch_interval(ms: float) -> Iterator[None]:
    """The GIL's switch interval as ``squall.worker.switch.interval.ms`` sets it, for the worker's life; Python's
    comes back when the worker ends, since Spark reuses the process."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(ms / 1000.0)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def resident_bytes() -> int:
    """The resident memory of this process in bytes, from ``/proc/self/statm`` (Linux); 0 where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_worker(
    run_id: str, topology_bc: Any, address: tuple[str, int], keys: RunKeys, launch: int, index: int, _rows
) -> list:
    """The body of worker ``index``'s Spark task; returns when the driver stops the run or goes away. ``keys``
    came in the task closure: the run's link secret and checkpoint key never cross a squall link."""
    shipped = load_shipped(run_id, topology_bc)
    conf = shipped.conf
    with (
        collector_tuned(conf.get(SQUALL_WORKER_GC_THRESHOLD, DEFAULTS[SQUALL_WORKER_GC_THRESHOLD])),
        switch_interval(conf.get(SQUALL_WORKER_SWITCH_INTERVAL_MS, DEFAULTS[SQUALL_WORKER_SWITCH_INTERVAL_MS])),
    ):
        return _run_worker(run_id, shipped, address, keys, launch, index)


def _run_worker(
    run_id: str,
    shipped: ShippedTopology,
    address: tuple[str, int],
    keys: RunKeys,
    launch: int,
    index: int,
    started: Callable[[Worker], None] | None = None,
) -> list:
    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    conf = {**DEFAULTS, **shipped.conf}
    timeout = conf[SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS]
    channel = WorkerChannel(address, keys.links, timeout)
    inbox, links = Inbox(), PeerLinks(keys.links, timeout)
    try:
        listener = PeerListener(channel.local_host, keys.links, inbox, timeout, conf[SQUALL_LINKS_MAX_CONNECTIONS])
    except BaseException:
        channel.close()
        raise
    channel.start_reading(inbox)
    try:
        worker = Worker(shipped, channel, index, inbox, links, keys.sealer())
    except BaseException:
        listener.close()
        channel.close()
        raise
    if started is not None:
        started(worker)
    try:
        channel.send(Hello(index, attempt, os.getpid(), socket.gethostname(), launch, listener.address))
        try:
            worker.serve()
        except TaskSetupError as exc:
            channel.send(WorkerFailed(index, str(exc)))
            raise
    finally:
        worker.close()
        if worker.final:
            forget_run(run_id)
        listener.close()
        links.close()
        channel.close()
    return [index]


class InProcessWorker:
    """Worker ``index`` on a thread of the driver's own process: ``TestCluster``'s, hosting every spout and acker
    task, so that a test's spouts are the copies of its own objects, as in Storm's one-JVM tests. It connects to
    the hub and to its peers as a worker on Spark does, and takes the same messages; ``shipped`` carries the
    declared objects rather than their pickles."""

    def __init__(
        self,
        run_id: str,
        shipped: ShippedTopology,
        address: tuple[str, int],
        keys: RunKeys,
        launch: int,
        index: int,
        name: str,
    ) -> None:
        self.worker: Worker | None = None  # once it is set up
        body = partial(_run_worker, run_id, shipped, address, keys, launch, index, self._started)
        self._thread = threading.Thread(target=self._run, args=(body,), name=f"squall-spouts-{name}", daemon=True)
        self._thread.start()

    def _started(self, worker: Worker) -> None:
        self.worker = worker

    def _run(self, body: Callable[[], list]) -> None:
        try:
            body()
        except BaseException as exc:  # the hub hears of it as a lost worker
            log.error("the worker in the driver's process stopped", exc_info=exc)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
