"""The driver's side of a running topology: spouts, the acker ledger, timeouts, waves.

Each ``step()`` sends at most one wave, at the clock's current time:

1. rotate the timeout buckets that are due (expired trees fail with reason
   ``timeout``) and queue the tick tuples that are due;
2. call ``next_tuple`` on every spout task within its ``max.spout.pending`` budget
   and the wave's size (``sizing.WaveSizer``);
3. record the new trees' inits in the ledger;
4. send the wave to the workers (``scheduler.WaveScheduler``), while up to
   ``squall.wave.max.inflight`` earlier waves are still running;
5. for each wave that completed, merge the XOR-reduced acks of its task reports
   into the ledger and call ``ack``/``fail`` on the exact spout task that emitted
   each settled tree.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark import SparkContext

from squall.model import config as cfg
from squall.model.components import DEFAULT_STREAM
from squall.model.errors import TopologyFailed
from squall.model.topology import Topology, TopologyContext
from squall.model.tuple import TICK_COMPONENT, TICK_STREAM
from squall.reliability.anchoring import spout_edges
from squall.reliability.ids import IdGenerator, new_id
from squall.reliability.ledger import Outcome, PartitionedLedger
from squall.reliability.rotating_map import RotatingMap
from squall.spark.clock import Clock
from squall.spark.protocol import DRIVER, Batch, RunSettings
from squall.spark.records import EmitChecker, Routes, direct_target
from squall.spark.scheduler import CompletedWave, WaveScheduler, worker_count
from squall.spark.shipping import ship_topology
from squall.spark.sizing import WaveSizer
from squall.spark.stats import RunStats
from squall.time import simulated_time

log = logging.getLogger("squall")


@dataclass
class PendingTuple:
    spout_task: int
    msg_id: Any
    emitted_at: float


@dataclass
class WaveInfo:
    spout_emits: int
    delivered: int  # tuples handed to bolts by the driver (spout emits and ticks)
    completed: int = 0  # waves that completed, their acks applied

    @property
    def idle(self) -> bool:
        """Nothing was sent and nothing completed: the topology has nothing to do until time passes."""
        return not self.delivered and not self.completed


class SpoutOutputCollector:
    def __init__(self, run: TopologyRun, component: str, task: int) -> None:
        self._run, self._component, self._task = run, component, task
        self._routes = Routes(run.topology, component, task)
        self._check = EmitChecker(run.topology, component)

    def emit(self, values, msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a spout tuple; with a ``msg_id`` it is tracked and acked or failed later."""
        run = self._run
        values = self._check(stream, values)
        targets = self._routes.targets(stream, values)
        return run._spout_emit(self._component, self._task, stream, values, msg_id, targets)

    def emit_direct(self, task: int, values, msg_id: Any = None, stream: str = DEFAULT_STREAM) -> None:
        run = self._run
        values = self._check(stream, values)
        bolt = direct_target(run.topology, self._component, stream, task)
        run._spout_emit(self._component, self._task, stream, values, msg_id, [(bolt, task)])

    def report_error(self, error: BaseException) -> None:
        log.error("spout %s task %d reported an error", self._component, self._task, exc_info=error)

    def report_malformed(self, what: str) -> None:
        """A message the spout set aside instead of emitting: counted in the run's stats and logged."""
        self._run.stats.of(self._component).malformed += 1
        log.error("spout %s task %d: malformed message set aside: %s", self._component, self._task, what)


class SpoutTask:
    def __init__(self, run: TopologyRun, component: str, task: int) -> None:
        self.component, self.task = component, task
        spec = run.topology.components[component]
        self.spout = copy.deepcopy(spec.obj)
        self.context = TopologyContext(run.topology, component, task)
        self.collector = SpoutOutputCollector(run, component, task)
        self.spout.open({**run.conf, **spec.conf}, self.context, self.collector)


class TopologyRun:
    def __init__(
        self, name: str, topology: Topology, conf: dict, sc: SparkContext, clock: Clock, capture: bool = False
    ) -> None:
        self.name = name
        self.topology = topology
        self.conf = cfg.resolve_config(topology.conf, conf)
        self.sc = sc
        self.clock = clock
        self.capture = capture
        self.run_id = f"{name}-{uuid.uuid4().hex[:12]}"
        self.stats = RunStats()
        self.captured: dict[str, list[tuple]] = defaultdict(list)
        self.num_ackers: int = self.conf[cfg.TOPOLOGY_ACKER_EXECUTORS]
        self.acking = self.num_ackers > 0
        self.ledger = PartitionedLedger(self.num_ackers) if self.acking else None
        self.pending: RotatingMap[int, PendingTuple] = RotatingMap(2)
        self.max_pending: int | None = self.conf[cfg.TOPOLOGY_MAX_SPOUT_PENDING]
        self.timeout: float = self.conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
        self.timeouts = self.conf[cfg.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS]
        self.started_at = clock.now()
        self.last_activity = self.started_at
        self.next_rotation = self.started_at + self.timeout
        self.wave = 0
        self._seed = IdGenerator().next_id()
        self._ticks = self._tick_schedule()
        self._outgoing: dict[int, dict[tuple[str, int], Batch]] = defaultdict(dict)  # task -> the next wave's
        self._inits: list[tuple[int, int, int]] = []
        self._immediate_acks: list[tuple[int, Any]] = []
        self._pending_per_task: dict[int, int] = defaultdict(int)
        self._spout_emits = 0
        self.failure: TopologyFailed | None = None  # set when a failure no retry can fix stopped the topology
        self._warned_unpicklable: set[str] = set()
        self.max_inflight: int = self.conf[cfg.SQUALL_WAVE_MAX_INFLIGHT]
        self.sizer = WaveSizer(self.conf[cfg.SQUALL_WAVE_TARGET_MS] / 1000.0, self.conf[cfg.SQUALL_WAVE_SPOUT_BATCH])
        self._broadcast = ship_topology(sc, topology, self.conf, list(topology.bolts))  # spouts stay here
        self.scheduler = WaveScheduler(
            sc,
            topology,
            RunSettings(self.run_id, self._seed, self.acking, capture),
            self._broadcast,
            worker_count(sc, topology, self.conf[cfg.SQUALL_WORKERS]),
            self.conf[cfg.SQUALL_WAVE_MAX_FAILURES],
            name,
            self.conf[cfg.SQUALL_STATE_CHECKPOINT_INTERVAL],
        )
        self.spouts = [SpoutTask(self, cid, t) for cid, spec in topology.spouts.items() for t in spec.tasks]
        self._spout_by_task = {s.task: s for s in self.spouts}

    # -- emitting from spouts ------------------------------------------------
    def _spout_emit(self, component, task, stream, values, msg_id, targets) -> list[int]:
        self._spout_emits += 1
        self.stats.of(component).emitted += 1
        if msg_id is not None and self.acking and targets:
            root = new_id()
            init_value, edges = spout_edges(root, len(targets))
            self._inits.append((root, init_value, task))
            self.pending.put(root, PendingTuple(task, msg_id, self.clock.now()))
            self._pending_per_task[task] += 1
        else:
            edges = [{} for _ in targets]
            if msg_id is not None:  # ackers off, or nobody listens: the tree is complete at once
                self._immediate_acks.append((task, msg_id))
        for (_, target), edge_ids in zip(targets, edges, strict=True):
            self._batch_for(target, component, task).add_in_trees(stream, values, edge_ids)
        if self.capture and stream == DEFAULT_STREAM:
            self.captured[component].append(values)
        return [t for _, t in targets]

    def _batch_for(self, target: int, component: str, source: int) -> Batch:
        per_source = self._outgoing[target]
        batch = per_source.get((component, source))
        if batch is None:
            batch = per_source[(component, source)] = Batch(0, 0, DRIVER, component, source, target)
        return batch

    def _call_spouts(self) -> None:
        batch = self.sizer.calls_per_spout_task()
        for s in self.spouts:
            for _ in range(batch):
                if self.max_pending is not None and self._pending_per_task[s.task] >= self.max_pending:
                    break
                before = self._spout_emits
                try:
                    s.spout.next_tuple()
                except Exception:
                    self.stats.of(s.component).errors += 1
                    log.exception("spout %s task %d raised in next_tuple", s.component, s.task)
                    break
                if self._spout_emits == before:
                    break
        acks, self._immediate_acks = self._immediate_acks, []
        for task, msg_id in acks:
            spout = self._spout_by_task[task]
            self.stats.of(spout.component).acked += 1
            self._call(spout, "ack", msg_id)

    # -- settling trees ------------------------------------------------------
    def _call(self, spout: SpoutTask, method: str, msg_id: Any) -> None:
        try:
            getattr(spout.spout, method)(msg_id)
        except Exception:
            self.stats.of(spout.component).errors += 1
            log.exception("spout %s task %d raised in %s(%r)", spout.component, spout.task, method, msg_id)

    def _settle(self, root: int, acked: bool, timed_out: bool = False) -> None:
        entry = self.pending.remove(root)
        if entry is not None:  # else already settled
            self._finish(entry, acked, timed_out)

    def _finish(self, entry: PendingTuple, acked: bool, timed_out: bool) -> None:
        self._pending_per_task[entry.spout_task] -= 1
        spout = self._spout_by_task[entry.spout_task]
        stats = self.stats.of(spout.component)
        if acked:
            stats.acked += 1
            stats.record_latency(self.clock.now() - entry.emitted_at)
            self._call(spout, "ack", entry.msg_id)
        else:
            stats.failed += 1
            stats.timed_out += timed_out
            self._call(spout, "fail", entry.msg_id)

    def _dispatch(self, outcome: Outcome) -> None:
        for _, root in outcome.completed.pairs():
            self._settle(root, acked=True)
        for _, root in outcome.failed.pairs():
            self._settle(root, acked=False)

    # -- timers --------------------------------------------------------------
    def _tick_schedule(self) -> dict[str, list[float]]:
        ticks = {}
        for bolt, spec in self.topology.bolts.items():
            freq = spec.conf.get(cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS, self.conf[cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS])
            if freq:
                ticks[bolt] = [float(freq), self.started_at + float(freq)]
        return ticks

    def next_timer(self) -> float | None:
        """When the next rotation or tick is due, if any."""
        times = [due for _, due in self._ticks.values()]
        if self.timeouts and self.acking:
            times.append(self.next_rotation)
        return min(times) if times else None

    def _fire_timers(self, now: float) -> None:
        while self.timeouts and self.acking and now >= self.next_rotation:
            for _, root in self.ledger.rotate().pairs():
                self._settle(root, acked=False, timed_out=True)
            for entry in self.pending.rotate().values():  # trees the acker lost track of
                self._finish(entry, acked=False, timed_out=True)
            self.next_rotation += self.timeout
        for bolt, schedule in self._ticks.items():
            freq, due = schedule
            while now >= due:
                for task in self.topology.task_ids(bolt):
                    self._batch_for(task, TICK_COMPONENT, -1).add(TICK_STREAM, (freq,))
                due += freq
            schedule[1] = due

    # -- one wave ------------------------------------------------------------
    def step(self) -> WaveInfo:
        """One wave; raises ``TopologyFailed`` once a failure no retry can fix has stopped the topology."""
        if self.failure is None:
            self.failure = self.scheduler.failure
        if self.failure is not None:
            raise self.failure
        now = self.clock.now()
        with simulated_time(now if self.clock.simulated else None):
            try:
                return self._step(now)
            except TopologyFailed as failure:
                self.failure = failure
                self.stats.restarts = self.scheduler.recoveries
                raise

    def _step(self, now: float) -> WaveInfo:
        self._fire_timers(now)
        completed = self._apply(self.scheduler.poll(wait_for=self.max_inflight))
        self._spout_emits = 0
        self._call_spouts()
        emits = self._spout_emits
        if self._inits:
            roots, values, tasks = (np.array(c, dtype=np.uint64) for c in zip(*self._inits, strict=True))
            self._inits = []
            self._dispatch(self.ledger.merge(roots, values, init_tasks=tasks.astype(np.int64)))
        outgoing, self._outgoing = self._outgoing, defaultdict(dict)
        inputs = {task: list(per_source.values()) for task, per_source in outgoing.items()}
        delivered = sum(len(b.values) for batches in inputs.values() for b in batches)
        if delivered:
            self.wave = self.scheduler.send(inputs, self.clock.now() if self.clock.simulated else None)
            self.sizer.sent(self.wave, emits)
        # With a wave just sent, wait only for room; with nothing to send, wait for every wave in flight.
        completed += self._apply(self.scheduler.poll(wait_for=self.max_inflight - 1 if delivered else 0))
        self.stats.pending = len(self.pending)
        self.stats.restarts = self.scheduler.recoveries
        if emits or self.stats.pending:
            self.last_activity = self.clock.now()
        return WaveInfo(emits, delivered, completed)

    def idle_for(self) -> float:
        """Seconds since a spout last emitted or a tree was pending (ticks do not count)."""
        return 0.0 if len(self.pending) else self.clock.now() - self.last_activity

    def _apply(self, waves: list[CompletedWave]) -> int:
        """Fold in completed waves, in wave order: counters, errors, captured emits, then acks."""
        for wave in waves:
            self.stats.waves += 1
            self.sizer.completed(wave.wave, wave.seconds)
            for (component, _task), status in wave.status.items():
                self.stats.of(component).add(status)
                if status.unpicklable and component not in self._warned_unpicklable:
                    self._warned_unpicklable.add(component)
                    log.warning(
                        "bolt %s: attributes %s cannot be pickled; they are left out of its task snapshots and"
                        " made again by prepare() wherever a task is rebuilt",
                        component,
                        status.unpicklable,
                    )
                for text in status.errors:
                    log.error("bolt error in topology %s: %s", self.name, text)
            for (component, _task), values in sorted(wave.captured.items()):
                self.captured[component].extend(values)
            if self.acking and len(wave.acks):
                self._merge_acks(wave)
        return len(waves)

    def _merge_acks(self, wave: CompletedWave) -> None:
        for partition, acks in enumerate(wave.acks.by_partition(self.num_ackers)):
            for root in acks.roots[acks.reset].tolist():
                entry = self.pending.get(root)
                if entry is not None:
                    self.pending.put(root, entry)
            if len(acks):
                self._dispatch(
                    self.ledger.partitions[partition].merge(acks.roots, acks.xors, None, acks.failed, acks.reset)
                )

    def close(self) -> None:
        for s in self.spouts:
            try:
                s.spout.close()
            except Exception:
                log.exception("spout %s task %d raised in close()", s.component, s.task)
        self.scheduler.close()
        self._broadcast.destroy()
