"""``TopologyBuilder``: declare spouts, bolts and groupings, then ``build()``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.model.components import DEFAULT_STREAM, declared_streams
from squall.model.config import DEFAULTS, check_config
from squall.model.errors import InvalidTopologyError
from squall.model.fields import Fields, as_fields
from squall.model.groupings import (
    AllGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from squall.model.topology import ComponentSpec, Subscription, Topology

DeclarationCheck = Callable[[Any, str, Mapping[str, Any]], None]  # (the component, its id, its config): raises


@dataclass(frozen=True)
class RunsAs:
    """How a kind of bolt runs: as ``wrap(bolt)``, its declaration validated at ``build()`` by ``check``."""

    wrap: Callable[[Any], Any]
    check: DeclarationCheck | None = None


_RUNS_AS: dict[type, RunsAs] = {}


def bolt_runs_as(kind: type, wrap: Callable[[Any], Any], check: DeclarationCheck | None = None) -> None:
    """Bolts of type ``kind`` run as ``wrap(bolt)``, as Storm's ``setBolt(id, IWindowedBolt)`` wraps a windowed
    bolt in its executor; ``check(component, id, config)`` validates such a declaration at ``build()``. The
    windowing package registers ``WindowedBolt`` when it is imported (``import squall`` imports it)."""
    _RUNS_AS[kind] = RunsAs(wrap, check)


@dataclass
class _Declared:
    id: str
    kind: str
    obj: Any
    parallelism: Any
    inputs: list[tuple[str, str, Grouping, Any]] = field(default_factory=list)
    conf: dict[str, Any] = field(default_factory=dict)
    check: DeclarationCheck | None = None


class ComponentDeclarer:
    def __init__(self, declared: _Declared) -> None:
        self._declared = declared

    def add_configuration(self, key: str, value: Any) -> ComponentDeclarer:
        """Component-level config, overriding the topology's for this component."""
        self._declared.conf[key] = value
        return self

    def add_configurations(self, conf: Mapping[str, Any]) -> ComponentDeclarer:
        self._declared.conf.update(conf)
        return self


class SpoutDeclarer(ComponentDeclarer):
    pass


class BoltDeclarer(ComponentDeclarer):
    """Returned by ``set_bolt``; each grouping method subscribes the bolt to a stream."""

    def _subscribe(self, source: str, stream: str, grouping: Grouping, fields: Any = None) -> BoltDeclarer:
        self._declared.inputs.append((source, stream, grouping, fields))
        return self

    def shuffle_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self._subscribe(source, stream, ShuffleGrouping())

    def fields_grouping(
        self, source: str, fields: Fields | str | Iterable[str], stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        try:
            selected = as_fields(fields)
        except (TypeError, ValueError) as exc:
            selected = exc
        grouping = FieldsGrouping(selected) if isinstance(selected, Fields) else None
        return self._subscribe(source, stream, grouping, selected)

    def global_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self._subscribe(source, stream, GlobalGrouping())

    def all_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self._subscribe(source, stream, AllGrouping())

    def none_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self._subscribe(source, stream, NoneGrouping())

    def direct_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self._subscribe(source, stream, DirectGrouping())

    def local_or_shuffle_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self._subscribe(source, stream, LocalOrShuffleGrouping())

    def custom_grouping(self, source: str, grouping: Grouping, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self._subscribe(source, stream, grouping)


class TopologyBuilder:
    def __init__(self) -> None:
        self._declared: list[_Declared] = []

    def set_spout(self, id: str, spout: Any, parallelism: int = 1) -> SpoutDeclarer:
        declared = _Declared(id, "spout", spout, parallelism)
        self._declared.append(declared)
        return SpoutDeclarer(declared)

    def set_bolt(self, id: str, bolt: Any, parallelism: int = 1) -> BoltDeclarer:
        runs_as = next((r for kind, r in _RUNS_AS.items() if isinstance(bolt, kind)), None)
        if runs_as is not None:
            bolt = runs_as.wrap(bolt)
        declared = _Declared(id, "bolt", bolt, parallelism, check=runs_as.check if runs_as is not None else None)
        self._declared.append(declared)
        return BoltDeclarer(declared)

    def build(self, conf: Mapping[str, Any] | None = None) -> Topology:
        """Validate the declarations and return the ``Topology``.

        Raises ``InvalidTopologyError`` (or ``InvalidConfigError``) naming the
        offending component, stream, field or config key.
        """
        check_config(conf)
        by_id = self._check_components()
        streams = {d.id: declared_streams(d.id, d.obj) for d in self._declared}
        for d in self._declared:
            self._check_inputs(d, by_id, streams)
        _check_direct_streams(self._declared)
        _check_acyclic(self._declared)

        components: dict[str, ComponentSpec] = {}
        next_task = 1
        for cid in sorted(by_id):  # task ids by component id, as Storm assigns them
            d = by_id[cid]
            tasks = tuple(range(next_task, next_task + d.parallelism))
            next_task += d.parallelism
            inputs = tuple(Subscription(src, stream, g) for src, stream, g, _ in d.inputs)
            conf_of = {**component_configuration(d), **d.conf}  # the declarer's settings win, as in Storm
            if d.check is not None:
                d.check(d.obj, cid, {**DEFAULTS, **(conf or {}), **conf_of})
            components[cid] = ComponentSpec(
                cid, d.kind, d.obj, d.parallelism, streams[cid], inputs, conf_of, tasks, check=d.check
            )
        order = {d.id: i for i, d in enumerate(self._declared)}
        components = dict(sorted(components.items(), key=lambda kv: order[kv[0]]))
        return Topology(components, conf or {})

    def _check_components(self) -> dict[str, _Declared]:
        by_id: dict[str, _Declared] = {}
        for d in self._declared:
            if not isinstance(d.id, str) or not d.id or d.id.startswith("__"):
                raise InvalidTopologyError(
                    f"{d.kind} id {d.id!r} is invalid: ids are non-empty strings not starting with '__'"
                )
            if d.id in by_id:
                raise InvalidTopologyError(
                    f"duplicate component id {d.id!r}: declared as a {by_id[d.id].kind} and as a {d.kind}"
                )
            by_id[d.id] = d
            p = d.parallelism
            if not isinstance(p, int) or isinstance(p, bool) or p < 1:
                raise InvalidTopologyError(f"{d.kind} {d.id!r}: parallelism must be an int >= 1, got {p!r}")
            check_config(d.conf, where=f"{d.kind} {d.id!r} config")
            check_config(component_configuration(d), where=f"{d.kind} {d.id!r} get_component_configuration()")
            _check_component_type(d)
        return by_id

    @staticmethod
    def _check_inputs(d: _Declared, by_id: dict[str, _Declared], streams: dict[str, dict[str, Fields]]) -> None:
        if d.kind == "bolt" and not d.inputs:
            raise InvalidTopologyError(f"bolt {d.id!r} has no inputs: subscribe it to a stream with a grouping")
        for source, stream, grouping, fields in d.inputs:
            if source not in by_id:
                raise InvalidTopologyError(
                    f"bolt {d.id!r} subscribes to unknown component {source!r}; known: {sorted(by_id)}"
                )
            if stream not in streams[source]:
                raise InvalidTopologyError(
                    f"bolt {d.id!r} subscribes to stream {stream!r} of {source!r}, which {source!r} "
                    f"does not declare; it declares {sorted(streams[source])}"
                )
            if grouping is None:
                raise InvalidTopologyError(
                    f"bolt {d.id!r}: bad fields grouping on {source!r} stream {stream!r}: {fields}"
                )
            if isinstance(grouping, FieldsGrouping):
                declared = streams[source][stream]
                for name in grouping.fields:
                    if name not in declared:
                        raise InvalidTopologyError(
                            f"bolt {d.id!r} groups by field {name!r}, which stream {stream!r} of "
                            f"{source!r} does not declare; its fields are {list(declared)}"
                        )


def _check_component_type(d: _Declared) -> None:
    needed = ("next_tuple",) if d.kind == "spout" else ("execute",)
    for method in needed:
        if not callable(getattr(d.obj, method, None)):
            raise InvalidTopologyError(f"{d.kind} {d.id!r}: {type(d.obj).__name__} has no {method}() method")


def _check_direct_streams(declared: list[_Declared]) -> None:
    kinds: dict[tuple[str, str], set[bool]] = {}
    for d in declared:
        for source, stream, grouping, _ in d.inputs:
            kinds.setdefault((source, stream), set()).add(grouping.is_direct)
    for (source, stream), seen in kinds.items():
        if len(seen) > 1:
            raise InvalidTopologyError(
                f"stream {stream!r} of {source!r} mixes direct_grouping with other groupings; "
                "a stream is either direct or not"
            )


def _check_acyclic(declared: list[_Declared]) -> None:
    sources = {d.id: [src for src, _, _, _ in d.inputs] for d in declared}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(cid: str) -> None:
        state[cid] = 1
        path.append(cid)
        for src in sources[cid]:
            if state.get(src) == 1:
                flow = list(reversed([*path[path.index(src) :], src]))
                raise InvalidTopologyError("topology has a cycle: " + " -> ".join(flow))
            if src not in state:
                visit(src)
        path.pop()
        state[cid] = 2

    for d in declared:
        if d.id not in state:
            visit(d.id)


def component_configuration(d: _Declared) -> dict[str, Any]:
    """The config a component asks for itself (Storm's ``getComponentConfiguration``)."""
    own = getattr(d.obj, "get_component_configuration", None)
    conf = own() if callable(own) else None
    if conf is not None and not isinstance(conf, Mapping):
        raise InvalidTopologyError(f"{d.kind} {d.id!r}: get_component_configuration() must return a dict or None")
    return dict(conf or {})
