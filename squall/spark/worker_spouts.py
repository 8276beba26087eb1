"""A worker's spout tasks and acker tasks, as Storm's spout executors and ``__acker`` tasks run in its workers.

Under ``LocalCluster`` and ``squall run`` they are spread over the Spark job's workers: spout task *i* of a
component lives on the *i*-th worker (mod their number) of those hosting an acker task, and acker task *a* on
worker *a* mod the workers. ``TestCluster`` puts them all on one more worker, in the test's own process
(``worker.InProcessWorker``), which takes the same messages over the same kind of connection. Every call a
spout task gets (``open``, ``activate``, ``deactivate``, ``next_tuple``, ``ack``, ``fail``, ``close``) is made
on the worker's one serving thread.

Each wave, when its ``WaveInput`` arrives:

1. the timeout rotations due expire trees (``fail``, reason timeout);
2. ``next_tuple`` is called on each spout task here, within its ``topology.max.spout.pending`` budget and the
   wave's calls (the burst), and the emits leave, straight to the workers of their target tasks;
3. when the spouts ran dry before the wave's calls were spent, the wave stays open: they are called again at the
   worker's idle moments and what they emit leaves at once, until ``squall/spark/open_wave.py`` says the part
   ends (a wave that arrives meanwhile waits for it);
4. each spout task ends its part of the wave with a ``last`` batch to every task that reads it, and a
   ``SpoutReport`` goes to the driver.

A tree's root is drawn so that its acker task is on this worker: its init goes to its ``Acker`` here, and
its settlement (``ack`` or ``fail`` on the spout task) never leaves the process. The bolt tasks send their acks
(``AckerInput``, XOR-reduced per root) to the worker of each root's acker: parts whenever their worker is idle,
and a final one per wave, even when empty. They are applied in any order, as Storm's acker applies its
messages, whenever this worker is idle (all that came since its last idle moment in one merge), so a tree is
acked as soon as its last task has executed its tuple and both workers had a moment with nothing else to do; a
stateful task's come at the end of its wave and wait for the checkpoint that holds its state
(``Release``).

When the run starts again after a worker was lost, every task restarts from the last complete snapshot and every
wave sent since it runs again from the spout tasks' logs, so the tasks' state holds every tree acked before the
loss, and the trees still pending are completed by the acks of the run again (``AckGate``). A wave's emits are
pickled for the log as they leave (a record for the burst and one for each part after it), and the log is
written after them, when the worker is next idle, and at the
latest before any tree is acked or failed here or any message from the driver is taken: writing it is not on
their way, and no tree is acked whose wave a run again would not hold. Acks the gate lets through are applied
then too, all those that came since the last idle moment in one merge. A spout task whose worker was lost (and
with it the acker tasks there, and their trees) is opened again, and its source redelivers what it had not acked:
Storm's "acker task dies" case. Nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable

from squall.model.config import DEFAULTS, SQUALL_WAVE_SPOUT_SLICE
from squall.model.topology import Topology
from squall.reliability.ack_gate import AckGate, AcksArrived, ApplyAcks, CheckpointReleased, WaveCommitted
from squall.reliability.acks import AckBatch
from squall.spark.load import TaskWeights
from squall.spark.open_wave import CallSpouts, EndSpoutPart, OpenWave, WaitUntil, open_wave_settings
from squall.spark.protocol import (
    AckerInput,
    Batch,
    RunSettings,
    SpoutReport,
    SpoutStatus,
    WaveInput,
)
from squall.spark.shipping import ShippedTopology, new_component
from squall.spark.snapshots import SnapshotStore, pickle_spout_wave
from squall.spark.spouts import SpoutHost
from squall.spark.stats import RunStats, encode_latencies, latency_histogram
from squall.spark.trees import PendingTrees
from squall.time import now, time_reader, use_simulated_time

log = logging.getLogger("squall.worker")


class TopologyTime:
    """The clock spouts on a worker measure complete latency by: the wave's simulated time, else the wall's."""

    simulated = False

    def now(self) -> float:
        return now()

    def reader(self) -> Callable[[], float]:
        return time_reader()


def spout_placement(topology: Topology, acker_workers: dict[int, int], hosts: list[int]) -> dict[int, int]:
    """Spout task *i* of each component on the *i*-th of the ``hosts`` hosting an acker task (all of them when
    acking is off), mod their number."""
    hosts = sorted(set(acker_workers.values())) or hosts
    return {
        task: hosts[index % len(hosts)] for spec in topology.spouts.values() for index, task in enumerate(spec.tasks)
    }


def acker_placement(num_ackers: int, hosts: list[int]) -> dict[int, int]:
    """Acker task *a* on the *a*-th of the ``hosts``, mod their number."""
    return {acker: hosts[acker % len(hosts)] for acker in range(num_ackers)} if hosts else {}


class WorkerSpouts:
    def __init__(
        self,
        shipped: ShippedTopology,
        settings: RunSettings,
        spout_tasks: list[int],
        ackers: list[int],
        bolt_tasks: int,
        applied: int,
        store: SnapshotStore | None = None,
        weights: TaskWeights | None = None,
    ) -> None:
        self.topology = shipped.topology
        self.settings = settings
        self.spout_tasks = frozenset(spout_tasks)
        self.ackers = frozenset(ackers)
        self.store = store  # the spout tasks' emits of each wave are logged there, for replay
        self.logged: deque[tuple[int, int]] = deque()  # (spout task, wave) logged, oldest first
        self.unlogged: list[tuple[int, int, bytes]] = []  # (spout task, wave, its emits pickled): sent, to write
        self.due: list[ApplyAcks] = []  # acks the gate let through, to apply (``settle_due``)
        self.stats = RunStats()
        conf = shipped.conf
        num_ackers = settings.num_ackers
        self.trees = PendingTrees(num_ackers, ackers) if settings.acking and ackers else None
        self.host = SpoutHost(
            self.topology,
            conf,
            self.stats,
            self.trees,
            TopologyTime(),
            conf.get("topology.max.spout.pending"),
            {} if settings.capture else None,
            tasks=spout_tasks,
            make_spout=lambda _topology, component, task: new_component(shipped, component, task),
            weights=weights,
        )
        self.readers = {component: self.topology.reader_tasks(component) for component in self.topology.spouts}
        self.gate = AckGate(bolt_tasks, applied)  # when the bolts' acks are applied (``squall/reliability``)
        self.open_wave = OpenWave(open_wave_settings(conf))  # when the spouts are called between waves
        self.slice = int(conf.get(SQUALL_WAVE_SPOUT_SLICE, DEFAULTS[SQUALL_WAVE_SPOUT_SLICE]))
        self.opened: WaveInput | None = None  # the wave whose spout part is open
        self.waiting: list[WaveInput] = []  # waves whose spout part waits for the open one to end

    @property
    def unsettled(self) -> bool:
        """Waves sent are not logged yet, or acks let through are not applied yet (``settle_due``)."""
        return bool(self.unlogged or self.due)

    def settle_due(self) -> None:
        """Write the logs of the waves sent since the last call, then apply the acks the gate let through since
        then, all in one merge (each merge has a fixed cost, and a worker takes many small ``AckerInput``s a
        wave). The worker calls it whenever its inbox is empty; everything here that settles trees, reads the
        logs or reports calls it first, so no tree is acked before its wave is logged."""
        unlogged, self.unlogged = self.unlogged, []
        for task, wave, blob in unlogged:
            self.store.log_spout_wave(task, wave, blob)
            self.logged.append((task, wave))
        if self.due:
            due, self.due = self.due, []
            acks = AckBatch.combine([batch for instruction in due for batch in instruction.acks])
            if self.trees is not None and len(acks):
                self.host.settle(self.trees.merge_acks(acks))

    def restart(self, applied: int, bolt_tasks: int, snapshot: int = 0) -> None:
        """A new generation: the workers' tasks restart from the last complete snapshot, and every wave sent since
        it runs again, with its acks. Of the waves after ``applied`` (the last completed one) the acks applied here
        are withdrawn from the trees still pending, which the run again's acks complete; the trees acked already
        stay acked, the restarted tasks' state holding what their tuples did (``AckGate``)."""
        self.settle_due()
        self.opened, self.waiting = None, []  # the waves they were run again, from the logs
        self.open_wave.ended()
        for withdrawn in self.gate.restarted(bolt_tasks, applied, snapshot):
            acks = AckBatch.combine(withdrawn.acks)
            if self.trees is not None and len(acks):
                self.host.settle(self.trees.withdraw_acks(acks))

    # -- a wave's spout calls ----------------------------------------------------------
    def run_wave(self, message: WaveInput, worker: int, send: Callable[[Batch], None]) -> SpoutReport | None:
        """The wave's spout calls (or, for a replayed wave, what the spout tasks logged for it); its batches go
        out through ``send``. Returns the wave's report once the spout tasks' part of it ended; None while it stays
        open (``squall/spark/open_wave.py``): the worker then carries out ``open_due`` at its idle moments. A wave that
        comes while another is open waits for it to end (``end_open``)."""
        if self.opened is not None:
            self.waiting.append(message)
            return None
        self.settle_due()
        use_simulated_time(message.simulated_now)
        if message.replay:
            return self._replay(message, worker, send)
        for _ in range(message.rotations):
            if self.trees is not None:
                self.host.settle(self.trees.rotate())
        self.host.set_active(message.active)
        if self.trees is not None:
            self.trees.wave = message.wave
        self.host.begin_wave()
        emits = self._burst(message, send)  # an open() that raises stops the run: TaskSetupError
        by_source = self.host.take_wave()
        if not self.open_wave.burst(time.monotonic(), emits, self._spent(message.spout_calls), self.host.active):
            return self._end(message, worker, by_source, send)
        self._send_part(message, by_source, send)
        self.opened = message
        return None

    def _burst(self, message: WaveInput, send: Callable[[Batch], None]) -> int:
        """The wave's first calls, in slices of ``squall.wave.spout.slice`` emits a spout task: what each slice
        but the last emitted leaves at once, as an open wave's parts do, so the bolts downstream (on the other
        workers above all) start on the wave while the spouts are still called. Returns the emits."""
        calls, emits = message.spout_calls, 0
        for upto in range(self.slice, calls, self.slice) if self.slice else ():
            emits += self.host.call(upto)
            if not self._spent(upto):  # a spout task ran short in this slice: the burst ends with it, for a spout
                return emits  # that trickles (a paced one) would keep it going a slice of a few tuples at a time
            self._send_part(message, self.host.take_wave(), send)
        return emits + self.host.call(calls)

    def open_due(self, now: float) -> CallSpouts | EndSpoutPart | WaitUntil | None:
        """What the open wave's spout part needs at an idle moment of the worker (None: no wave is open)."""
        return self.open_wave.due(now) if self.opened is not None else None

    def call_again(self, send: Callable[[Batch], None]) -> None:
        """More spout calls into the open wave; what they emit leaves at once."""
        message = self.opened
        self.settle_due()
        use_simulated_time(message.simulated_now)
        emits = self.host.call(message.spout_calls)
        if emits:
            self._send_part(message, self.host.take_wave(), send)
        self.open_wave.called(time.monotonic(), emits, self._spent(message.spout_calls))

    def end_open(self, worker: int, send: Callable[[Batch], None]) -> list[SpoutReport]:
        """The open wave's spout part ends: its ``last`` batches leave and its report is made; the waves that
        waited for it run in turn (a replayed one at once, another possibly staying open). Their reports."""
        message, self.opened = self.opened, None
        self.open_wave.ended()
        self.settle_due()
        reports = [self._end(message, worker, {}, send)]
        while self.waiting and self.opened is None:
            report = self.run_wave(self.waiting.pop(0), worker, send)
            if report is not None:
                reports.append(report)
        return reports

    def describe(self) -> str:
        """Where the spout tasks' waves stand, in words."""
        opened = f"wave {self.opened.wave} open" if self.opened is not None else "no wave open"
        waiting = [message.wave for message in self.waiting]
        return f"spout part: {opened}" + (f", waves {waiting} waiting for it" if waiting else "")

    def _spent(self, calls: int) -> bool:
        """Every spout task here made ``calls`` emits in the wave (all it allows, for ``spout_calls``)."""
        emitted = self.host.wave_emits
        return all(emitted.get(s.task, 0) >= calls for s in self.host.tasks)

    def _send_part(
        self, message: WaveInput, by_source: dict[int, dict[int, Batch]], send: Callable[[Batch], None]
    ) -> None:
        """Emits of the open wave before its end: they leave at once (``last`` comes at the end)."""
        for task, batches in by_source.items():
            self._send_early(message, task, batches.values(), send)
        self._after_send(message, by_source)

    @staticmethod
    def _send_early(message: WaveInput, task: int, batches: Iterable[Batch], send: Callable[[Batch], None]) -> None:
        """Spout task ``task``'s ``batches`` of ``message``'s wave, before its ``last`` ones."""
        for batch in batches:
            batch.generation, batch.wave, batch.producer, batch.last = message.generation, message.wave, task, False
            send(batch)

    def _after_send(self, message: WaveInput, by_source: dict[int, dict[int, Batch]]) -> None:
        """Once batches left: their trees' inits to the ackers here, and their record for the spout's log."""
        self.host.merge_inits()  # after the batches left, before any ack is taken here
        if self.store is not None:  # pickled before the bolts here see the values; written when idle
            for task, batches in by_source.items():
                if batches:
                    self.unlogged.append((task, message.wave, pickle_spout_wave(list(batches.values()))))

    def _end(
        self, message: WaveInput, worker: int, by_source: dict[int, dict[int, Batch]], send: Callable[[Batch], None]
    ) -> SpoutReport:
        """The spout part of ``message``'s wave ends with ``by_source``: ``last`` batches to every reader."""
        self._send_wave(message, by_source, send)
        self._after_send(message, by_source)
        emits = sum(self.host.wave_emits.values())
        pending = len(self.trees) if self.trees is not None else 0
        statuses = self.take_statuses()
        ackers, captured = self.take_ackers(), self.host.take_captured()
        return SpoutReport(
            message.generation, message.wave, worker, statuses, pending, emits, ackers, captured, self.behind
        )

    def _replay(self, message: WaveInput, worker: int, send: Callable[[Batch], None]) -> SpoutReport:
        """A wave run again: each spout task's logged batches, in the order they first went out, then ``last``."""
        for s in self.host.tasks:
            self._send_early(message, s.task, self.store.spout_wave(s.task, message.wave), send)
        self._send_wave(message, {}, send)
        pending = len(self.trees) if self.trees is not None else 0
        statuses = self.take_statuses()
        return SpoutReport(message.generation, message.wave, worker, statuses, pending, 0, self.take_ackers())

    def _send_wave(
        self, message: WaveInput, by_source: dict[int, dict[int, Batch]], send: Callable[[Batch], None]
    ) -> None:
        """Each spout task's batches of the wave, each reader's ending its part (``last``), empty if need be."""
        for s in self.host.tasks:
            mine = by_source.get(s.task, {})
            for reader in self.readers[s.component]:
                batch = mine.get(reader) or Batch(0, 0, s.task, s.component, s.task, reader)
                batch.generation, batch.wave, batch.producer = message.generation, message.wave, s.task
                batch.last = True
                send(batch)

    @property
    def behind(self) -> bool:
        """The acker tasks here wait for acks of a wave the driver said completed."""
        return bool(self.ackers) and self.gate.behind

    def take_ackers(self) -> dict[int, tuple[int, int]]:
        """Each acker task's acks merged and trees settled since the last report."""
        return self.trees.take_acker_counts() if self.trees is not None else {}

    def take_statuses(self) -> dict[int, tuple[str, SpoutStatus]]:
        """Each spout task's counters since the last report; they start again from zero."""
        self.host.count_emits()
        statuses = {}
        errors = defaultdict(list)
        for report in self.stats.errors:
            errors[report.task].append(report.text)
        self.stats.errors.clear()
        for s in self.host.tasks:
            stats = self.stats.of_task(s.component, s.task)
            latencies = None
            if stats.latency_count:
                latencies = encode_latencies(stats.latencies)
                stats.latencies = latency_histogram()  # a new one: resetting one zeroes its counts in Python
            statuses[s.task] = (
                s.component,
                SpoutStatus(
                    stats.emitted,
                    stats.acked,
                    stats.failed,
                    stats.timed_out,
                    stats.malformed,
                    errors[s.task],
                    latencies,
                    self.host.repeated.pop(s.task, None),
                ),
            )
            stats.emitted = stats.acked = stats.failed = stats.timed_out = stats.malformed = stats.errors = 0
        return statuses

    # -- the acker tasks here -------------------------------------------------------------
    def acker_input(self, message: AckerInput) -> None:
        """A bolt task's acks: the gate says which apply now; they are applied at the next ``settle_due``."""
        self.due += self.gate.handle(AcksArrived(message.wave, message.task, message.acks, message.held, message.final))

    def commit(self, wave: int, snapshot: int = 0) -> None:
        self.due += self.gate.handle(WaveCommitted(wave, snapshot))
        self.settle_due()
        dropped: dict[int, int] = {}  # spout task -> the last of its logged waves a complete snapshot holds
        while self.logged and self.logged[0][1] <= snapshot:  # logged in wave order
            task, logged_wave = self.logged.popleft()
            dropped[task] = logged_wave
        for task, through in dropped.items():
            self.store.drop_spout_waves(task, through)

    def release(self, wave: int) -> None:
        self.due += self.gate.handle(CheckpointReleased(wave))
        self.settle_due()

    # -- stopping -------------------------------------------------------------------------
    def close(self, fail_pending: bool = False, active: bool = True) -> None:
        """Close the spout tasks here; with ``fail_pending``, their pending trees fail back to them first, and
        ``active`` False tells them ``deactivate`` before that, if they were not told yet."""
        try:
            self.settle_due()
            self.host.set_active(active)
            self.host.apply_activation()
            if fail_pending and self.trees is not None and len(self.trees):
                self.host.settle(self.trees.fail_all())
        finally:
            self.host.close()
