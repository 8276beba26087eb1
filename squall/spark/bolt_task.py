"""A bolt task as it runs inside a Spark partition, and how its state survives.

A task's state is the bolt object's attributes. After each wave that gave the
task input, they are pickled into a ``Snapshot`` that becomes the task's
partition of the bolt's state RDD, cached by Spark and checkpointed
periodically, so it survives a Python worker or executor dying.

A task instance is (re)built wherever it runs: a fresh copy of the declared
bolt, ``prepare()`` (where connections are made), then the snapshot's
attributes laid over it. Attributes that cannot be pickled (connections,
locks) are left out of snapshots and come from ``prepare()``.

A Python worker keeps the live instance after a wave; when the next wave of the
same task lands on the same worker with the snapshot it produced, the instance
is reused as is, with no rebuild.
"""

from __future__ import annotations

import copy
import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from squall.model.components import BasicBolt
from squall.model.errors import FailedException
from squall.model.topology import Topology, TopologyContext
from squall.reliability.ids import IdGenerator
from squall.spark.collectors import BasicOutputCollector, OutputCollector, TaskStatus
from squall.spark.records import Out, to_tuple

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


class BoltTask:
    def __init__(self, topology: Topology, conf: dict, component: str, task: int, plan: TaskPlan) -> None:
        spec = topology.components[component]
        self.component, self.task = component, task
        self.bolt = copy.deepcopy(spec.obj)
        self.context = TopologyContext(topology, component, task)
        self.collector = OutputCollector(topology, component, task, plan.acking, plan.capture)
        self.basic = isinstance(self.bolt, BasicBolt)
        self._topology = topology
        self._unpicklable: set[str] = set()
        task_conf = {**conf, **spec.conf}
        if self.basic:
            self.basic_collector = BasicOutputCollector(self.collector)
            self.bolt.prepare(task_conf, self.context)
        else:
            self.bolt.prepare(task_conf, self.context, self.collector)

    # -- state ---------------------------------------------------------------
    def _own(self) -> tuple[Any, ...]:
        return (self.collector, self.context, getattr(self, "basic_collector", None))

    def snapshot(self, version: int) -> Snapshot:
        own = self._own()
        state = {
            k: v for k, v in vars(self.bolt).items() if k not in self._unpicklable and not any(v is o for o in own)
        }
        try:
            blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            for key, value in list(state.items()):
                try:
                    pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:
                    self._unpicklable.add(key)
                    del state[key]
            log.info(
                "%s task %d: not snapshotting %s (unpicklable; rebuilt by prepare)",
                self.component,
                self.task,
                sorted(self._unpicklable),
            )
            blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        return Snapshot(version, blob)

    def restore(self, snapshot: Snapshot) -> None:
        vars(self.bolt).update(pickle.loads(snapshot.blob))

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


def run_partition(
    topology: Topology,
    conf: dict,
    component: str,
    plan: TaskPlan,
    driver_inputs: list[tuple],
    index: int,
    records: Iterator,
) -> Iterator[tuple]:
    """Run one bolt task: its state record comes first in ``records``, then its shuffled input.

    ``driver_inputs`` are the tuples the driver sends this task (spout emits, ticks).
    """
    task_id = topology.task_ids(component)[index]
    records = iter(records)
    first = next(records, None)
    if first is None or first[1][0] != Out.STATE:
        raise RuntimeError(f"{component} task {task_id}: partition {index} does not start with its state")
    snapshot: Snapshot | None = first[1][1]
    version = snapshot.version if snapshot else None

    live = _LIVE.pop((plan.run_id, task_id), None)  # taken out while running: a crash leaves nothing stale
    if live is not None and live[0] == version:
        task = live[1]
    else:
        task = BoltTask(topology, conf, component, task_id, plan)
        if snapshot is not None:
            task.restore(snapshot)
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
    _LIVE[(plan.run_id, task_id)] = (snapshot.version if snapshot else None, task)
    yield (index, (Out.STATE, snapshot))
    yield (("status", component, task_id), (Out.STATUS, task.collector.status, task.collector.captured))
