"""A Trident bolt: one group of the planned graph, run per task by a ``TaskPlan`` (Storm's ``SubtopologyBolt``).

The runtime makes a fresh ``SubtopologyBolt`` for each try of a batch; it is a thin shell. The task's processors,
its states and its users' operations live in the task's ``TaskPlan``, made (and prepared) once per task and worker
generation and kept in the worker's resources. Tries of several batches may be in flight on one worker: the plan's
lock lets one of them at a time into the task's processors, so operations see one thread at a time, as in Storm.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark import cloudpickle

from squall.model.attempt import TransactionAttempt
from squall.model.topology import TopologyContext
from squall.transactional.bolts import BatchBolt
from squall.trident.processors import BatchContext, Processor, TaskEnv
from squall.trident.state import State, StateFactory
from squall.trident.tuple import tuple_type


@dataclass
class Root:
    """Where the tuples of one input stream go: their fields, how many leading values to drop (a transactional
    spout's ``tx``), and the receiving processors."""

    fields: tuple[str, ...]
    skip: int
    receivers: list[tuple[Processor, int]] = field(default_factory=list)


@dataclass
class GroupPlan:
    """A bolt's processors in topological order, wired, and where each input stream enters them."""

    component: str
    processors: list[Processor]
    roots: dict[tuple[str, str], Root]  # (source component, stream) -> its root


class TaskPlan:
    """One task's prepared processors, for as long as its worker generation lasts."""

    def __init__(self, plan: GroupPlan, conf: dict[str, Any], context: TopologyContext, resources: Any) -> None:
        self.plan, self.lock = plan, threading.RLock()
        index, n = context.task_index, len(context.this_component_tasks)

        def state(state_id: str, factory: StateFactory) -> State:
            key = ("trident-state", state_id, index)
            make = lambda: factory.make_state(conf, None, index, n)  # noqa: E731
            return resources.get(key, make) if resources is not None else make()

        def state_lock(state_id: str) -> Any:
            key = ("trident-state-lock", state_id, index)
            return resources.get(key, threading.RLock) if resources is not None else threading.RLock()

        def committed() -> int:
            return resources.committed if resources is not None else 0

        env = TaskEnv(conf, index, n, plan.component, state, state_lock, committed, context.component_tasks)
        self.roots = {key: (tuple_type(r.fields), r.skip, r.receivers) for key, r in plan.roots.items()}
        for processor in plan.processors:
            processor.prepare(env)

    def start(self, batch_id: TransactionAttempt, collector: Any) -> BatchContext:
        ctx = BatchContext(batch_id, collector)
        with self.lock:
            for processor in self.plan.processors:
                processor.start_batch(ctx)
        return ctx

    def execute_rows(self, ctx: BatchContext, component: str, streams: Sequence[str], rows: Sequence[tuple]) -> None:
        roots, start, n = self.roots, 0, len(rows)
        with self.lock:
            while start < n:  # each run of rows of one stream
                stream, end = streams[start], start + 1
                while end < n and streams[end] == stream:
                    end += 1
                kind, skip, receivers = roots[(component, stream)]
                part = rows[start:end] if start or end < n else rows
                if len(receivers) == 1:
                    receiver, index = receivers[0]
                    receiver.receive_rows(ctx, index, kind, skip, part)
                else:
                    for row in part:
                        tup = kind(row[skip:] if skip else row)
                        for receiver, index in receivers:
                            receiver.receive(ctx, index, tup)
                start = end

    def finish(self, ctx: BatchContext) -> None:
        with self.lock:
            for processor in self.plan.processors:
                processor.finish_batch(ctx)

    def close(self) -> None:
        for processor in self.plan.processors:
            processor.cleanup()


def _shell(component: str, blob: bytes, outputs: dict[str, list[str]]) -> SubtopologyBolt:
    bolt = SubtopologyBolt.__new__(SubtopologyBolt)
    bolt.component, bolt._plan, bolt._blob, bolt.outputs = component, None, blob, outputs
    bolt._resources = None
    return bolt


class SubtopologyBolt(BatchBolt):
    """The batch bolt of one Trident group: each try's shell over the task's ``TaskPlan``."""

    def __init__(self, plan: GroupPlan, outputs: dict[str, list[str]]) -> None:
        self.component, self._plan, self._blob, self.outputs = plan.component, plan, None, outputs
        self._resources = None

    def __reduce__(self) -> tuple:
        """Travels with its plan pickled once: each try unpickles the shell, and only the task's first try the
        plan."""
        blob = self._blob if self._blob is not None else cloudpickle.dumps(self._plan, pickle.HIGHEST_PROTOCOL)
        return _shell, (self.component, blob, self.outputs)

    def use_worker_resources(self, resources: Any) -> None:
        self._resources = resources

    def _task_plan(self, conf: dict[str, Any], context: TopologyContext) -> TaskPlan:
        def make() -> TaskPlan:
            plan = self._plan if self._blob is None else pickle.loads(self._blob)
            return TaskPlan(plan, conf, context, self._resources)

        if self._resources is None:
            return make()
        return self._resources.get(("trident-plan", self.component, context.task_id), make)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: Any, batch_id: Any) -> None:
        self.task = self._task_plan(conf, context)
        self.ctx = self.task.start(batch_id, collector)

    def execute_rows(self, component: str, streams: Sequence[str], rows: Sequence[tuple]) -> None:
        self.task.execute_rows(self.ctx, component, streams, rows)

    def execute(self, tup: Any) -> None:
        self.task.execute_rows(self.ctx, tup.source_component, [tup.source_stream], [tup.values])

    def finish_batch(self) -> None:
        self.task.finish(self.ctx)
