"""The graph a ``TridentTopology`` is declared as, before the planner makes bolts of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from squall.model.fields import Fields

SPOUT, OPERATION, PARTITION = "spout", "operation", "partition"


@dataclass(eq=False)
class Node:
    """One declared step. ``fields`` are all the fields of the tuples it passes on.

    * a spout node holds the spout (``new_stream``);
    * an operation node holds its ``Processor`` (not wired yet): ``each``, ``project``, an aggregation, a persist;
    * a partition node holds the grouping of a repartition (``shuffle``, ``partition_by``, ...)."""

    id: int
    kind: str
    fields: Fields
    parents: list[Node]
    name: str | None = None
    parallelism: int | None = None
    processor: Any = None
    grouping: tuple = ()  # ("shuffle",), ("fields", Fields), ("batch_global",), ("custom", grouping), ...
    spout: Any = None
    txid: str | None = None
    committer: bool = False
    function: str | None = None  # a DRPC stream's spout: the function it serves (``spout`` is its source)
    colocate: Node | None = None  # a state query: the node that updates the state it reads
    children: list[Node] = field(default_factory=list)

    def __repr__(self) -> str:
        what = self.grouping[0] if self.kind == PARTITION else getattr(self.processor, "label", self.kind)
        return f"<node {self.id} {what} {list(self.fields)}>"
