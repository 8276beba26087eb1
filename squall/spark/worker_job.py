"""The Spark side of a run's workers: the job of long-lived tasks, one per worker, and the worker in this process.

A *launch* starts the job: ``workers`` Spark tasks in one job group, each running ``run_worker`` until the run
stops it, and, under ``TestCluster``, one more worker on a thread of this process (``InProcessWorker``), numbered
after the job's. The workers connect to the run's hub and say which launch they belong to; when the job ends, for
any reason, ``JobEnded`` is posted to the hub with the launch and the error. A relaunch (a resize, or a job that
failed) cancels the old job group first. Nothing here knows of waves or generations: that is the scheduler's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial

from pyspark import SparkContext

from squall.security.keys import RunKeys
from squall.spark.hub import Hub
from squall.spark.shipping import ShippedTopology
from squall.spark.worker import InProcessWorker, run_worker


@dataclass(frozen=True, slots=True)
class JobEnded:
    """Posted to the hub when launch ``launch``'s Spark job ends: ``error`` None when it returned."""

    launch: int
    error: BaseException | None


class WorkerJob:
    """The workers of run ``run_id`` on Spark (``shipped``: the topology they unpickle), and with ``here`` (the
    declared topology itself) one more in this process."""

    def __init__(
        self,
        sc: SparkContext,
        name: str,
        run_id: str,
        shipped: object,
        keys: RunKeys,
        here: ShippedTopology | None = None,
    ) -> None:
        self.sc, self.name, self.run_id, self.keys = sc, name, run_id, keys
        self._shipped, self._here = shipped, here
        self.launches = 0
        self.worker_here: InProcessWorker | None = None
        self._thread: threading.Thread | None = None
        self._group = ""

    @property
    def has_worker_here(self) -> bool:
        return self._here is not None

    def launch(self, hub: Hub, workers: int) -> int:
        """Start ``workers`` workers on Spark (and the one here); returns the launch's number."""
        self.launches += 1
        launch = self.launches
        if self._here is not None:
            self.start_here(hub, workers)
        if not workers:
            self._thread = None
            return launch
        group = f"squall-workers-{self.run_id}-{launch}"
        body = partial(run_worker, self.run_id, self._shipped, hub.address, self.keys, launch)

        def job() -> None:
            error = None
            try:
                self.sc.setJobGroup(group, f"squall topology {self.name}: {workers} workers", interruptOnCancel=True)
                self.sc.parallelize(range(workers), workers).mapPartitionsWithIndex(body).collect()
            except BaseException as exc:
                error = exc
            hub.post(JobEnded(launch, error))

        self._group = group
        self._thread = threading.Thread(target=job, name=f"squall-job-{self.name}", daemon=True)
        self._thread.start()
        return launch

    def start_here(self, hub: Hub, workers: int) -> None:
        """The worker in this process, for the current launch, numbered ``workers`` (after the Spark job's): at a
        launch, and again when it was lost, as Spark retries a lost worker's task."""
        self.worker_here = InProcessWorker(
            self.run_id, self._here, hub.address, self.keys, self.launches, workers, self.name
        )

    @property
    def running(self) -> bool:
        """The current launch's Spark job has not ended."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def cancel(self) -> None:
        """Cancel the current launch's Spark job (its tasks are interrupted)."""
        if self._thread is not None:
            self.sc.cancelJobGroup(self._group)

    def executors(self) -> int:
        """Executors the application has now (the driver's own block manager included)."""
        try:
            return len(self.sc._jsc.sc().statusTracker().getExecutorInfos())
        except Exception:  # the context is stopping
            return 0
