"""A topology's graph as text: Mermaid or Graphviz DOT, as ``sparse visualize`` writes it.

Spouts are drawn as rounded nodes, bolts as boxes, each with its parallelism;
each subscription is an edge labelled with its grouping, and its stream when
that is not the default one.
"""

from __future__ import annotations

import json

from squall.model.components import DEFAULT_STREAM
from squall.model.topology import Topology

FORMATS = ("mermaid", "dot")


def edges(topology: Topology) -> list[tuple[str, str, str, str]]:
    """``(source, target, stream, grouping)`` of every subscription, in declaration order."""
    return [
        (sub.source, cid, sub.stream, repr(sub.grouping))
        for cid, spec in topology.components.items()
        for sub in spec.inputs
    ]


def _label(source_stream: str, grouping: str) -> str:
    return grouping if source_stream == DEFAULT_STREAM else f"{source_stream}: {grouping}"


def _node(cid: str, parallelism: int) -> str:
    return f"{cid} ({parallelism} task{'s' if parallelism != 1 else ''})"


def _mermaid_text(text: str) -> str:
    """A quoted Mermaid label: any component id or stream name is safe in it."""
    return '"' + text.replace("#", "#35;").replace('"', "#quot;") + '"'


def _dot_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def to_mermaid(topology: Topology) -> str:
    ids = {cid: f"c{i}" for i, cid in enumerate(topology.components)}
    lines = ["flowchart LR"]
    for cid, spec in topology.components.items():
        text = _mermaid_text(_node(cid, spec.parallelism))
        lines.append(f"    {ids[cid]}([{text}])" if spec.kind == "spout" else f"    {ids[cid]}[{text}]")
    for source, target, stream, grouping in edges(topology):
        lines.append(f"    {ids[source]} -->|{_mermaid_text(_label(stream, grouping))}| {ids[target]}")
    return "\n".join(lines) + "\n"


def to_dot(topology: Topology) -> str:
    lines = ["digraph topology {", "    rankdir=LR;"]
    for cid, spec in topology.components.items():
        shape = "ellipse" if spec.kind == "spout" else "box"
        lines.append(f"    {_dot_text(cid)} [label={_dot_text(_node(cid, spec.parallelism))}, shape={shape}];")
    for source, target, stream, grouping in edges(topology):
        lines.append(f"    {_dot_text(source)} -> {_dot_text(target)} [label={_dot_text(_label(stream, grouping))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def draw(topology: Topology, fmt: str) -> str:
    if fmt == "mermaid":
        return to_mermaid(topology)
    if fmt == "dot":
        return to_dot(topology)
    raise ValueError(f"unknown format {fmt!r}; known: {list(FORMATS)}")
