"""A bolt task as it runs inside a Spark partition, and how its state survives.

A task's state is the bolt object's attributes. After each wave that gave the
task input, they are pickled into a ``Snapshot`` that becomes the task's
partition of the bolt's state RDD, cached by Spark and checkpointed
periodically, so it survives a Python worker or executor dying.

A task instance is (re)built wherever it runs: the shipped bolt unpickled,
``prepare()`` (where connections are made), then the snapshot's attributes
laid over it. References to the bolt itself, its collector and its context are
re-bound to the new instance's; only attributes that truly cannot be pickled
(sockets, connections, locks) are left out and come from ``prepare()``.
A bolt that cannot be unpickled or whose ``prepare()`` raises fails the task
with ``TaskSetupError``, for Spark to retry and the driver to stop on.

A Python worker keeps the live instance after a wave; when the next wave of the
same task lands on the same worker with the snapshot it produced, the instance
is reused as is, with no rebuild.
"""

from __future__ import annotations

import io
import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from pyspark import cloudpickle

from squall.model.components import BasicBolt
from squall.model.errors import FailedException
from squall.model.topology import TopologyContext
from squall.reliability.ids import IdGenerator
from squall.spark.collectors import BasicOutputCollector, OutputCollector, TaskStatus
from squall.spark.failures import TaskSetupError
from squall.spark.records import Out, to_tuple
from squall.spark.shipping import ShippedTopology, new_component, shipped_runs
from squall.time import use_simulated_time

log = logging.getLogger("squall.task")


@dataclass(frozen=True)
class Snapshot:
    version: int  # the wave that produced it
    blob: bytes


@dataclass(frozen=True)
class TaskPlan:
    """What a bolt task needs to know about the wave it runs in."""

    run_id: str
    wave: int
    seed: int
    acking: bool
    capture: bool
    simulated_now: float | None = None  # the wave's time on a simulated clock, for squall.time.now()


class _StatePickler(cloudpickle.Pickler):
    """Pickles a bolt's attributes; the task's own objects (the bolt, its collector and context) become tags."""

    def __init__(self, file: io.BytesIO, own: dict[int, str]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._own = own

    def persistent_id(self, obj: Any) -> str | None:
        return self._own.get(id(obj))


class _StateUnpickler(pickle.Unpickler):
    """Re-binds the tags to the restoring task's own bolt, collector and context."""

    def __init__(self, file: io.BytesIO, own: dict[str, Any]) -> None:
        super().__init__(file)
        self._own = own

    def persistent_load(self, pid: str) -> Any:
        return self._own[pid]


class BoltTask:
    def __init__(self, shipped: ShippedTopology, component: str, task: int, plan: TaskPlan) -> None:
        topology = shipped.topology
        spec = topology.components[component]
        self.component, self.task = component, task
        self.bolt = new_component(shipped, component, task)
        self.context = TopologyContext(topology, component, task)
        self.collector = OutputCollector(topology, component, task, plan.acking, plan.capture)
        self.basic = isinstance(self.bolt, BasicBolt)
        self.basic_collector = BasicOutputCollector(self.collector) if self.basic else None
        self._topology = topology
        self.unpicklable: set[str] = set()  # attributes left to prepare(): a socket, a connection, a lock
        task_conf = {**shipped.conf, **spec.conf}
        try:
            if self.basic:
                self.bolt.prepare(task_conf, self.context)
            else:
                self.bolt.prepare(task_conf, self.context, self.collector)
        except Exception as exc:
            raise TaskSetupError(component, task, "prepare() raised", exc) from exc

    # -- state ---------------------------------------------------------------
    def _own(self) -> dict[str, Any]:
        own = {"bolt": self.bolt, "collector": self.collector, "context": self.context}
        if self.basic_collector is not None:
            own["basic_collector"] = self.basic_collector
        return own

    def _dumps(self, state: dict[str, Any], own: dict[int, str]) -> bytes:
        buffer = io.BytesIO()
        _StatePickler(buffer, own).dump(state)
        return buffer.getvalue()

    def snapshot(self, version: int) -> Snapshot:
        """Every attribute of the bolt; references to the bolt, its collector or context are re-bound on restore."""
        own = {id(obj): tag for tag, obj in self._own().items()}
        state = {k: v for k, v in vars(self.bolt).items() if k not in self.unpicklable}
        try:
            blob = self._dumps(state, own)
        except Exception:
            for key, value in list(state.items()):
                try:
                    self._dumps({key: value}, own)
                except Exception:
                    self.unpicklable.add(key)
                    del state[key]
            blob = self._dumps(state, own)
        return Snapshot(version, blob)

    def restore(self, snapshot: Snapshot) -> None:
        state = _StateUnpickler(io.BytesIO(snapshot.blob), self._own()).load()
        vars(self.bolt).update(state)

    # -- execution -----------------------------------------------------------
    def begin_wave(self, plan: TaskPlan) -> None:
        ids = IdGenerator([plan.seed, plan.wave, self.task])  # the same ids if Spark recomputes
        self.collector.next_id = ids.next_id
        self.collector.status = TaskStatus()
        self.collector.captured = []

    def execute(self, record: tuple) -> None:
        tup = to_tuple(self._topology, record)
        self.collector.status.executed += 1
        try:
            if self.basic:
                self.basic_collector.input = tup
                self.bolt.execute(tup, self.basic_collector)
                self.collector.ack(tup)
            else:
                self.bolt.execute(tup)
        except FailedException:
            self.collector.fail(tup)
        except Exception as exc:
            log.error("%s task %d failed %r", self.component, self.task, tup, exc_info=True)
            self.collector.report_error(exc)
            self.collector.fail(tup)

    def drain(self) -> list[tuple]:
        out, self.collector.out = self.collector.out, []
        return out


# (run_id, task) -> (snapshot version, live task); one per task per Python worker
_LIVE: dict[tuple[str, int], tuple[int | None, BoltTask]] = {}


def _forget_other_runs(run_id: str) -> None:
    """A reused Python worker keeps live tasks of the runs it still has shipped, not of every run it saw."""
    kept = shipped_runs() | {run_id}
    for key in [k for k in _LIVE if k[0] not in kept]:
        del _LIVE[key]


def run_partition(
    shipped: ShippedTopology,
    component: str,
    plan: TaskPlan,
    driver_inputs: list[tuple],
    index: int,
    records: Iterator,
) -> Iterator[tuple]:
    """Run one bolt task: its state record comes first in ``records``, then its shuffled input.

    ``driver_inputs`` are the tuples the driver sends this task (spout emits, ticks).
    """
    task_id = shipped.topology.task_ids(component)[index]
    use_simulated_time(plan.simulated_now)  # prepare() may read the clock too
    records = iter(records)
    first = next(records, None)
    if first is None or first[1][0] != Out.STATE:
        raise RuntimeError(f"{component} task {task_id}: partition {index} does not start with its state")
    snapshot: Snapshot | None = first[1][1]
    version = snapshot.version if snapshot else None

    _forget_other_runs(plan.run_id)
    live = _LIVE.pop((plan.run_id, task_id), None)  # taken out while running: a crash leaves nothing stale
    if live is not None and live[0] == version:
        task = live[1]
    else:
        task = BoltTask(shipped, component, task_id, plan)
        if snapshot is not None:
            try:
                task.restore(snapshot)
            except Exception as exc:
                raise TaskSetupError(component, task_id, "its saved state cannot be restored", exc) from exc
    task.begin_wave(plan)

    executed = 0
    for payload in chain(driver_inputs, (payload for _, payload in records)):
        task.execute(payload[2])
        executed += 1
        if len(task.collector.out) >= 4096:
            yield from task.drain()
    yield from task.drain()

    if executed:
        snapshot = task.snapshot(plan.wave)
        task.collector.status.unpicklable = sorted(task.unpicklable)
    _LIVE[(plan.run_id, task_id)] = (snapshot.version if snapshot else None, task)
    yield (index, (Out.STATE, snapshot))
    report = (Out.STATUS, task.collector.status, task.collector.captured, task.collector.take_acks())
    yield (("status", component, task_id), report)
