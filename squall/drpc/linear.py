"""``LinearDRPCTopologyBuilder``: DRPC over a chain of plain bolts (Storm's).

Each request goes through the chain as a batch of its own (a request group of a transactional topology): the
first bolt gets ``[request id, args]``, each bolt emits tuples whose first value is the request id, and the last
bolt emits ``[id, result]``; the caller gets the result's text. Every task of a bolt hears ``finished_id(id)``
(``FinishedCallback``) once it has every tuple of the request from every task before it, as Storm's
``CoordinatedBolt`` does.

Bolts:

* a ``BasicBolt`` or a ``Bolt`` is made and prepared once per task (and worker generation), and its calls for one
  request come on that request's thread, one request at a time per task;
* a ``BatchBolt`` gets a fresh instance per request (``prepare(conf, context, collector, request_id)``,
  ``execute``, ``finish_batch``).

A bolt that raises (a ``FailedException`` too), in ``execute`` or in ``finished_id``, fails the request, and its
caller gets ``DRPCExecutionException``. A request is never retried.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from squall.model.components import BasicBolt
from squall.model.errors import InvalidTopologyError
from squall.model.fields import as_fields
from squall.model.groupings import (
    AllGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from squall.transactional.bolts import BatchBolt
from squall.transactional.builder import TransactionalTopology, TransactionalTopologyBuilder
from squall.transactional.requests import VALUE


class FinishedCallback:
    """A linear DRPC bolt that also derives from ``FinishedCallback`` hears ``finished_id(request_id)`` on each
    task once the task has every tuple of that request: emit the request's results there."""

    def finished_id(self, request_id: Any) -> None:
        pass


class _Collector:
    """What a linear DRPC bolt emits through: the collector of the request being processed, switched per
    request. Anchors change nothing (the request is the unit of failure)."""

    def __init__(self) -> None:
        self.target: Any = None
        self.results: list[list[Any]] | None = None  # the last bolt's emits: the request's results

    def emit(self, values: Sequence[Any], anchors: Any = None, stream: str = "default") -> list[int]:
        if self.results is not None:
            self.results.append(list(values))
        return self.target.emit(values, stream=stream)

    def emit_direct(self, task: int, values: Sequence[Any], anchors: Any = None, stream: str = "default") -> None:
        self.target.emit_direct(task, values, stream=stream)

    def ack(self, tup: Any) -> None:
        pass

    def fail(self, tup: Any) -> None:
        self.target.fail(tup)

    def reset_timeout(self, tup: Any) -> None:
        pass

    def report_error(self, error: BaseException) -> None:
        self.target.report_error(error)


class _BasicCollector(_Collector):
    """A ``BasicBolt``'s: ``emit(values, stream)``."""

    def emit(self, values: Sequence[Any], stream: str = "default") -> list[int]:  # type: ignore[override]
        return super().emit(values, None, stream)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default") -> None:  # type: ignore[override]
        super().emit_direct(task, values, None, stream)


class _TaskBolt:
    """A task's user bolt, prepared once, with its collector and the lock that lets one request at a time in."""

    def __init__(self, bolt: Any, conf: dict[str, Any], context: Any) -> None:
        self.bolt, self.lock = bolt, threading.RLock()
        self.basic = isinstance(bolt, BasicBolt)
        self.collector = _BasicCollector() if self.basic else _Collector()
        if self.basic:
            bolt.prepare(conf, context)
        else:
            bolt.prepare(conf, context, self.collector)

    def close(self) -> None:
        cleanup = getattr(self.bolt, "cleanup", None)
        if cleanup is not None:
            cleanup()


class CoordinatedBolt(BatchBolt):
    """One request's try of a linear DRPC bolt's task."""

    def __init__(self, bolt: Any, last: bool) -> None:
        self.bolt, self.last = bolt, last
        self.outputs = getattr(bolt, "outputs", ())
        self._resources: Any = None

    def use_worker_resources(self, resources: Any) -> None:
        self._resources = resources

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, batch_id: Any) -> None:
        self.request_id, self.target, self.received = int(batch_id), collector, 0
        self.results: list[list[Any]] = []
        if isinstance(self.bolt, BatchBolt):  # one instance per request
            self.task = None
            self.collector = _Collector()
            self._point(self.collector)
            self.bolt.prepare(conf, context, self.collector, self.request_id)
            return
        key = ("linear-drpc", context.component_id, context.task_id)
        self.task = self._resources.get(key, lambda: _TaskBolt(self.bolt, conf, context))

    def _point(self, collector: _Collector) -> None:
        collector.target = self.target
        collector.results = self.results if self.last and self.received else None

    def execute(self, tup: Any) -> None:
        self.received += 1
        if self.task is None:
            self._point(self.collector)
            self.bolt.execute(tup)
            return
        with self.task.lock:
            self._point(self.task.collector)
            if self.task.basic:
                self.task.bolt.execute(tup, self.task.collector)
            else:
                self.task.bolt.execute(tup)

    def finish_batch(self) -> None:
        bolt = self.bolt if self.task is None else self.task.bolt
        collector = self.collector if self.task is None else self.task.collector
        with self.task.lock if self.task is not None else _NO_LOCK:
            self._point(collector)
            if self.task is None:
                bolt.finish_batch()
            if isinstance(bolt, FinishedCallback):
                bolt.finished_id(self.request_id)
        if self.results:  # only a task that had tuples of the request answers it
            self.target.captured.extend(self.results)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_LOCK = _NoLock()


class LinearDRPCInputDeclarer:
    """How a bolt reads the bolt before it (shuffle unless told)."""

    def __init__(self) -> None:
        self.grouping: Grouping = ShuffleGrouping()

    def shuffle_grouping(self) -> LinearDRPCInputDeclarer:
        self.grouping = ShuffleGrouping()
        return self

    def fields_grouping(self, fields: Any) -> LinearDRPCInputDeclarer:
        self.grouping = FieldsGrouping(as_fields(fields))
        return self

    def global_grouping(self) -> LinearDRPCInputDeclarer:
        self.grouping = GlobalGrouping()
        return self

    def all_grouping(self) -> LinearDRPCInputDeclarer:
        self.grouping = AllGrouping()
        return self

    def none_grouping(self) -> LinearDRPCInputDeclarer:
        self.grouping = NoneGrouping()
        return self

    def local_or_shuffle_grouping(self) -> LinearDRPCInputDeclarer:
        self.grouping = LocalOrShuffleGrouping()
        return self

    def custom_grouping(self, grouping: Grouping) -> LinearDRPCInputDeclarer:
        self.grouping = grouping
        return self


class LinearDRPCTopologyBuilder:
    """DRPC over a chain of bolts: ``add_bolt`` each in turn, then ``create_local_topology(drpc)`` (a
    ``LocalDRPC``) or ``create_remote_topology()`` (the DRPC servers of ``drpc.servers``)."""

    def __init__(self, function: str) -> None:
        if not isinstance(function, str) or not function:
            raise ValueError(f"LinearDRPCTopologyBuilder: the function must be a non-empty string, got {function!r}")
        self.function = function
        self._bolts: list[tuple[Any, int, LinearDRPCInputDeclarer]] = []

    def add_bolt(self, bolt: Any, parallelism: int = 1) -> LinearDRPCInputDeclarer:
        declarer = LinearDRPCInputDeclarer()
        self._bolts.append((bolt, parallelism, declarer))
        return declarer

    def create_local_topology(self, drpc: Any) -> TransactionalTopology:
        return self._build(drpc)

    def create_remote_topology(self) -> TransactionalTopology:
        return self._build(None)

    def _build(self, source: Any) -> TransactionalTopology:
        if not self._bolts:
            raise InvalidTopologyError(f"linear DRPC topology {self.function!r}: add a bolt first")
        last_fields = list(as_fields(getattr(self._bolts[-1][0], "outputs", ())))
        if len(last_fields) != 2:
            raise InvalidTopologyError(
                f"linear DRPC topology {self.function!r}: the last bolt must output two fields, the request id "
                f"and the result; it declares {last_fields}"
            )
        builder = TransactionalTopologyBuilder(f"linear-drpc-{self.function}", None, None)
        previous = f"drpc-{self.function}"
        builder.set_request_spout(previous, self.function, source, with_id=True, result=VALUE)
        for i, (bolt, parallelism, declarer) in enumerate(self._bolts):
            component = f"bolt{i}"
            wrapped = CoordinatedBolt(bolt, last=i == len(self._bolts) - 1)
            declared = builder.set_bolt(component, wrapped, parallelism)
            if isinstance(declarer.grouping, FieldsGrouping):  # checked against the fields the bolt before declares
                declared.fields_grouping(previous, declarer.grouping.fields)
            else:
                declared.custom_grouping(previous, declarer.grouping)
            previous = component
        return builder.build()
