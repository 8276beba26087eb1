"""From a Trident graph to bolts: Storm's ``TridentTopology.build()``, onto squall's transactional runtime.

1. Groups: every chain of operations with no repartition between them becomes one bolt (Storm's
   ``GraphGrouper.mergeFully``).
2. An edge between two groups with no repartition on it sends task *i*'s tuples to task *i* (an identity
   partition); groups joined so, and the spout with its first groups, have one parallelism: the largest hint among
   them, capped by the spout's ``topology.max.task.parallelism``.
3. Streams: one per repartition (or identity edge) and reading bolt, with the grouping the user asked for;
   ``batch_global`` and identity edges are direct emits, chosen by the emitting task.
4. Each group is a ``SubtopologyBolt``; a group holding a ``partition_persist`` is a committer, so its batch ends
   in the commit phase, in txid order. Bolt ids are ``b-<n>`` followed by the group's ``name(...)``s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.model.config import TOPOLOGY_MAX_TASK_PARALLELISM
from squall.model.errors import InvalidTopologyError
from squall.model.fields import Fields
from squall.transactional.builder import TransactionalTopology, TransactionalTopologyBuilder
from squall.trident.bolt import GroupPlan, Root, SubtopologyBolt
from squall.trident.graph import OPERATION, PARTITION, SPOUT, Node
from squall.trident.processors import Bridge
from squall.trident.spouts import BatchSpout, BatchSpoutEmitter, spout_fields

SPOUT_STREAM = "default"


@dataclass(eq=False)
class Group:
    nodes: list[Node]
    id: str = ""
    parallelism: int = 1
    outputs: dict[str, list[str]] = field(default_factory=dict)
    inputs: list[tuple[str, str, tuple]] = field(default_factory=list)  # (source, stream, grouping)
    roots: dict[tuple[str, str], Root] = field(default_factory=dict)

    @property
    def first(self) -> int:
        return min(n.id for n in self.nodes)


def _merge_fully(ops: list[Node]) -> dict[Node, Group]:
    """Storm's rule: a group with exactly one other group downstream (or upstream) of it, with no repartition
    between, is merged with it; until nothing changes."""
    group_of = {n: Group([n]) for n in ops}

    def others(g: Group, neighbours: str) -> set[Group | None]:
        found: set[Group | None] = set()
        for n in g.nodes:
            for m in getattr(n, neighbours):
                other = group_of.get(m)
                if other is not g:
                    found.add(other)
        return found

    changed = True
    while changed:
        changed = False
        for g in sorted(set(group_of.values()), key=lambda g: g.first):
            for neighbours in ("children", "parents"):
                near = others(g, neighbours)
                if len(near) == 1 and None not in near:
                    (other,) = near
                    other.nodes.extend(g.nodes)
                    for n in g.nodes:
                        group_of[n] = other
                    changed = True
                    break
            if changed:
                break
    for g in group_of.values():
        g.nodes.sort(key=lambda n: n.id)
    return group_of


class _Classes:
    """Union-find of the groups (and the spout) that must have one parallelism."""

    def __init__(self) -> None:
        self.up: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.up.setdefault(x, x)
        while self.up[x] is not x:
            x = self.up[x]
        return x

    def union(self, a: Any, b: Any) -> None:
        self.up[self.find(a)] = self.find(b)


def plan(nodes: list[Node], conf: Mapping[str, Any] | None = None) -> TransactionalTopology:
    spouts = [n for n in nodes if n.kind == SPOUT]
    if not spouts:
        raise InvalidTopologyError("a Trident topology needs a stream: call new_stream(txid, spout)")
    (spout,) = spouts
    ops = [n for n in nodes if n.kind == OPERATION]
    if not ops:
        raise InvalidTopologyError(f"Trident stream {spout.txid!r} has no operation")
    group_of = _merge_fully(ops)
    groups = sorted(set(group_of.values()), key=lambda g: g.first)

    # identity edges, and the classes of one parallelism
    classes = _Classes()
    identity: list[tuple[Node, Node]] = []
    for n in nodes:
        if n.kind == PARTITION:
            continue
        for c in n.children:
            if c.kind == OPERATION and (n.kind == SPOUT or group_of[n] is not group_of[c]):
                identity.append((n, c))
                classes.union(spout if n.kind == SPOUT else group_of[n], group_of[c])
    hints: dict[Any, int] = {}
    for g in groups:
        own = [n.parallelism for n in g.nodes if n.parallelism]
        own += [p.parallelism for n in g.nodes for p in n.parents if p.kind == PARTITION and p.parallelism]
        if own:
            root = classes.find(g)
            hints[root] = max(hints.get(root, 1), *own)
    if spout.parallelism:
        root = classes.find(spout)
        hints[root] = max(hints.get(root, 1), spout.parallelism)
    cap = _max_parallelism(spout.spout)
    spout_class = classes.find(spout)
    for g in groups:
        root = classes.find(g)
        g.parallelism = hints.get(root, 1)
        if root is spout_class and cap:
            g.parallelism = min(g.parallelism, cap)
    spout_tasks = min(hints.get(spout_class, 1), cap) if cap else hints.get(spout_class, 1)

    # ids
    spout_id = f"spout-{spout.txid}"
    for i, g in enumerate(groups):
        names = list(dict.fromkeys(n.name for n in g.nodes if n.name))
        g.id = "-".join([f"b-{i}", *names])

    # streams, bridges and roots
    user_fields, skip = spout_fields(spout.spout)
    streams = 0

    def reads(reader: Group, source: str, stream: str, fields: Fields, skip_: int, grouping: tuple) -> Root:
        key = (source, stream)
        if key in reader.roots:
            if (source, stream, grouping) not in reader.inputs:
                raise InvalidTopologyError(
                    f"bolt {reader.id!r} would read {source!r}'s stream {stream!r} twice, under two groupings; "
                    "add an operation (each, project) on one of the two paths"
                )
            return reader.roots[key]
        reader.inputs.append((source, stream, grouping))
        root = reader.roots[key] = Root(tuple(fields), skip_)
        return root

    def bridge(source: Group, node: Node, reader: Group, grouping: tuple) -> str:
        nonlocal streams
        streams += 1
        stream = f"s{streams}"
        source.outputs[stream] = list(node.fields)
        mode = {"batch_global": "batch", "identity": "same"}.get(grouping[0], "route")
        node.processor.children.append((Bridge(-streams, f"{source.id} to {reader.id}", stream, mode, reader.id), 0))
        return stream

    for g in groups:
        for n in g.nodes:
            for c in n.children:
                if c.kind == OPERATION and group_of[c] is g:
                    n.processor.children.append((c.processor, c.parents.index(n)))
    bridge_processors: dict[Group, list[Any]] = {g: [] for g in groups}
    for n in nodes:
        for c in n.children:
            if c.kind == OPERATION and (n, c) in identity:
                targets, via, grouping = [c], n, ("identity",)
            elif c.kind == PARTITION:
                targets, via, grouping = [cc for cc in c.children if cc.kind == OPERATION], c, c.grouping
            else:
                continue
            by_reader: dict[Group, list[Node]] = {}
            for target in targets:
                by_reader.setdefault(group_of[target], []).append(target)
            for reader, readers in by_reader.items():
                if n.kind == SPOUT:
                    spout_grouping = {"identity": ("local_or_shuffle",), "batch_global": ("global",)}.get(
                        grouping[0], grouping
                    )
                    root = reads(reader, spout_id, SPOUT_STREAM, user_fields, skip, spout_grouping)
                else:
                    source = group_of[n]
                    stream = bridge(source, n, reader, grouping)
                    bridge_processors[source].append(n.processor.children[-1][0])
                    root = reads(reader, source.id, stream, n.fields, 0, grouping)
                for target in readers:
                    root.receivers.append((target.processor, target.parents.index(via)))

    builder = TransactionalTopologyBuilder(spout.txid, spout_id, _emitter(spout.spout, spout_tasks), spout_tasks)
    for g in groups:
        processors = [n.processor for n in g.nodes] + bridge_processors[g]
        bolt = SubtopologyBolt(GroupPlan(g.id, processors, g.roots), g.outputs)
        committer = any(n.committer for n in g.nodes)
        declarer = (builder.set_committer_bolt if committer else builder.set_bolt)(g.id, bolt, g.parallelism)
        for source, stream, grouping in g.inputs:
            _subscribe(declarer, source, stream, grouping)
    return builder.build(dict(conf or {}))


def _max_parallelism(spout: Any) -> int | None:
    own = getattr(spout, "get_component_configuration", None)
    conf = own() if callable(own) else None
    return (conf or {}).get(TOPOLOGY_MAX_TASK_PARALLELISM)


def _emitter(spout: Any, tasks: int) -> Any:
    return BatchSpoutEmitter(spout, tasks) if isinstance(spout, BatchSpout) else spout


def _subscribe(declarer: Any, source: str, stream: str, grouping: tuple) -> None:
    kind = grouping[0]
    if kind == "shuffle":
        declarer.shuffle_grouping(source, stream)
    elif kind == "local_or_shuffle":
        declarer.local_or_shuffle_grouping(source, stream)
    elif kind == "fields":
        declarer.fields_grouping(source, grouping[1], stream)
    elif kind == "all":
        declarer.all_grouping(source, stream)
    elif kind == "global":
        declarer.global_grouping(source, stream)
    elif kind in ("batch_global", "identity"):
        declarer.direct_grouping(source, stream)
    elif kind == "custom":
        declarer.custom_grouping(source, grouping[1], stream)
    else:
        raise InvalidTopologyError(f"unknown repartition {kind!r}")
