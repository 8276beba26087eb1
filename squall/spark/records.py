"""The checks every emit goes through, and where plain emits are routed.

What then travels between tasks is a ``protocol.Batch``.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import uuid
from collections.abc import Sequence
from typing import Any

from pyspark import cloudpickle

from squall.model.attempt import TransactionAttempt
from squall.model.components import DEFAULT_STREAM
from squall.model.errors import SquallError
from squall.model.fields import Fields
from squall.model.groupings import Grouping, LocalOrShuffleGrouping, NoneGrouping, Picker, ShuffleGrouping
from squall.model.topology import Topology
from squall.model.tuple import TICK_STREAM
from squall.spark.load import LoadAwareShuffle, TaskWeights

TICK_FIELDS = Fields("rate_secs")


class SerializationError(SquallError, TypeError):
    """An emitted value that cannot be sent between tasks."""


class EmitError(SquallError, ValueError):
    """An emit that does not match what the component declared."""


_SAFE_SCALARS = (
    str,
    int,
    float,
    bool,
    bytes,
    type(None),
    datetime.date,
    datetime.time,
    datetime.timedelta,
    decimal.Decimal,
    uuid.UUID,
)


# Values carried without a check: collectors._plain_values checks the same types.
PLAIN_TYPES = frozenset({str, int, float, bool, bytes, type(None), TransactionAttempt})


def _serializable(value: Any, depth: int = 0) -> bool:
    if type(value) in PLAIN_TYPES or isinstance(value, _SAFE_SCALARS):
        return True
    if depth < 3 and isinstance(value, (tuple, list, set, frozenset)):
        return all(_serializable(v, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict):
        return all(_serializable(k, depth + 1) and _serializable(v, depth + 1) for k, v in value.items())
    try:  # as frames pickle it: instances of classes shipped by value (a test module's, a script's) travel too
        cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    return True


def check_emit(topology: Topology, component: str, stream: str, values: Any) -> tuple:
    """The values as a tuple, or an error naming the component, stream and field at fault."""
    streams = topology.components[component].streams
    if stream not in streams:
        raise EmitError(
            f"component {component!r} emitted on undeclared stream {stream!r}; "
            f"it declares {sorted(streams) or 'no streams'}"
        )
    if not isinstance(values, (list, tuple)):
        raise EmitError(
            f"component {component!r} emitted {type(values).__name__} on stream {stream!r}: "
            "values must be a list or tuple"
        )
    fields = streams[stream]
    if len(values) != len(fields):
        raise EmitError(
            f"component {component!r} emitted {len(values)} value(s) on stream {stream!r}, "
            f"which declares {len(fields)} field(s) {list(fields)}"
        )
    for name, value in zip(fields, values, strict=True):
        if type(value) not in PLAIN_TYPES and not _serializable(value):
            raise SerializationError(
                f"component {component!r} emitted on stream {stream!r} a value that cannot be "
                f"serialized: field {name!r} is a {type(value).__name__} ({value!r:.60})"
            )
    return tuple(values)


class EmitChecker:
    """``check_emit`` for one component, with a fast path: plain values of the declared arity pass at once."""

    def __init__(self, topology: Topology, component: str) -> None:
        self._topology, self._component = topology, component
        self.arity = {stream: len(fields) for stream, fields in topology.components[component].streams.items()}

    def __call__(self, stream: str, values: Any) -> tuple:
        if (
            type(values) in (tuple, list)
            and self.arity.get(stream) == len(values)
            and PLAIN_TYPES.issuperset(map(type, values))
        ):
            return tuple(values)
        return check_emit(self._topology, self._component, stream, values)

    def many(self, stream: str, rows: Sequence[Any]) -> list[tuple]:
        """Each of ``rows`` checked as ``__call__`` checks one."""
        return [self(stream, values) for values in rows]


def direct_target(topology: Topology, component: str, stream: str, task: int) -> str:
    """The bolt that receives ``emit_direct(task, ...)`` on ``stream``; errors name what is wrong."""
    if not topology.is_direct_stream(component, stream):
        raise EmitError(
            f"component {component!r} called emit_direct on stream {stream!r}, "
            "which no bolt subscribes to with direct_grouping"
        )
    for bolt, _ in topology.subscribers(component, stream):
        if task in topology.task_ids(bolt):
            return bolt
    readers = {b: list(topology.task_ids(b)) for b, _ in topology.subscribers(component, stream)}
    raise EmitError(
        f"component {component!r} called emit_direct to task {task} on stream {stream!r}, "
        f"which is not a task of a subscriber: {readers}"
    )


class Routes:
    """Where a task's plain emits go, per stream: the subscribers and their groupings' routers."""

    def __init__(
        self,
        topology: Topology,
        component: str,
        task: int,
        local_tasks: frozenset[int] = frozenset(),
        weights: TaskWeights | None = None,
    ) -> None:
        self._topology, self._component, self._task = topology, component, task
        self._local_tasks = local_tasks  # tasks in this task's worker: local_or_shuffle keeps to them
        self._weights = weights  # the workers' load weights: shuffles are load-aware (``load.py``)
        self._by_stream: dict[str, list[tuple[str, Any]]] = {}
        self._pickers: dict[str, Picker | None] = {}
        self._sole: dict[str, int | None] = {}  # stream -> its picker's only candidate task, if it has one

    def _routers(self, stream: str) -> list[tuple[str, Any]]:
        topology, component = self._topology, self._component
        if topology.is_direct_stream(component, stream):
            raise EmitError(f"component {component!r} emitted on direct stream {stream!r}; use emit_direct(task, ...)")
        fields = topology.stream_fields(component, stream)
        routers = [
            (bolt, sub.grouping.router(self._task, self._candidates(bolt, sub.grouping), fields))
            for bolt, sub in topology.subscribers(component, stream)
        ]
        self._by_stream[stream] = routers
        return routers

    def _candidates(self, bolt: str, grouping: Any) -> tuple[int, ...]:
        tasks = self._topology.task_ids(bolt)
        local = tuple(t for t in tasks if t in self._local_tasks)
        if isinstance(grouping, LocalOrShuffleGrouping):
            return local or tasks
        if self._weights is not None and type(grouping) in (ShuffleGrouping, NoneGrouping):
            return local if local and self._spread_alike(len(local), len(tasks)) else tasks
        return tasks

    def _spread_alike(self, local: int, targets: int) -> bool:
        """Whether a load-aware shuffle may keep to its ``local`` targets in this worker (of ``targets``): Storm 2's
        shuffle starts in its worker (``LoadAwareShuffleGrouping``'s ``WORKER_LOCAL`` scope), and squall's does
        where that moves no work between workers, this worker holding the same share of the emitting component's
        tasks as of the targets. Otherwise (a spout's worker, say) the shuffle deals over every target by the
        workers' load weights."""
        sources = self._topology.task_ids(self._component)
        here = sum(1 for t in sources if t in self._local_tasks)
        return here * targets == local * len(sources)

    def picker(self, stream: str) -> Picker | None:
        """For a stream read by one bolt whose grouping sends each tuple to one task: values -> that task."""
        try:
            return self._pickers[stream]
        except KeyError:
            pass
        topology, component = self._topology, self._component
        pick = sole = None
        subscribers = topology.subscribers(component, stream)
        if len(subscribers) == 1 and not topology.is_direct_stream(component, stream):
            ((bolt, sub),) = subscribers
            grouping = sub.grouping
            if type(grouping).router is Grouping.router:  # a subclass that routes its own way is asked
                fields = topology.stream_fields(component, stream)
                candidates = self._candidates(bolt, grouping)
                if self._weights is not None and type(grouping) in (ShuffleGrouping, NoneGrouping):
                    pick = LoadAwareShuffle(self._task, candidates, self._weights)
                else:
                    pick = grouping.picker(self._task, candidates, fields)
                if pick is not None and len(candidates) == 1:
                    (sole,) = candidates
        self._pickers[stream], self._sole[stream] = pick, sole
        return pick

    def constant_target(self, stream: str) -> int | None:
        """The one task every plain emit on ``stream`` goes to, when its picker has a single candidate."""
        self.picker(stream)
        return self._sole[stream]

    def targets(self, stream: str, values: Sequence) -> list[tuple[str, int]]:
        """``[(bolt, target_task), ...]`` for a plain emit of ``values`` on ``stream``."""
        routers = self._by_stream.get(stream)
        if routers is None:
            routers = self._routers(stream)
        return [(bolt, t) for bolt, router in routers for t in router(values)]


__all__ = [
    "DEFAULT_STREAM",
    "TICK_STREAM",
    "EmitChecker",
    "PLAIN_TYPES",
    "EmitError",
    "SerializationError",
    "check_emit",
    "Routes",
    "direct_target",
]
