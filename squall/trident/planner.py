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

from squall.model.components import Spout
from squall.model.config import TOPOLOGY_MAX_TASK_PARALLELISM, TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS
from squall.model.errors import InvalidTopologyError
from squall.model.fields import Fields
from squall.transactional.builder import TransactionalTopology, TransactionalTopologyBuilder
from squall.trident.bolt import GroupPlan, Root, SubtopologyBolt
from squall.trident.builtin import Count, Sum
from squall.trident.graph import OPERATION, PARTITION, SPOUT, Node
from squall.trident.impl import CombinerPartial
from squall.trident.processors import Bridge, EachFunction, FusedCount, PartitionAggregate, Results
from squall.trident.spouts import BatchSpout, BatchSpoutEmitter, RichSpoutEmitter, spout_fields

SPOUT_STREAM = "default"
EMIT_INTERVAL_MILLIS = 50  # a batch begins at most this often unless the config says otherwise (Storm's LocalCluster's)


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
        raise InvalidTopologyError(
            "a Trident topology needs a stream: call new_stream(txid, spout) or new_drpc_stream(function, drpc)"
        )
    data = next((n for n in spouts if n.function is None), None)
    ops = [n for n in nodes if n.kind == OPERATION]
    last_of = _batch_groups(nodes, spouts)
    group_of = _merge_fully(ops)
    groups = sorted(set(group_of.values()), key=lambda g: g.first)

    # identity edges and colocated queries, and the classes of one parallelism they make
    classes = _Classes()
    identity: list[tuple[Node, Node]] = []
    for n in nodes:
        if n.kind == PARTITION:
            continue
        for c in n.children:
            if c.kind == OPERATION and (n.kind == SPOUT or group_of[n] is not group_of[c]):
                identity.append((n, c))
                classes.union(n if n.kind == SPOUT else group_of[n], group_of[c])
    for n in ops:
        if n.colocate is not None:  # a query runs where the state it reads is kept: same tasks, same workers
            classes.union(group_of[n], group_of[n.colocate])
    hints: dict[Any, int] = {}
    for g in groups:
        own = [n.parallelism for n in g.nodes if n.parallelism]
        own += [p.parallelism for n in g.nodes for p in n.parents if p.kind == PARTITION and p.parallelism]
        if own:
            root = classes.find(g)
            hints[root] = max(hints.get(root, 1), *own)
    caps: dict[Any, int] = {}
    for spout in spouts:
        root = classes.find(spout)
        if spout.parallelism:
            hints[root] = max(hints.get(root, 1), spout.parallelism)
        cap = _max_parallelism(spout.spout) if spout.function is None else None
        if cap:
            caps[root] = min(caps.get(root, cap), cap)
    for g in groups:
        root = classes.find(g)
        g.parallelism = min(hints.get(root, 1), caps.get(root, hints.get(root, 1)))
    if data is not None:
        root = classes.find(data)
        data_tasks = min(hints.get(root, 1), caps.get(root, hints.get(root, 1)))

    # ids
    spout_ids = {s: f"spout-{s.txid}" if s.function is None else f"drpc-{s.function}" for s in spouts}
    for i, g in enumerate(groups):
        names = list(dict.fromkeys(n.name for n in g.nodes if n.name))
        g.id = "-".join([f"b-{i}", *names])

    # streams, bridges and roots
    streams = 0

    def reads(reader: Group, source: str, stream: str, fields: Fields, skip: int, grouping: tuple) -> Root:
        key = (source, stream)
        if key in reader.roots:
            if (source, stream, grouping) not in reader.inputs:
                raise InvalidTopologyError(
                    f"bolt {reader.id!r} would read {source!r}'s stream {stream!r} twice, under two groupings; "
                    "add an operation (each, project) on one of the two paths"
                )
            return reader.roots[key]
        reader.inputs.append((source, stream, grouping))
        root = reader.roots[key] = Root(tuple(fields), skip)
        return root

    extra: dict[Group, list[Any]] = {g: [] for g in groups}  # processors beyond the group's nodes

    def bridge(source: Group, node: Node, reader: Group, grouping: tuple) -> str:
        nonlocal streams
        streams += 1
        stream = f"s{streams}"
        source.outputs[stream] = list(node.fields)
        mode = {"batch_global": "batch", "identity": "same"}.get(grouping[0], "route")
        out = Bridge(-streams, f"{source.id} to {reader.id}", stream, mode, reader.id)
        node.processor.children.append((out, 0))
        extra[source].append(out)
        return stream

    for g in groups:
        _fuse(g)
        for n in g.nodes:
            for c in n.children:
                if c.kind == OPERATION and group_of[c] is g and c.processor is not n.processor:
                    n.processor.children.append((c.processor, c.parents.index(n)))
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
                    fields, skip = spout_fields(n.spout) if n.function is None else (n.fields, 0)
                    root = reads(reader, spout_ids[n], SPOUT_STREAM, fields, skip, spout_grouping)
                else:
                    source = group_of[n]
                    stream = bridge(source, n, reader, grouping)
                    root = reads(reader, source.id, stream, n.fields, 0, grouping)
                for target in readers:
                    root.receivers.append((target.processor, target.parents.index(via)))
    for spout, last in last_of.items():  # what a DRPC stream's last operation emits is its request's result
        results = Results(-1, f"results of {spout.function!r}")
        last.processor.children.append((results, 0))
        extra[group_of[last]].append(results)

    if data is not None:
        builder = TransactionalTopologyBuilder(data.txid, spout_ids[data], _emitter(data.spout, data_tasks), data_tasks)
    else:
        builder = TransactionalTopologyBuilder("drpc-" + "-".join(s.function for s in spouts), None, None)
    for spout in spouts:
        if spout.function is not None:
            builder.set_request_spout(spout_ids[spout], spout.function, spout.spout)
    for g in groups:
        processors = list(dict.fromkeys(n.processor for n in g.nodes)) + extra[g]
        bolt = SubtopologyBolt(GroupPlan(g.id, processors, g.roots), g.outputs)
        committer = any(n.committer for n in g.nodes)
        declarer = (builder.set_committer_bolt if committer else builder.set_bolt)(g.id, bolt, g.parallelism)
        for source, stream, grouping in g.inputs:
            _subscribe(declarer, source, stream, grouping)
    return builder.build({TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS: EMIT_INTERVAL_MILLIS, **(conf or {})})


def _batch_groups(nodes: list[Node], spouts: list[Node]) -> dict[Node, Node]:
    """Each DRPC stream's last operation. The nodes joined (by any edge) to a spout are its batch group; one
    group holds one spout."""
    parts = _Classes()
    for n in nodes:
        for p in n.parents:
            parts.union(n, p)
    owner: dict[Any, Node] = {}
    for spout in spouts:
        root = parts.find(spout)
        if root in owner:
            other = owner[root]
            raise InvalidTopologyError(
                f"the streams of {_spout_name(other)} and {_spout_name(spout)} meet (merge, join); a Trident "
                "topology cannot mix the batches of two spouts"
            )
        owner[root] = spout
    last_of: dict[Node, Node] = {}
    for spout in spouts:
        if spout.function is None:
            continue
        last = max((n for n in nodes if parts.find(n) is parts.find(spout)), key=lambda n: n.id)
        if last.kind != OPERATION:
            raise InvalidTopologyError(
                f"the DRPC stream of {spout.function!r} must end with an operation (each, project, aggregate, "
                "state_query), not a repartition"
            )
        last_of[spout] = last
    return last_of


def _spout_name(spout: Node) -> str:
    return f"new_stream({spout.txid!r})" if spout.function is None else f"new_drpc_stream({spout.function!r})"


def _fuse(group: Group) -> None:
    """A function whose one consumer is a grouped ``Count`` or ``Sum`` over the function's own fields (the first
    half of ``group_by(...).aggregate`` or ``persistent_aggregate``) runs fused with it (``FusedCount``)."""
    for n in group.nodes:
        if not isinstance(n.processor, EachFunction) or len(n.children) != 1:
            continue
        (c,) = n.children
        agg = c.processor
        if c.kind != OPERATION or c not in group.nodes or c.parents != [n] or not isinstance(agg, PartitionAggregate):
            continue
        if not isinstance(agg.agg, CombinerPartial) or type(agg.agg.agg) not in (Count, Sum):
            continue
        base = n.processor.base
        if not agg.group_positions or min(agg.group_positions) < base:
            continue
        value_at = None
        if type(agg.agg.agg) is Sum:
            if agg.positions is None or agg.positions[0] < base:
                continue
            value_at = agg.positions[0] - base
        fused = FusedCount(n.processor, agg, [p - base for p in agg.group_positions], value_at)
        n.processor = c.processor = fused


def _max_parallelism(spout: Any) -> int | None:
    own = getattr(spout, "get_component_configuration", None)
    conf = own() if callable(own) else None
    return (conf or {}).get(TOPOLOGY_MAX_TASK_PARALLELISM)


def _emitter(spout: Any, tasks: int) -> Any:
    if isinstance(spout, BatchSpout):
        return BatchSpoutEmitter(spout, tasks)
    if isinstance(spout, Spout):
        return RichSpoutEmitter(spout, tasks)
    return spout


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
