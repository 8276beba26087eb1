"""The tuple a bolt receives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cython

from squall.model.fields import Fields

TICK_COMPONENT = "__system"
TICK_STREAM = "__tick"


@cython.cclass
class Tuple:
    """Values with their field names, their source, and their place in tuple trees.

    ``anchors_to_ids`` maps each root (spout tuple id) of a tree the tuple belongs
    to, to the edge id this copy carries for it: the acker's business, not the
    user's. A tuple in exactly one tree, the common case, keeps that pair as ``root`` and
    ``edge``; one in several trees keeps its map in ``trees`` (``root`` is 0).
    """

    # Compiled, the fields are a C struct's (``tuple.pxd``): a tuple is made once per row per bolt, and its ``root``
    # and ``edge`` are C integers, read and written by the compiled per-tuple path with no Python integer made.

    def __init__(
        self,
        values: Sequence[Any],
        fields: Fields,
        source_component: str,
        source_task: int,
        source_stream: str = "default",
        anchors_to_ids: dict[int, int] | None = None,
        id: int = 0,
        root: int = 0,
        edge: int = 0,
    ) -> None:
        self.values = values if type(values) is tuple else tuple(values)
        self.fields = fields
        self.source_component = source_component
        self.source_task = source_task
        self.source_stream = source_stream
        self.root, self.edge, self.trees = root, edge, None
        if anchors_to_ids:
            self.anchors_to_ids = anchors_to_ids
        self.id = id  # unique per delivered copy; identifies the tuple to its task

    @property
    def anchors_to_ids(self) -> dict[int, int]:
        if self.root:
            return {self.root: self.edge}
        return dict(self.trees) if self.trees else {}

    @anchors_to_ids.setter
    def anchors_to_ids(self, mapping: dict[int, int]) -> None:
        if len(mapping) == 1:
            ((self.root, self.edge),) = mapping.items()
            self.trees = None
        else:
            self.root, self.edge, self.trees = 0, 0, (dict(mapping) or None)

    def __getitem__(self, key: int | str) -> Any:
        if type(key) is int:
            return self.values[key]
        if isinstance(key, str):
            try:
                return self.values[self.fields.index(key)]
            except KeyError:
                raise KeyError(
                    f"tuple from {self.source_component!r} stream {self.source_stream!r} "
                    f"has no field {key!r}; its fields are {list(self.fields)}"
                ) from None
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def get(self, field: str, default: Any = None) -> Any:
        return self.values[self.fields.index(field)] if field in self.fields else default

    def select(self, fields: Sequence[str]) -> tuple:
        return self.fields.select(fields, self.values)

    @property
    def is_tick(self) -> bool:
        return self.source_component == TICK_COMPONENT and self.source_stream == TICK_STREAM

    def __repr__(self) -> str:
        return f"Tuple({self.values!r}, from {self.source_component}:{self.source_task}/{self.source_stream})"


@cython.locals(tup=Tuple)
def row_tuple(values: tuple, fields: Fields, component: str, task: int, stream: str, root: int, edge: int) -> Tuple:
    """The ``Tuple`` of a batch's row, in one tree or none: ``Tuple(...)`` without its argument handling, made
    once per row per bolt. Compiled, it is a C function (``tuple.pxd``) that takes ``root`` and ``edge`` as C
    integers."""
    tup = Tuple.__new__(Tuple)
    tup.values = values if type(values) is tuple else tuple(values)
    tup.fields = fields
    tup.source_component = component
    tup.source_task = task
    tup.source_stream = stream
    tup.root = root  # one assignment each: a tuple assignment would make Python integers of the C ones
    tup.edge = edge
    tup.trees = None
    tup.id = 0
    return tup
