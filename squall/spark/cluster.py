"""``LocalCluster``: run topologies on Spark (local mode by default)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from squall.model import config as cfg
from squall.model.errors import SquallError
from squall.model.topology import Topology
from squall.spark.clock import Clock, RealClock
from squall.spark.context import spark_context
from squall.spark.driver import TopologyRun
from squall.spark.stats import RunStats

log = logging.getLogger("squall")


class LocalCluster:
    """Runs topologies on Spark, each driven by its own thread; ``local[*]`` unless
    ``squall.spark.master`` says otherwise.

    Use it as a context manager, or call ``shutdown()``.
    """

    def __init__(self, conf: dict[str, Any] | None = None, clock: Clock | None = None) -> None:
        self.conf = cfg.resolve_config(conf)
        self.clock = clock or RealClock()
        self.sc, self._owns_context = spark_context(self.conf[cfg.SQUALL_SPARK_MASTER])
        self.runs: dict[str, TopologyRun] = {}
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._lock = threading.RLock()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _start(self, name: str, conf: dict | None, topology: Topology, capture: bool) -> TopologyRun:
        from squall.transactional.builder import TransactionalTopology

        if name in self.runs:
            raise SquallError(f"a topology named {name!r} is already running")
        merged = {**self.conf, **(conf or {})}
        if isinstance(topology, TransactionalTopology):
            from squall.transactional.runtime import TransactionalRun

            run = TransactionalRun(name, topology, merged, self.sc, self.clock)
        elif isinstance(topology, Topology):
            run = TopologyRun(name, topology, merged, self.sc, self.clock, capture)
        else:
            raise TypeError(f"submit_topology({name!r}): expected a built Topology, got {type(topology).__name__}")
        self.runs[name] = run
        return run

    def submit_topology(self, name: str, conf: dict | None, topology: Topology) -> TopologyRun:
        with self._lock:
            run = self._start(name, conf, topology, capture=False)
            stop = threading.Event()
            thread = threading.Thread(target=self._drive, args=(run, stop), name=f"squall-{name}", daemon=True)
            self._threads[name] = (thread, stop)
            thread.start()
            return run

    def _drive(self, run: TopologyRun, stop: threading.Event) -> None:
        sleep = run.conf[cfg.SQUALL_IDLE_SLEEP_SECS]
        while not stop.is_set():
            try:
                with self._lock:
                    info = run.step()
            except Exception:
                log.exception("topology %s: wave loop error", run.name)
                info = None
            if info is None or not info.delivered:
                stop.wait(sleep)

    def kill_topology(self, name: str) -> None:
        thread, stop = self._threads.pop(name, (None, None))
        if stop is not None:
            stop.set()
            thread.join()
        with self._lock:
            run = self.runs.pop(name, None)
            if run is None:
                raise SquallError(f"no topology named {name!r} is running")
            run.close()

    def stats(self, name: str) -> RunStats:
        return self.runs[name].stats

    def shutdown(self) -> None:
        for name in list(self.runs):
            self.kill_topology(name)
        if self._owns_context:
            self.sc.stop()
            self._owns_context = False
