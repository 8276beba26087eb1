"""The built topology: components, their tasks, streams and subscriptions.

Built by ``TopologyBuilder.build()``, immutable afterwards, and free of any
knowledge of how it will be executed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from squall.model.errors import InvalidTopologyError
from squall.model.fields import Fields
from squall.model.groupings import Grouping


class GlobalStreamId(NamedTuple):
    """A stream named by the component that emits it, as Storm's ``GlobalStreamId``."""

    component_id: str
    stream_id: str


@dataclass(frozen=True)
class Subscription:
    """A bolt's input: ``source``'s ``stream``, routed by ``grouping``."""

    source: str
    stream: str
    grouping: Grouping


@dataclass(frozen=True)
class ComponentSpec:
    id: str
    kind: str  # "spout" or "bolt"
    obj: Any
    parallelism: int
    streams: Mapping[str, Fields]
    inputs: tuple[Subscription, ...] = ()
    conf: Mapping[str, Any] = field(default_factory=dict)
    tasks: tuple[int, ...] = ()
    # ``check(obj, id, config)``: the declaration's config checks (a windowed bolt's), run again at submit
    check: Callable[[Any, str, Mapping[str, Any]], None] | None = field(default=None, compare=False)


class Topology:
    def __init__(self, components: dict[str, ComponentSpec], conf: Mapping[str, Any]) -> None:
        self.components = components
        self.conf = dict(conf)
        self._task_component = {t: c.id for c in components.values() for t in c.tasks}
        self._subscribers: dict[tuple[str, str], list[tuple[str, Subscription]]] = {}
        for comp in components.values():
            for sub in comp.inputs:
                self._subscribers.setdefault((sub.source, sub.stream), []).append((comp.id, sub))

    def check_run_config(self, conf: Mapping[str, Any]) -> None:
        """The declarations' config checks again, with the config the topology runs with: a window checked at
        ``build()`` against one message timeout may be submitted with another. Raises
        ``InvalidTopologyError`` naming the component."""
        for spec in self.components.values():
            if spec.check is not None:
                spec.check(spec.obj, spec.id, {**conf, **spec.conf})

    def with_objects(self, objects: Mapping[str, Any]) -> Topology:
        """The same topology with some components' spout or bolt objects swapped."""
        unknown = set(objects) - set(self.components)
        if unknown:
            raise KeyError(f"no such component(s): {sorted(unknown)}")
        comps = {cid: replace(c, obj=objects.get(cid, c.obj)) for cid, c in self.components.items()}
        return Topology(comps, self.conf)

    def with_parallelism(self, parallelism: Mapping[str, int]) -> Topology:
        """The same topology with some components' parallelism changed, task ids assigned again as at build."""
        for cid, n in parallelism.items():
            if cid not in self.components:
                raise InvalidTopologyError(f"cannot change the parallelism of {cid!r}: no such component")
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise InvalidTopologyError(f"component {cid!r}: parallelism must be an int >= 1, got {n!r}")
        comps, next_task = {}, 1
        for cid in sorted(self.components):  # task ids by component id, as the builder assigns them
            n = parallelism.get(cid, self.components[cid].parallelism)
            comps[cid] = replace(self.components[cid], parallelism=n, tasks=tuple(range(next_task, next_task + n)))
            next_task += n
        return Topology({cid: comps[cid] for cid in self.components}, self.conf)

    @property
    def spouts(self) -> dict[str, ComponentSpec]:
        return {k: c for k, c in self.components.items() if c.kind == "spout"}

    @property
    def bolts(self) -> dict[str, ComponentSpec]:
        return {k: c for k, c in self.components.items() if c.kind == "bolt"}

    def task_ids(self, component_id: str) -> tuple[int, ...]:
        return self.components[component_id].tasks

    def component_of(self, task_id: int) -> str:
        return self._task_component[task_id]

    @property
    def all_tasks(self) -> list[int]:
        return sorted(self._task_component)

    def subscribers(self, source: str, stream: str) -> list[tuple[str, Subscription]]:
        """``[(bolt_id, subscription), ...]`` reading ``source``'s ``stream``."""
        return list(self._subscribers.get((source, stream), ()))

    def subscribers_of(self, component: str) -> list[tuple[str, Subscription]]:
        """``[(bolt_id, subscription), ...]`` reading any stream of ``component``."""
        return [(b, sub) for (src, _), subs in self._subscribers.items() if src == component for b, sub in subs]

    def reader_tasks(self, component: str) -> list[int]:
        """Every task of every bolt that reads any stream of ``component``, in order."""
        return sorted({t for bolt, _ in self.subscribers_of(component) for t in self.task_ids(bolt)})

    def sources_of(self, bolt: str) -> list[str]:
        """The distinct components a bolt reads from (a bolt may read several streams of one)."""
        return list(dict.fromkeys(sub.source for sub in self.components[bolt].inputs))

    def stream_fields(self, component_id: str, stream: str) -> Fields:
        return self.components[component_id].streams[stream]

    def is_direct_stream(self, component_id: str, stream: str) -> bool:
        return any(sub.grouping.is_direct for _, sub in self.subscribers(component_id, stream))

    def topological_order(self) -> list[str]:
        """Component ids, every component after all of its sources."""
        order: list[str] = []
        done: set[str] = set()

        def visit(cid: str) -> None:
            if cid in done:
                return
            done.add(cid)
            for sub in self.components[cid].inputs:
                visit(sub.source)
            order.append(cid)

        for cid in sorted(self.components):
            visit(cid)
        return order

    def describe(self) -> str:
        lines = []
        for cid in self.topological_order():
            c = self.components[cid]
            inputs = ", ".join(f"{s.source}/{s.stream} via {s.grouping!r}" for s in c.inputs)
            streams = "; ".join(f"{s}{list(f)}" for s, f in c.streams.items()) or "(none)"
            lines.append(
                f"{c.kind:5} {cid:<16} tasks {list(c.tasks)}  emits {streams}" + (f"  reads {inputs}" if inputs else "")
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class TopologyContext:
    """What a task knows about itself and the topology: Storm's ``TopologyContext``.

    Handed to ``open`` (a spout), ``prepare`` (a bolt, a windowed bolt, a batch bolt) once per task instance,
    on the thread that runs the task. It is immutable and reads only the built topology, so it may be kept for
    the task's life and read from any thread. ``component_id`` and ``task_id`` (unique in the topology) name the
    task; ``topology`` is the built ``Topology`` it belongs to.
    """

    topology: Topology
    component_id: str
    task_id: int

    @property
    def task_index(self) -> int:
        """This task's index among its component's tasks, 0 to parallelism - 1."""
        return self.topology.task_ids(self.component_id).index(self.task_id)

    def component_tasks(self, component_id: str) -> list[int]:
        """The task ids of ``component_id``, in order: a task's index is its place in the list."""
        return list(self.topology.task_ids(component_id))

    @property
    def this_component_tasks(self) -> list[int]:
        """The task ids of this task's component."""
        return self.component_tasks(self.component_id)

    def output_fields(self, stream: str = "default") -> Fields:
        """The fields this component declares on ``stream``."""
        return self.topology.stream_fields(self.component_id, stream)

    # -- Storm's names -------------------------------------------------------
    def get_this_task_index(self) -> int:
        """This task's index among its component's tasks, 0 to parallelism - 1."""
        return self.task_index

    def get_this_sources(self) -> dict[GlobalStreamId, Grouping]:
        """The streams this component reads, each with the grouping it subscribed with."""
        return {
            GlobalStreamId(sub.source, sub.stream): sub.grouping
            for sub in self.topology.components[self.component_id].inputs
        }

    def get_this_targets(self) -> dict[str, dict[str, Grouping]]:
        """For each stream this component declares: ``{reading component: grouping}``."""
        streams = self.topology.components[self.component_id].streams
        return {
            stream: {bolt: sub.grouping for bolt, sub in self.topology.subscribers(self.component_id, stream)}
            for stream in streams
        }

    def get_component_output_fields(self, component_id: str, stream_id: str = "default") -> Fields:
        """The fields ``component_id`` declares on ``stream_id``."""
        component = self.topology.components.get(component_id)
        if component is None:
            raise KeyError(f"no component {component_id!r} in the topology; it has {sorted(self.topology.components)}")
        if stream_id not in component.streams:
            raise KeyError(
                f"component {component_id!r} declares no stream {stream_id!r}; it declares {sorted(component.streams)}"
            )
        return component.streams[stream_id]
