"""The driver's side of a running topology: one ``step()`` after another, each sending at most one wave.

A ``TopologyRun`` puts together the parts that each do one job:

* ``scheduler.WaveScheduler``: the workers, which host every task (spouts, bolts and ackers), the waves in
  flight, recovery and snapshots;
* ``sizing.WaveSizer``: how many spout calls make a wave;
* ``stateful.StateCheckpoints``: stateful bolts' checkpoints.

The driver sends no tuple and receives no ack. Each ``step()``, at the clock's current time:

1. note the timeout rotations and the ticks that are due (the workers rotate their ackers' buckets and make
   the tick tuples);
2. send the wave to the workers (its spout calls, rotations, ticks, and the ``Commit`` of the last wave
   completed), while up to ``squall.wave.max.inflight`` earlier waves are still running;
3. for each wave that completed, fold in its reports: counters, errors, latencies, snapshots. The acker
   tasks apply the bolts' acks as they arrive, and call ``ack``/``fail`` on the spout tasks.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import defaultdict

from pyspark import SparkContext

from squall.model import config as cfg
from squall.model.components import StatefulBolt
from squall.model.errors import InvalidConfigError, TopologyFailed
from squall.model.topology import Topology
from squall.reliability.ids import IdGenerator
from squall.security.keys import run_keys
from squall.spark.clock import Clock
from squall.spark.protocol import RunSettings, SpoutStatus, TicksDue
from squall.spark.run import TOPOLOGY, WaveInfo
from squall.spark.scheduler import CompletedWave, WaveScheduler, worker_count
from squall.spark.shipping import ship_topology, shipped_here
from squall.spark.sizing import WaveSizer
from squall.spark.snapshots import SnapshotTimer
from squall.spark.stateful import StateCheckpoints
from squall.spark.stats import RunStats, decode_latencies
from squall.state.providers import open_state_provider
from squall.time import simulated_time

log = logging.getLogger("squall")

ACKER = "__acker"  # Storm's name for the acker component


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
        spouts_here: bool = False,
    ) -> None:
        """``spouts_here``: the spout and acker tasks run on a worker in this process (``TestCluster``), else
        on the Spark job's workers."""
        self.name = name
        self.topology = topology
        self.conf = cfg.resolve_config(topology.conf, conf)
        topology.check_run_config(self.conf)
        self.sc = sc
        self.clock = clock
        self.capture = capture
        self.run_id = f"{name}-{uuid.uuid4().hex[:12]}"
        self.conf[cfg.TOPOLOGY_NAME], self.conf[cfg.SQUALL_RUN_ID] = name, self.run_id
        self.stats = RunStats()
        self.captured: dict[str, list[tuple]] = defaultdict(list)
        workers = worker_count(sc, topology, self.conf[cfg.SQUALL_WORKERS], hosts_spouts=not spouts_here)
        declared = self.conf[cfg.TOPOLOGY_ACKER_EXECUTORS]
        # Storm's default: one acker task per worker (the one in the test's process under TestCluster).
        self.num_ackers: int = declared if declared is not None else (1 if spouts_here else workers)
        self.acking = self.num_ackers > 0
        last_task = max((t for spec in topology.components.values() for t in spec.tasks), default=0)
        # The acker tasks, numbered after the topology's own, as Storm numbers its __acker tasks.
        self.acker_task_ids = [last_task + 1 + a for a in range(self.num_ackers)]
        self._acks_due = False  # this step released held acks, or an acker task waits for a wave's acks
        self._quiet = False  # the last step moved nothing
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
        self.woken = threading.Event()
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
        shipped = list(topology.bolts) if spouts_here else list(topology.components)
        self._broadcast = ship_topology(sc, topology, self.conf, shipped)
        here = shipped_here(topology, self.conf) if spouts_here else None
        where = self.conf[cfg.SQUALL_CHECKPOINT_DIR]
        if where is None:  # a cluster always names one (its own, by default)
            raise InvalidConfigError(f"topology {name!r}: squall.checkpoint.dir is not set: snapshots go there")
        snapshot_root = os.fspath(where)
        # Stateful tasks write their own checkpoint parts; the driver commits them.
        settings = RunSettings(
            self.run_id,
            self._seed,
            self.acking,
            capture,
            self.num_ackers,
            snapshot_root,
            self.state_checkpoints.provider.spec() if self.state_checkpoints is not None else None,
            not self.conf[cfg.TOPOLOGY_DISABLE_LOADAWARE_MESSAGING],
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
            self.state_checkpoints.tasks if self.state_checkpoints is not None else frozenset(),
            restored,
            self.conf[cfg.SQUALL_WORKER_REPLACE_TIMEOUT_SECS],
            keys=self.keys,
            handshake_timeout=self.conf[cfg.SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS],
            max_proving=self.conf[cfg.SQUALL_LINKS_MAX_CONNECTIONS],
            here=here,
            stall_secs=self.conf[cfg.SQUALL_WAVE_STALL_SECS],
        )
        self.scheduler.on_setup_error = self.stats.setup_failed

    @property
    def pending_count(self) -> int:
        """Trees pending, as the spout tasks' last reports said."""
        return self.stats.pending

    @property
    def wanted_active(self) -> bool:
        """What ``set_active`` asked last."""
        return self._wanted_active

    def set_active(self, active: bool) -> None:
        """Storm's ``activate``/``deactivate``: start or stop asking the spouts for tuples. Each spout task is
        told on the thread that makes its calls, before its next one."""
        self._wanted_active = active

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
        return StateCheckpoints(self.topology, stateful, provider, interval, self.clock.now())

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
            self._rotations_due += 1  # the acker tasks rotate with the next wave
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
        """Every step sends a wave, as each may bring emits."""
        self._fire_timers(now)
        before, settled_before = self.stats.spout_emits_seen, self._settled_seen
        self._acks_due = False
        # After a step in which nothing moved, this one runs its wave alone: every wave before it has completed,
        # so it carries their Commit, and its spout tasks' report says whether every ack they led to is applied.
        quiet = self._quiet
        completed = self._apply(self.scheduler.poll(wait_for=0 if quiet else self.max_inflight))
        self._abandon_dropped_checkpoints()
        ticks_due = self._take_ticks()
        ticks = sum(due.count for due in ticks_due)
        checkpoint = self.state_checkpoints.due(now) if self.state_checkpoints is not None else None
        calls = self.sizer.calls_per_spout_task() if self._wanted_active else 0
        rotations, self._rotations_due = self._rotations_due, 0
        simulated = self.clock.now() if self.clock.simulated else None
        snapshot = self.snapshot_timer.due(now) and self.scheduler.recovery.due
        self.wave = self.scheduler.send(  # the driver's input is control only: no tuple
            simulated, checkpoint, calls, rotations, self._wanted_active, snapshot=snapshot, ticks=ticks_due
        )
        self.sizer.sized(self.wave, calls)
        if snapshot:
            self.snapshot_timer.sent(now, self.wave)
        completed += self._apply(self.scheduler.poll(wait_for=0 if quiet else self.max_inflight - 1))
        for statuses in self.scheduler.take_stopped_spouts():
            self._apply_spout_statuses(statuses)
        for counts in self.scheduler.take_stopped_ackers():
            self._apply_acker_counts(counts)
        emits = self.stats.spout_emits_seen - before
        self.stats.restarts = self.scheduler.recoveries
        self._note_idle(bool(emits) or not self._wanted_active)
        self._stop_if_repeated()
        # Quiet when waves completed and brought no emit, settled no tree, sent no tick and left no acks on their
        # way to be applied (spouts held back by topology.max.spout.pending wait for acks). A step in which no
        # wave completed learned nothing: the waves go on pipelined.
        moved = bool(emits or ticks or self._settled_seen != settled_before or self._acks_due)
        if moved or not completed or self._waiting_for_workers():  # a wave run again after a loss calls no spout
            self._quiet = False
            dry = bool(completed) and self.sizer.dry
            return WaveInfo(emits, emits + ticks, completed, confirming=not moved, dry=dry)
        self.scheduler.flush_commit()  # the caller may pause: the workers hear of the waves just completed meanwhile
        self._quiet = True
        # Idle only when this wave, alone in flight, completed and moved nothing (a restart drops a wave).
        return WaveInfo(0, 0, 0, confirming=not quiet)

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
                        "bolt %s: attributes %s cannot be pickled and are not made by prepare(); they are left out"
                        " of its task snapshots, so a task rebuilt after a lost worker starts without them",
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
            if self.state_checkpoints is not None:
                started = time.perf_counter()
                released = self.state_checkpoints.completed(
                    wave.checkpoint,
                    wave.holds_acks,
                    wave.state_parts,
                    any(s.executed for (_, t), s in wave.status.items() if t in self.state_checkpoints.tasks),
                )
                self.stats.state_seconds += time.perf_counter() - started
                if released:
                    self.scheduler.release(wave.wave)  # the acker tasks apply the acks it held
                    self._acks_due = True
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
        self._acks_due = self._acks_due or wave.acks_behind  # the next waves' reports say what they settled
        self.stats.spout_emits_seen += wave.spout_emits
        ended, statuses = time.monotonic(), wave.spouts.values()
        settled = sum(status.acked + status.failed for _, status in statuses)
        self.stats.busy(ended - wave.seconds, ended, sum(status.emitted for _, status in statuses), settled)
        self.snapshot_timer.emitted(wave.wave, {task: status.emitted for task, (_, status) in wave.spouts.items()})
        self._apply_spout_statuses(wave.spouts)
        self._apply_acker_counts(wave.ackers)

    def _apply_acker_counts(self, ackers: dict[int, tuple[int, int]]) -> None:
        for acker, (merged, settled) in ackers.items():  # Storm's __acker: executed acks, emitted settlements
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

    def interrupt(self) -> None:
        """From any thread: a step blocked waiting for workers returns at once, and so will every later one."""
        self.scheduler.interrupt()
        self.woken.set()

    def finish(self, fail_pending: bool) -> None:
        """On the run's own thread, as it stops: whether the spout tasks fail what is still pending back to their
        spouts as they close (when asked, and the run did not fail)."""
        self._fail_back = fail_pending and self.failure is None

    def close(self) -> None:
        self.scheduler.close(fail_pending=self._fail_back, active=self._wanted_active)
        self._apply_spout_statuses(self.scheduler.final_spouts)
        self._broadcast.destroy()
