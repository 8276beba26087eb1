"""The driver's side of a running topology: one ``step()`` after another, each sending at most one wave.

A ``TopologyRun`` puts together the parts that each do one job:

* ``spouts.SpoutHost``: the spout tasks, and the driver's tuples for the next wave (under ``TestCluster``;
  under ``LocalCluster`` the spout and acker tasks run on the workers, and a step only starts a wave there);
* ``trees.PendingTrees``: pending tuple trees, the acker ledger and timeouts (the same, where the spouts run);
* ``scheduler.WaveScheduler``: the worker tasks, waves in flight, recovery and snapshots;
* ``sizing.WaveSizer``: how many spout calls make a wave.

Each ``step()``, at the clock's current time:

1. rotate the timeout buckets that are due (expired trees fail with reason
   ``timeout``) and note the ticks that are due (their tasks' workers make the tuples);
2. call ``next_tuple`` on every spout task within its ``max.spout.pending``
   budget and the wave's size;
3. record the new trees' inits in the ledger;
4. send the wave to the workers, while up to ``squall.wave.max.inflight``
   earlier waves are still running;
5. for each wave that completed, merge the XOR-reduced acks of its task reports
   into the ledger and call ``ack``/``fail`` on the exact spout task that emitted
   each settled tree.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass

from pyspark import SparkContext

from squall.model import config as cfg
from squall.model.components import StatefulBolt
from squall.model.errors import InvalidConfigError, TopologyFailed
from squall.model.topology import Topology
from squall.reliability.ids import IdGenerator
from squall.security.keys import run_keys
from squall.spark.clock import Clock
from squall.spark.protocol import RunSettings, SpoutStatus, TicksDue
from squall.spark.run import TOPOLOGY
from squall.spark.scheduler import CompletedWave, WaveScheduler, worker_count
from squall.spark.shipping import ship_topology
from squall.spark.sizing import WaveSizer
from squall.spark.snapshots import SnapshotTimer
from squall.spark.spouts import DriverOutbox, SpoutHost
from squall.spark.stateful import StateCheckpoints
from squall.spark.stats import RunStats, decode_latencies
from squall.spark.trees import PendingTrees
from squall.state.providers import open_state_provider
from squall.time import simulated_time

log = logging.getLogger("squall")

ACKER = "__acker"  # Storm's name for the acker component


@dataclass
class WaveInfo:
    spout_emits: int
    delivered: int  # tuples the wave hands bolts: in-process spouts' emits, and ticks
    completed: int = 0  # waves that completed, their acks applied

    @property
    def idle(self) -> bool:
        """Nothing was sent and nothing completed: the topology has nothing to do until time passes."""
        return not self.delivered and not self.completed


class TopologyRun:
    kind = TOPOLOGY  # the Run protocol (``run.py``)

    def __init__(
        self,
        name: str,
        topology: Topology,
        conf: dict,
        sc: SparkContext,
        clock: Clock,
        capture: bool = False,
        spouts_on_workers: bool = False,
    ) -> None:
        self.name = name
        self.topology = topology
        self.conf = cfg.resolve_config(topology.conf, conf)
        self.sc = sc
        self.clock = clock
        self.capture = capture
        self.run_id = f"{name}-{uuid.uuid4().hex[:12]}"
        self.conf[cfg.TOPOLOGY_NAME], self.conf[cfg.SQUALL_RUN_ID] = name, self.run_id
        self.stats = RunStats()
        self.captured: dict[str, list[tuple]] = defaultdict(list)
        self.spouts_on_workers = spouts_on_workers and bool(topology.bolts)
        workers = worker_count(sc, topology, self.conf[cfg.SQUALL_WORKERS], self.spouts_on_workers)
        declared = self.conf[cfg.TOPOLOGY_ACKER_EXECUTORS]
        # Storm's default: one acker task per worker (one in the test's process under TestCluster).
        self.num_ackers: int = declared if declared is not None else (workers if self.spouts_on_workers else 1)
        self.acking = self.num_ackers > 0
        last_task = max((t for spec in topology.components.values() for t in spec.tasks), default=0)
        # The acker tasks, numbered after the topology's own, as Storm numbers its __acker tasks.
        self.acker_task_ids = [last_task + 1 + a for a in range(self.num_ackers)] if self.spouts_on_workers else []
        self.trees = PendingTrees(self.num_ackers) if self.acking and not self.spouts_on_workers else None
        self.outbox = DriverOutbox()  # the spouts' emits for the next wave, when they run in this process
        self._settled_seen = 0  # trees acked or failed on the spouts' workers, as their reports said
        self._rotations_due = 0  # timeout rotations for the spouts' workers to apply, with the next wave
        self._wanted_active = True
        self._fail_back = False
        self.timeout: float = self.conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
        self.timeouts = self.conf[cfg.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS]
        self.started_at = clock.now()
        self._idle_since: float | None = None  # set, on the run's thread, when a step ends idle
        self.next_rotation = self.started_at + self.timeout
        self.wave = 0
        self._seed = IdGenerator().next_id()
        self._ticks = self._tick_schedule()
        self._ticks_due: list[TicksDue] = []  # fired, for the next wave
        self.failure: TopologyFailed | None = None  # set when a failure no retry can fix stopped the topology
        self._repeated: str | None = None  # why a task's run of one repeated error stops the topology
        self._errors_seen = 0  # the errors counted as of the last step: a step that adds any is not idle
        self._generation_seen = 0  # the workers' generation as of the last step: a restart is not idle
        self._warned_unpicklable: set[str] = set()
        self.max_inflight: int = self.conf[cfg.SQUALL_WAVE_MAX_INFLIGHT]
        self.sizer = WaveSizer(
            self.conf[cfg.SQUALL_WAVE_TARGET_MS] / 1000.0,
            self.conf[cfg.SQUALL_WAVE_SPOUT_BATCH],
            inbox_max_bytes=self.conf[cfg.SQUALL_WORKER_INBOX_MAX_BYTES],
        )
        # Refused here when squall's settings would leave in clear what Spark's own settings protect.
        self.keys = run_keys(self.conf, dict(sc.getConf().getAll()))
        self.state_checkpoints = self._state_checkpoints()
        # Restored before any worker starts: a checkpoint that cannot be used stops the submit, holding no core.
        restored = self.state_checkpoints.restore() if self.state_checkpoints is not None else {}
        shipped = list(topology.components) if self.spouts_on_workers else list(topology.bolts)
        self._broadcast = ship_topology(sc, topology, self.conf, shipped)
        where = self.conf[cfg.SQUALL_CHECKPOINT_DIR]
        snapshot_root = os.fspath(where) if self.spouts_on_workers and where is not None else None
        # With the spouts on the workers, stateful tasks write their own checkpoint parts; the driver commits them.
        workers_write = self.spouts_on_workers and self.state_checkpoints is not None
        settings = RunSettings(
            self.run_id,
            self._seed,
            self.acking,
            capture,
            self.num_ackers,
            self.spouts_on_workers,
            snapshot_root,
            self.state_checkpoints.provider.spec() if workers_write else None,
            self.spouts_on_workers and not self.conf[cfg.TOPOLOGY_DISABLE_LOADAWARE_MESSAGING],
        )
        pending = self.conf[cfg.TOPOLOGY_MAX_SPOUT_PENDING]
        self.snapshot_timer = SnapshotTimer(
            self.conf[cfg.SQUALL_SNAPSHOT_INTERVAL_MS] / 1000.0,
            self.started_at,
            max(1, pending // 2) if pending is not None else None,
        )
        self.scheduler = WaveScheduler(
            sc,
            topology,
            settings,
            self._broadcast,
            workers,
            self.conf[cfg.SQUALL_WAVE_MAX_FAILURES],
            name,
            self.conf[cfg.SQUALL_STATE_CHECKPOINT_INTERVAL],
            self.state_checkpoints.tasks if self.state_checkpoints is not None else frozenset(),
            restored,
            self.conf[cfg.SQUALL_WORKER_REPLACE_TIMEOUT_SECS],
            keys=self.keys,
            handshake_timeout=self.conf[cfg.SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS],
            max_proving=self.conf[cfg.SQUALL_LINKS_MAX_CONNECTIONS],
        )
        self.spout_host = SpoutHost(
            topology,
            self.conf,
            self.stats,
            self.trees,
            clock,
            self.conf[cfg.TOPOLOGY_MAX_SPOUT_PENDING],
            self.captured if capture else None,
            tasks=[] if self.spouts_on_workers else None,
            outbox=self.outbox,
        )
        self.scheduler.on_setup_error = self.stats.setup_failed

    @property
    def spouts(self):
        """The spout tasks in this process (none when they run on the workers)."""
        return self.spout_host.tasks

    @property
    def ledger(self):
        return self.trees.ledger if self.trees is not None else None

    @property
    def pending(self):
        """Pending trees in this process (``len``, and ``get(root)``: its spout task, message id and emit time)."""
        return self.trees if self.trees is not None else {}

    @property
    def pending_count(self) -> int:
        """Trees pending, wherever their spout tasks run."""
        return self.stats.pending if self.spouts_on_workers else len(self.pending)

    @property
    def wanted_active(self) -> bool:
        """What ``set_active`` asked last."""
        return self._wanted_active

    def set_active(self, active: bool) -> None:
        """Storm's ``activate``/``deactivate``: start or stop asking the spouts for tuples. Each spout task is
        told on the thread that makes its calls, before its next one."""
        self._wanted_active = active
        self.spout_host.set_active(active)

    def _state_checkpoints(self) -> StateCheckpoints | None:
        stateful = [c for c, spec in self.topology.bolts.items() if isinstance(spec.obj, StatefulBolt)]
        if not stateful:
            return None
        where = self.conf[cfg.SQUALL_CHECKPOINT_DIR]
        if where is None:
            raise InvalidConfigError(f"topology {self.name!r} has stateful bolts {stateful}: set squall.checkpoint.dir")
        try:
            provider = open_state_provider(
                self.conf[cfg.TOPOLOGY_STATE_PROVIDER],
                os.fspath(where),
                self.name,
                self.keys.sealer(),
                self.conf[cfg.SQUALL_REDIS_URL],
            )
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from exc
        interval = self.conf[cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS] / 1000.0
        return StateCheckpoints(self.topology, stateful, provider, interval, self.clock.now(), self.spouts_on_workers)

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
        if self.state_checkpoints is not None and self.state_checkpoints.waiting:
            times.append(self.state_checkpoints.next_due)
        return min(times) if times else None

    def _fire_timers(self, now: float) -> None:
        while self.timeouts and self.acking and now >= self.next_rotation:
            if self.trees is not None:
                self.spout_host.settle(self.trees.rotate())
            else:  # the ackers and spout tasks are on the workers: they rotate with the next wave
                self._rotations_due += 1
            self.next_rotation += self.timeout
        for bolt, schedule in self._ticks.items():
            freq, due = schedule
            fired = 0
            while now >= due:
                fired, due = fired + 1, due + freq
            schedule[1] = due
            if fired:  # the tasks' workers make the tick tuples: the driver sends when, not tuples
                self._ticks_due.extend(TicksDue(task, freq, fired) for task in self.topology.task_ids(bolt))

    def _take_ticks(self) -> tuple[TicksDue, ...]:
        ticks, self._ticks_due = tuple(self._ticks_due), []
        return ticks

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
        if self.spouts_on_workers:
            return self._step_on_workers(now)
        self._fire_timers(now)
        completed = self._apply(self.scheduler.poll(wait_for=self.max_inflight))
        calls = self.sizer.calls_per_spout_task()
        emits = self.spout_host.call(calls)
        inputs, ticks = self.spout_host.take_wave(), self._take_ticks()
        delivered = sum(len(b.values) for batches in inputs.values() for b in batches) + sum(t.count for t in ticks)
        checkpoint = self.state_checkpoints.due(now) if self.state_checkpoints is not None else None
        if delivered or checkpoint is not None:
            simulated = self.clock.now() if self.clock.simulated else None
            self.wave = self.scheduler.send(inputs, simulated, checkpoint, ticks=ticks)
            self.sizer.sized(self.wave, calls)
            self.sizer.sent(self.wave, emits)
        # With a wave just sent, wait only for room; with nothing to send, wait for every wave in flight.
        completed += self._apply(self.scheduler.poll(wait_for=self.max_inflight - 1 if delivered else 0))
        self.stats.pending = len(self.pending)
        self.stats.restarts = self.scheduler.recoveries
        self._note_idle(bool(emits) or not self.spout_host.wanted_active)  # paused is not idle
        for repeated in self.spout_host.repeated.values():  # the spouts here: their runs of one error
            self._repeated = self._repeated or repeated
        self._stop_if_repeated()
        return WaveInfo(emits, delivered, completed)

    def _step_on_workers(self, now: float) -> WaveInfo:
        """A wave whose spout calls happen on the workers: every step sends one, as each may bring emits."""
        self._fire_timers(now)
        before, settled_before = self.stats.spout_emits_seen, self._settled_seen
        completed = self._apply(self.scheduler.poll(wait_for=self.max_inflight))
        self._abandon_dropped_checkpoints()
        ticks_due = self._take_ticks()
        ticks = sum(due.count for due in ticks_due)
        checkpoint = self.state_checkpoints.due(now) if self.state_checkpoints is not None else None
        calls = self.sizer.calls_per_spout_task() if self._wanted_active else 0
        rotations, self._rotations_due = self._rotations_due, 0
        simulated = self.clock.now() if self.clock.simulated else None
        snapshot = self.snapshot_timer.due(now) and self.scheduler.snapshot_due()
        self.wave = self.scheduler.send(  # the driver's input is control only: no tuple
            {}, simulated, checkpoint, calls, rotations, self._wanted_active, snapshot=snapshot, ticks=ticks_due
        )
        self.sizer.sized(self.wave, calls)
        if snapshot:
            self.snapshot_timer.sent(now, self.wave)
        completed += self._apply(self.scheduler.poll(wait_for=self.max_inflight - 1))
        for statuses in self.scheduler.take_stopped_spouts():
            self._apply_spout_statuses(statuses)
        emits = self.stats.spout_emits_seen - before
        self.stats.restarts = self.scheduler.recoveries
        self._note_idle(bool(emits) or not self._wanted_active)
        self._stop_if_repeated()
        # Idle when the waves that completed brought no emit and settled no tree, and no tick went out: the caller
        # may pause before the next one (spouts held back by topology.max.spout.pending wait for acks).
        moved = emits or ticks or self._settled_seen != settled_before
        if not moved:  # the caller may pause: the acks of the waves just completed are applied meanwhile
            self.scheduler.flush_commit()
        return WaveInfo(emits, emits + ticks, completed if moved else 0)

    def _abandon_dropped_checkpoints(self) -> None:
        """A checkpoint whose wave a worker loss dropped will not complete: the next one is due at once."""
        dropped, self.scheduler.dropped_checkpoints = self.scheduler.dropped_checkpoints, []
        if self.state_checkpoints is not None:
            for checkpoint in dropped:
                self.state_checkpoints.abandon(checkpoint)

    @property
    def state_waiting(self) -> bool:
        """Stateful bolts' changes or acks wait for a checkpoint."""
        return self.state_checkpoints is not None and self.state_checkpoints.waiting

    def _waiting_for_workers(self) -> bool:
        """The run has bolts but not all of its workers, or its workers' tasks are not all up yet (no wave has
        completed since they were last assigned): a driver waiting for cores (a lost one, or those a killed
        driver's executors still hold), or for tasks whose ``prepare()`` or ``open()`` may yet raise, is not idle."""
        return self.scheduler.hub is not None and not (self.scheduler.ready and self.scheduler.tasks_up)

    def _note_idle(self, busy: bool) -> None:
        """At the end of a step: when the run's idle time starts, or that it is not idle. A step that emitted,
        left trees pending, counted an error or found the workers restarted is not idle, and neither is a run
        waiting for its workers."""
        errors = sum(c.errors for c in list(self.stats.components.values()))
        generation = self.scheduler.generation
        busy = busy or errors != self._errors_seen or generation != self._generation_seen
        self._errors_seen, self._generation_seen = errors, generation
        if busy or self.pending_count or self._waiting_for_workers():
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = self.clock.now()

    def _stop_if_repeated(self) -> None:
        """A task's same error ``squall.max.repeated.errors`` times in a row with no progress stops the topology,
        as an uncaught exception kills a Storm worker; the failure's message has the error's traceback."""
        if self._repeated is not None:
            failure = TopologyFailed(f"topology {self.name!r} stopped: {self._repeated}")
            log.error("%s", failure)
            raise failure

    def not_started(self) -> str | None:
        """Why the run's tasks are not up, when a worker could not set one up and none has come up since."""
        if self.scheduler.hub is None or self.scheduler.tasks_up:
            return None
        return self.scheduler.setup_failure

    def idle_for(self) -> float:
        """Seconds since a step ended with no spout emit and no tree pending (ticks do not count); safe to call
        from any thread. A step that waited long (a worker being replaced) and then settled every tree starts
        the count when it ends, not when the step before it did."""
        since = self._idle_since
        if since is None or self.pending_count or not self._wanted_active or self._waiting_for_workers():
            return 0.0  # a deactivated topology is paused, not idle: it runs until activated or killed
        return self.clock.now() - since

    def _apply(self, waves: list[CompletedWave]) -> int:
        """Fold in completed waves, in wave order: counters, errors, captured emits, then acks."""
        for wave in waves:
            self.stats.waves += 1
            self.stats.wave_seconds += wave.seconds
            if self.spouts_on_workers:
                self.sizer.sent(wave.wave, wave.spout_emits)
                self._apply_spouts(wave)
            self.sizer.completed(wave.wave, wave.seconds, wave.inbox_peak_bytes)
            self.stats.inbox_peak_bytes = wave.inbox_peak_bytes
            self._space_snapshots(wave)
            for (component, task), status in wave.status.items():
                self.stats.of(component).add(status)
                self.stats.of_task(component, task).add(status)
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
                    self.stats.record_error(component, task, text)
                if status.repeated is not None and self._repeated is None:
                    self._repeated = status.repeated
            for (component, _task), values in sorted(wave.captured.items()):
                self.captured[component].extend(values)
            if self.trees is not None and len(wave.acks):
                self.spout_host.settle(self.trees.merge_acks(wave.acks))
            if self.state_checkpoints is not None:
                started = time.perf_counter()
                released = self.state_checkpoints.completed(
                    wave.checkpoint,
                    wave.state_deltas,
                    wave.held_acks,
                    self.scheduler.states,
                    wave.holds_acks,
                    wave.state_parts,
                    any(s.executed for (_, t), s in wave.status.items() if t in self.state_checkpoints.tasks),
                )
                self.stats.state_seconds += time.perf_counter() - started + wave.state_apply_seconds
                if released is not None and self.spouts_on_workers:
                    self.scheduler.release(wave.wave)  # the ackers on the workers apply the acks it held
                elif released is not None and self.trees is not None and len(released):
                    self.spout_host.settle(self.trees.merge_acks(released))
        return len(waves)

    def _space_snapshots(self, wave: CompletedWave) -> None:
        """After a snapshot wave: how long until the next (``snapshots.snapshot_spacing``)."""
        per_worker: dict[int, float] = {}
        for (_, task), status in wave.status.items():
            if status.snapshot_seconds:
                worker = self.scheduler.placement.get(task, 0)
                per_worker[worker] = per_worker.get(worker, 0.0) + status.snapshot_seconds
        self.snapshot_timer.written(per_worker)

    def _apply_spouts(self, wave: CompletedWave) -> None:
        """The spout tasks' counters, errors and complete latencies of a wave, from their workers."""
        self.stats.pending = wave.pending
        self.stats.spout_emits_seen += wave.spout_emits
        self.snapshot_timer.emitted(wave.wave, {task: status.emitted for task, (_, status) in wave.spouts.items()})
        self._apply_spout_statuses(wave.spouts)
        for acker, (merged, settled) in wave.ackers.items():  # Storm's __acker: executed acks, emitted settlements
            for stats in (self.stats.of(ACKER), self.stats.of_task(ACKER, self.acker_task_ids[acker])):
                stats.executed += merged
                stats.emitted += settled

    def _apply_spout_statuses(self, statuses: dict[int, tuple[str, SpoutStatus]]) -> None:
        for task, (component, status) in statuses.items():
            self._settled_seen += status.acked + status.failed
            latencies = decode_latencies(status.latencies) if status.latencies is not None else None
            for stats in (self.stats.of(component), self.stats.of_task(component, task)):
                stats.emitted += status.emitted
                stats.acked += status.acked
                stats.failed += status.failed
                stats.timed_out += status.timed_out
                stats.malformed += status.malformed
                stats.errors += len(status.errors)
                if latencies is not None:
                    stats.add_latencies(latencies)
            for text in status.errors:
                log.error("spout error in topology %s: %s", self.name, text)
                self.stats.record_error(component, task, text)
            if status.repeated is not None and self._repeated is None:
                self._repeated = status.repeated

    def fail_pending(self) -> int:
        """Fail every pending tree in this process back to its spout (``fail(msg_id)``), as a topology stopping
        cleanly does with what did not finish in time; returns how many. Spout tasks on the workers fail theirs
        as the run closes (``finish``)."""
        if self.trees is None:
            return 0
        settlement = self.trees.fail_all()
        self.spout_host.settle(settlement)
        self.stats.pending = len(self.pending)
        return len(settlement)

    def interrupt(self) -> None:
        """From any thread: a step blocked waiting for workers returns at once, and so will every later one."""
        self.scheduler.interrupt()

    def finish(self, fail_pending: bool) -> None:
        """On the run's own thread, as it stops: fail what is still pending back to the spouts (when asked, and
        the run did not fail), then ``close`` the spouts."""
        self._fail_back = fail_pending and self.failure is None  # for the spout tasks on the workers
        try:
            self.spout_host.apply_activation()  # a kill with a wait deactivated the spouts
            if fail_pending and self.failure is None:
                failed = self.fail_pending()
                if failed:
                    log.info("topology %s: %d tree(s) still pending at the kill failed back", self.name, failed)
        finally:
            self.spout_host.close()

    def close(self) -> None:
        self.spout_host.close()  # if finish() did not
        self.scheduler.close(fail_pending=self._fail_back, active=self._wanted_active)
        self._apply_spout_statuses(self.scheduler.final_spouts)
        self._broadcast.destroy()
