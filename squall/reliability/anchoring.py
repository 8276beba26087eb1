"""Edge ids and the ack messages they produce: the tuple side of the XOR acker.

Every tuple copy sent to a task carries, for each tree (root) it belongs to, an
edge id. The acker's value for a root is the XOR of every edge id that entered
the tree and every edge id that left it, so it reaches 0 exactly when every edge
has been acked.

* A spout emit sends one copy per target task, each with a fresh edge id; the
  init message carries the XOR of those edge ids.
* A bolt emit anchored to tuples ``a1..an`` draws a fresh edge id per anchor,
  XORs it into that anchor's pending ``ack_val`` and into the new tuple's edge id
  for every root of the anchor. Anchoring to the same tuple twice draws two ids,
  which cancel in the new tuple but both stay in the anchor's ``ack_val``.
* Acking a tuple sends, for each of its roots, ``edge_id ^ ack_val``: its own
  edge leaves the tree while the edges of the tuples anchored to it enter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from squall.reliability.ids import new_id


class Anchorable(Protocol):
    """What the acker needs to know of a tuple."""

    anchors_to_ids: dict[int, int]  # root id -> edge id this tuple carries
    ack_val: int  # XOR of the edge ids of tuples anchored to this one


def _xor_into(mapping: dict[int, int], root: int, value: int) -> None:
    mapping[root] = mapping.get(root, 0) ^ value


def spout_edges(root: int, num_copies: int, next_id: Callable[[], int] = new_id) -> tuple[int, list[dict[int, int]]]:
    """Edge ids for the copies of one spout tuple: ``(init_value, per-copy ids)``."""
    init_value = 0
    copies = []
    for _ in range(num_copies):
        edge = next_id()
        init_value ^= edge
        copies.append({root: edge})
    return init_value, copies


def anchor(anchors: Iterable[Anchorable], next_id: Callable[[], int] = new_id) -> dict[int, int]:
    """The ``anchors_to_ids`` of one new tuple copy anchored to ``anchors``.

    Updates each anchor's ``ack_val`` as a side effect, as Storm's collector does.
    """
    anchors_to_ids: dict[int, int] = {}
    for parent in anchors:
        if not parent.anchors_to_ids:
            continue
        edge = next_id()
        parent.ack_val ^= edge
        for root in parent.anchors_to_ids:
            _xor_into(anchors_to_ids, root, edge)
    return anchors_to_ids


def ack_messages(tup: Anchorable) -> list[tuple[int, int]]:
    """The ``(root, xor_value)`` messages that acking ``tup`` sends."""
    return [(root, edge ^ tup.ack_val) for root, edge in tup.anchors_to_ids.items()]


def fail_messages(tup: Anchorable) -> list[int]:
    """The roots that failing ``tup`` fails."""
    return list(tup.anchors_to_ids)
