"""``LocalCluster``: run topologies on Spark (local mode by default).

Like Storm's ``LocalCluster``, it is self-contained: unless the config says
otherwise, bolt state is checkpointed and transactional progress is kept in
directories the cluster owns and removes on shutdown, so one run never leaks
into the next. ``squall run`` passes durable places instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

from squall.model import config as cfg
from squall.model.errors import SquallError, TopologyFailed
from squall.model.topology import Topology
from squall.spark.clock import Clock, RealClock
from squall.spark.context import check_executors, is_local_master, spark_context
from squall.spark.driver import TopologyRun
from squall.spark.failures import stop_reason
from squall.spark.run import TOPOLOGY, Run
from squall.spark.stats import RunStats

log = logging.getLogger("squall")

KILL_JOIN_SECS = 30.0  # a step interrupted by a kill returns within about a second; a spout call may not
LONG_IDLE_SECS = 1.0  # idle this long with no tree pending, pauses grow to squall.idle.max.sleep.secs
FIRST_IDLE_PAUSE_SECS = 0.002  # the first pause after a step that moved nothing; doubles up to the idle sleep


def is_local_path(url: str) -> bool:
    """A path on this machine's own filesystem (no scheme, or ``file:``)."""
    scheme, sep, _ = url.partition(":")
    return not sep or scheme == "file" or len(scheme) == 1  # a Windows drive letter is a path too


class LocalCluster:
    """Runs topologies on Spark, each driven by its own thread; ``local[*]`` unless
    ``squall.spark.master`` says otherwise.

    Use it as a context manager, or call ``shutdown()``.

    Spout tasks run on the workers, as Storm's spout executors do: a spout's attributes live there. To see what
    a spout saw, use a store, the metrics, or ``TestCluster``, which runs its spouts in the test's own process.
    """

    spouts_here = False  # TestCluster runs its spout and acker tasks on a worker in the test's process

    def __init__(
        self, conf: dict[str, Any] | None = None, clock: Clock | None = None, ui_fallback: bool = False
    ) -> None:
        self._declared: Mapping[str, Any] = dict(conf or {})
        self.conf = cfg.resolve_config(conf)
        self.clock = clock or RealClock()
        self._owned_dirs: list[str] = []
        self.runs: dict[str, Run] = {}
        self.failures: dict[str, TopologyFailed] = {}  # topologies a failure no retry can fix has stopped
        self._surfaced: set[str] = set()  # failures taken by the caller (``take_failure``): not raised at shutdown
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._fail_back: dict[str, bool] = {}  # killed with a wait: pending trees fail back as the run stops
        self._lock = threading.RLock()
        self._kill_lock = threading.Lock()
        self._state_dir: str | None = None
        self._checkpoint_dir: str | None = None
        self.sc, self._owns_context = spark_context(
            self.conf[cfg.SQUALL_SPARK_MASTER],
            settings=self.conf[cfg.SQUALL_SPARK_CONF],
            ui=self.conf[cfg.SQUALL_SPARK_UI],
        )
        self.ui = None  # the web UI, REST API and /metrics, when squall.ui.port is set (squall.ui.server)
        try:
            check_executors(self.sc, slots=self.conf[cfg.SQUALL_WORKERS])
            self._set_checkpoint_dir()
            if self.conf[cfg.SQUALL_UI_PORT] is not None:
                from squall.ui.server import UIServer

                self.ui = UIServer(self, self.conf[cfg.SQUALL_UI_HOST], self.conf[cfg.SQUALL_UI_PORT], ui_fallback)
        except BaseException:
            self.shutdown()
            raise

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(raise_failures=exc[0] is None)  # an exception on its way out is not hidden by another

    def _own_dir(self, prefix: str) -> str:
        path = tempfile.mkdtemp(prefix=prefix)
        self._owned_dirs.append(path)
        return path

    def _set_checkpoint_dir(self) -> None:
        where = self.conf[cfg.SQUALL_CHECKPOINT_DIR]
        where = self._own_dir("squall-checkpoints-") if where is None else os.fspath(where)
        self._checkpoint_dir = where
        if not is_local_master(self.sc.master) and is_local_path(where):
            log.warning(
                "checkpoint directory %s is on the driver's local filesystem, but master %s is not local: a cluster "
                "needs shared storage (hdfs:, s3a: or a mount every node shares); set squall.checkpoint.dir",
                where,
                self.sc.master,
            )
        self.sc.setCheckpointDir(where)

    def _run_conf(self, conf: dict | None, topology_conf: Mapping[str, Any]) -> dict[str, Any]:
        """What the cluster and the submission declared (a run lays it over the topology's own config and
        the defaults); an owned transactional store unless one of them names a store."""
        merged = {**self._declared, **(conf or {})}
        if cfg.SQUALL_CHECKPOINT_DIR not in {**topology_conf, **merged}:
            merged[cfg.SQUALL_CHECKPOINT_DIR] = self._checkpoint_dir  # stateful bolts' checkpoints go here too
        if cfg.SQUALL_TRANSACTIONAL_STORE not in {**topology_conf, **merged}:
            if self._state_dir is None:
                self._state_dir = self._own_dir("squall-state-")
            merged[cfg.SQUALL_TRANSACTIONAL_STORE] = os.path.join(self._state_dir, "transactional.sqlite")
        return merged

    def _start(self, name: str, conf: dict | None, topology: Topology, capture: bool) -> Run:
        from squall.transactional.builder import TransactionalTopology

        if name in self.runs:
            raise SquallError(f"a topology named {name!r} is already running")
        self.failures.pop(name, None)
        self._surfaced.discard(name)
        if isinstance(topology, TransactionalTopology):
            from squall.drpc.client import DRPCInvocations
            from squall.transactional.runtime import TransactionalRun

            run_conf = self._run_conf(conf, topology.topology.conf)
            run = TransactionalRun(
                name,
                topology,
                run_conf,
                self.sc,
                self.clock,
                spouts_here=self.spouts_here,
                remote_requests=DRPCInvocations.from_conf,
            )
        elif isinstance(topology, Topology):
            run = TopologyRun(
                name,
                topology,
                self._run_conf(conf, topology.conf),
                self.sc,
                self.clock,
                capture,
                spouts_here=self.spouts_here,
            )
        else:
            raise TypeError(f"submit_topology({name!r}): expected a built Topology, got {type(topology).__name__}")
        self.runs[name] = run
        return run

    def submit_topology(self, name: str, conf: dict | None, topology: Topology) -> Run:
        with self._lock:
            run = self._start(name, conf, topology, capture=False)
            stop = threading.Event()
            thread = threading.Thread(target=self._drive, args=(run, stop), name=f"squall-{name}", daemon=True)
            self._threads[name] = (thread, stop)
            thread.start()
            return run

    def _drive(self, run: Run, stop: threading.Event) -> None:
        """The run's own thread: every spout call (``open`` to ``close``) and every step happen here."""
        try:
            self._steps(run, stop)
        finally:
            with self._lock:
                run.finish(self._fail_back.get(run.name, False))

    def _steps(self, run: Run, stop: threading.Event) -> None:
        sleep, long_sleep = run.conf[cfg.SQUALL_IDLE_SLEEP_SECS], run.conf[cfg.SQUALL_IDLE_MAX_SLEEP_SECS]
        dry_pause = run.conf[cfg.SQUALL_WAVE_DRY_PAUSE_MS] / 1000
        first_pause = pause = min(sleep, FIRST_IDLE_PAUSE_SECS)
        limit, errors_in_a_row = run.conf[cfg.SQUALL_WAVE_MAX_FAILURES], 0
        while not stop.is_set():
            try:
                with self._lock:
                    info = run.step()
                errors_in_a_row = 0
            except TopologyFailed as failure:
                self.failures[run.name] = failure
                return
            except Exception as exc:
                errors_in_a_row += 1
                log.exception("topology %s: wave loop error", run.name)
                why = stop_reason(exc, errors_in_a_row, limit, "driver loop steps")
                if why is not None:
                    self.failures[run.name] = TopologyFailed(f"topology {run.name!r} stopped: {why}")
                    log.error("%s", self.failures[run.name])
                    return
                info = None
            if info is None or info.idle:  # as Storm's progressive wait strategy: longer pauses while nothing moves
                if run.woken.wait(pause):  # work came (a DRPC request; a kill): no more pausing
                    run.woken.clear()
                    pause = first_pause
                    continue
                long_idle = run.idle_for() >= LONG_IDLE_SECS  # nothing pending all along
                pause = min(max(sleep, long_sleep) if long_idle else sleep, pause * 2)
            else:
                pause = first_pause
                # The spouts had less than their calls allowed: as Storm's spout waits when next_tuple emits
                # nothing, the next wave waits a moment, which leaves the workers time to ship what they made
                if info.dry and dry_pause and run.woken.wait(dry_pause):
                    run.woken.clear()

    def kill_topology(self, name: str, wait_secs: float | None = None) -> None:
        """Stop a topology. With ``wait_secs``, as ``storm kill -w``: the spouts are deactivated, the pending
        trees get up to ``wait_secs`` to finish, and those still pending are then failed back to their spouts
        (a reliable source takes them back) before the topology closes."""
        with self._kill_lock:  # one kill at a time: a second one for the same topology finds it gone
            run = self.runs.get(name)
            if run is None:
                raise SquallError(f"no topology named {name!r} is running")
            if wait_secs is not None and run.kind == TOPOLOGY:
                run.set_active(False)  # applied by the run's thread, before its next spout call
                if wait_secs > 0:
                    self._drain(run, wait_secs)
            thread, stop = self._threads.pop(name, (None, None))
            fail_back = wait_secs is not None and run.kind == TOPOLOGY
            if stop is not None:  # the run's thread fails the pending trees back and closes the spouts
                self._fail_back[name] = fail_back
                stop.set()
                run.interrupt()  # a step waiting for a worker that will not come returns now
                thread.join(KILL_JOIN_SECS)
                if thread.is_alive():
                    log.warning("topology %s: its thread did not stop within %ss; closing it", name, KILL_JOIN_SECS)
            with self._lock:
                try:
                    if stop is None:  # driven by the caller's thread
                        run.finish(fail_back)
                    run.close()
                finally:
                    self.runs.pop(name, None)
                    self._fail_back.pop(name, None)

    def set_active(self, name: str, active: bool) -> None:
        """Storm's ``activate``/``deactivate``: resume or pause the topology's spouts."""
        run = self.runs.get(name)
        if run is None:
            raise SquallError(f"no topology named {name!r} is running")
        if run.kind != TOPOLOGY:
            raise SquallError(f"topology {name!r} is transactional: its spouts cannot be deactivated")
        run.set_active(active)

    def rebalance(self, name: str, parallelism: dict[str, int], wait_secs: float | None = None) -> TopologyRun:
        """Change components' parallelism, as ``storm rebalance -e`` does: the spouts are deactivated, the trees
        in flight get up to ``wait_secs`` (the message timeout by default) to finish, and the topology starts
        again with the new task layout. Stateful bolts take their state along (their keys dealt out again by
        the fields grouping); a plain bolt's tasks start afresh."""
        run = self.runs.get(name)
        if run is None or run.kind != TOPOLOGY:
            raise SquallError(f"no topology named {name!r} that can be rebalanced is running")
        topology = run.topology.with_parallelism(parallelism)
        wait = run.conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS] if wait_secs is None else wait_secs
        with self._lock:
            run.set_active(False)
        self._drain(run, wait)
        conf, capture = dict(run.conf), run.capture
        self.kill_topology(name)
        with self._lock:
            if capture:
                return self._start(name, conf, topology, capture=True)
        return self.submit_topology(name, conf, topology)

    def _drain(self, run: TopologyRun, seconds: float) -> None:
        """Until no tree is pending and no state waits for a checkpoint, or ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while (run.stats.pending or run.state_waiting) and time.monotonic() < deadline and run.failure is None:
            time.sleep(0.01)

    def stats(self, name: str) -> RunStats:
        return self.runs[name].stats

    def wait_idle(self, name: str, idle_secs: float = 1.0, timeout: float | None = None) -> RunStats:
        """Block until topology ``name`` has had no tree pending and moved nothing for ``idle_secs`` (its spouts
        have run dry), then return its stats; the topology keeps running. Raises the ``TopologyFailed`` that
        stopped it, if one did, and ``TimeoutError`` after ``timeout`` seconds. Called on the caller's thread;
        it only reads the run's state."""
        run = self.runs.get(name)
        if run is None:
            raise SquallError(f"no topology named {name!r} is running")
        deadline = None if timeout is None else time.monotonic() + timeout
        while run.idle_for() < idle_secs:
            failure = self.take_failure(name)
            if failure is not None:
                raise failure
            if name not in self.runs:
                raise SquallError(f"topology {name!r} was killed while waiting for it to go idle")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"topology {name!r} was not idle for {idle_secs:g}s within {timeout:g}s")
            time.sleep(0.02)
        return run.stats

    def take_failure(self, name: str) -> TopologyFailed | None:
        """The failure that stopped topology ``name``, if one did; once taken, ``shutdown`` does not raise it."""
        failure = self.failures.get(name)
        if failure is not None:
            self._surfaced.add(name)
        return failure

    def shutdown(self, raise_failures: bool = True) -> None:
        """Kill every topology still running and stop the SparkContext the cluster made. Then, as a Storm
        topology that dies is visibly down, the ``TopologyFailed`` of a topology a failure stopped is raised,
        unless the caller took it (``take_failure``) or ``raise_failures`` is false."""
        if getattr(self, "ui", None) is not None:
            self.ui.close()
            self.ui = None
        try:
            for name in list(self.runs):
                try:
                    self.kill_topology(name)
                except Exception:
                    log.exception("topology %s did not close cleanly", name)
        finally:
            if self._owns_context:
                self._owns_context = False
                self.sc.stop()
            for path in self._owned_dirs:
                shutil.rmtree(path, ignore_errors=True)
            self._owned_dirs = []
        untaken = [name for name in getattr(self, "failures", {}) if name not in self._surfaced]
        if raise_failures and untaken:
            self._surfaced.update(untaken)
            raise self.failures[untaken[0]]
