"""The driver's side of a running topology: spouts, the acker ledger, timeouts, waves.

Each ``step()`` is one wave at the clock's current time:

1. rotate the timeout buckets that are due (expired trees fail with reason
   ``timeout``) and queue the tick tuples that are due;
2. call ``next_tuple`` on every spout task within its ``max.spout.pending`` budget;
3. record the new trees' inits in the ledger;
4. run the bolts as one Spark job (``wave.run_wave``);
5. merge the XOR-reduced acks of the tasks' reports into the ledger and call ``ack``/``fail`` on the
   exact spout task that emitted each settled tree.
"""

from __future__ import annotations

import copy
import logging
import time
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
from squall.reliability.anchoring import spout_edges
from squall.reliability.ids import IdGenerator, new_id
from squall.reliability.ledger import Outcome, PartitionedLedger
from squall.reliability.rotating_map import RotatingMap
from squall.spark.bolt_task import TaskPlan
from squall.spark.clock import Clock
from squall.spark.failures import stop_reason
from squall.spark.records import Out, Routes, check_emit, direct_target, tick_record
from squall.spark.shipping import pack, ship_topology
from squall.spark.stats import RunStats
from squall.spark.wave import checkpointed_state, initial_state, run_wave, state_of
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


class SpoutOutputCollector:
    def __init__(self, run: TopologyRun, component: str, task: int) -> None:
        self._run, self._component, self._task = run, component, task
        self._routes = Routes(run.topology, component, task)

    def emit(self, values, msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a spout tuple; with a ``msg_id`` it is tracked and acked or failed later."""
        run = self._run
        values = check_emit(run.topology, self._component, stream, values)
        targets = self._routes.targets(stream, values)
        return run._spout_emit(self._component, self._task, stream, values, msg_id, targets)

    def emit_direct(self, task: int, values, msg_id: Any = None, stream: str = DEFAULT_STREAM) -> None:
        run = self._run
        values = check_emit(run.topology, self._component, stream, values)
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
        self._task_index = {t: i for c in topology.components.values() for i, t in enumerate(c.tasks)}
        self._ticks = self._tick_schedule()
        self._records: dict[str, dict[int, list[tuple]]] = defaultdict(lambda: defaultdict(list))
        self._inits: list[tuple[int, int, int]] = []
        self._immediate_acks: list[tuple[int, Any]] = []
        self._pending_per_task: dict[int, int] = defaultdict(int)
        self._spout_emits = 0
        self.failure: TopologyFailed | None = None  # set when a failure no retry can fix stopped the topology
        self._failed_in_a_row = 0
        self._warned_unpicklable: set[str] = set()
        self._broadcast = ship_topology(sc, topology, self.conf, list(topology.bolts))  # spouts stay here
        self._state = {b: initial_state(sc, spec.parallelism) for b, spec in topology.bolts.items()}
        self._outputs: dict = {}  # each bolt's latest wave output, persisted: it holds the state
        self._since_checkpoint: dict[str, int] = defaultdict(int)
        self._lineage: list[tuple[Any, set[str]]] = []  # input broadcasts that state lineage still needs
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
        for (bolt, target), edge_ids in zip(targets, edges, strict=True):
            record = (values, component, task, stream, edge_ids)
            self._records[bolt][self._task_index[target]].append((Out.EMIT, bolt, record))
        if self.capture and stream == DEFAULT_STREAM:
            self.captured[component].append(values)
        return [t for _, t in targets]

    def _call_spouts(self) -> None:
        batch = self.conf[cfg.SQUALL_WAVE_SPOUT_BATCH]
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
                for index in range(len(self.topology.task_ids(bolt))):
                    self._records[bolt][index].append((Out.EMIT, bolt, tick_record(freq)))
                due += freq
            schedule[1] = due

    # -- one wave ------------------------------------------------------------
    def step(self) -> WaveInfo:
        """One wave; raises ``TopologyFailed`` once a failure no retry can fix has stopped the topology."""
        if self.failure is not None:
            raise self.failure
        now = self.clock.now()
        with simulated_time(now if self.clock.simulated else None):
            return self._step(now)

    def _step(self, now: float) -> WaveInfo:
        self._fire_timers(now)
        self._spout_emits = 0
        self._call_spouts()
        emits = self._spout_emits
        if self._inits:
            roots, values, tasks = (np.array(c, dtype=np.uint64) for c in zip(*self._inits, strict=True))
            self._inits = []
            self._dispatch(self.ledger.merge(roots, values, init_tasks=tasks.astype(np.int64)))
        records, self._records = self._records, defaultdict(lambda: defaultdict(list))
        delivered = sum(len(r) for per_task in records.values() for r in per_task.values())
        if delivered:
            self._run_bolts(records)
            if self.failure is not None:
                raise self.failure
        self.stats.pending = len(self.pending)
        if emits or self.stats.pending:
            self.last_activity = self.clock.now()
        return WaveInfo(emits, delivered)

    def idle_for(self) -> float:
        """Seconds since a spout last emitted or a tree was pending (ticks do not count)."""
        return 0.0 if len(self.pending) else self.clock.now() - self.last_activity

    def _run_bolts(self, records: dict[str, dict[int, list[tuple]]]) -> None:
        self.wave += 1
        simulated_now = self.clock.now() if self.clock.simulated else None
        plan = TaskPlan(self.run_id, self.wave, self._seed, self.acking, self.capture, simulated_now)
        # One pickle per task: a task unpickles only its own tuples, and values of shipped classes travel too.
        inputs = self.sc.broadcast(
            {
                bolt: {index: pack(payloads) for index, payloads in per_task.items()}
                for bolt, per_task in records.items()
            }
        )
        started = time.monotonic()
        try:
            result = run_wave(
                self.sc,
                self.topology,
                self.run_id,
                self._broadcast,
                inputs,
                set(records),
                plan,
                self._state,
            )
        except Exception as exc:
            # The wave's state changes are discarded; its trees time out and replay.
            inputs.destroy()
            self._wave_failed(exc)
            return
        self._failed_in_a_row = 0
        self.stats.waves += 1
        log.debug("wave %d ran in %.3fs", self.wave, time.monotonic() - started)
        self._keep_state(result.outputs, inputs)
        for (component, _task), status in result.status.items():
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
        for (component, _task), values in sorted(result.captured.items()):
            self.captured[component].extend(values)
        if self.acking and len(result.acks):
            for partition, acks in enumerate(result.acks.by_partition(self.num_ackers)):
                for root in acks.roots[acks.reset].tolist():
                    entry = self.pending.get(root)
                    if entry is not None:
                        self.pending.put(root, entry)
                if len(acks):
                    self._dispatch(
                        self.ledger.partitions[partition].merge(acks.roots, acks.xors, None, acks.failed, acks.reset)
                    )

    def _wave_failed(self, exc: Exception) -> None:
        """A wave whose job failed: replayed through timeouts, unless no retry can fix it."""
        self.stats.failed_waves += 1
        self._failed_in_a_row += 1
        why = stop_reason(exc, self._failed_in_a_row, self.conf[cfg.SQUALL_WAVE_MAX_FAILURES], "waves")
        if why is None:
            log.exception("wave %d of topology %s failed; its tuples will time out and replay", self.wave, self.name)
            return
        self.failure = TopologyFailed(f"topology {self.name!r} stopped: {why}")
        log.error("%s", self.failure)

    def _keep_state(self, outputs: dict, inputs: Any) -> None:
        """Adopt the wave's outputs as the bolts' state; checkpoint those that are due."""
        interval = self.conf[cfg.SQUALL_STATE_CHECKPOINT_INTERVAL]
        self._lineage.append((inputs, set(outputs)))
        for bolt, out in outputs.items():
            previous = self._outputs.get(bolt)
            self._outputs[bolt] = out
            self._since_checkpoint[bolt] += 1
            if self._since_checkpoint[bolt] >= interval:
                replaced, self._state[bolt] = self._state[bolt], checkpointed_state(out)
                replaced.unpersist(blocking=False)  # a previous checkpoint's cache, if any
                self._since_checkpoint[bolt] = 0
                for _, needed_by in self._lineage:
                    needed_by.discard(bolt)
            else:
                self._state[bolt] = state_of(out)
            if previous is not None:
                previous.unpersist(blocking=False)
        for bc, needed_by in self._lineage:
            if not needed_by:
                bc.destroy()
        self._lineage = [(bc, needed_by) for bc, needed_by in self._lineage if needed_by]

    def close(self) -> None:
        for s in self.spouts:
            try:
                s.spout.close()
            except Exception:
                log.exception("spout %s task %d raised in close()", s.component, s.task)
        for rdd in [*self._state.values(), *self._outputs.values()]:
            rdd.unpersist(blocking=False)
        for bc, _ in self._lineage:
            bc.destroy()
        self._broadcast.destroy()
