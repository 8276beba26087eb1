"""Edge ids and the ack messages they produce: the tuple side of the XOR acker.

Every tuple copy sent to a task carries, for each tree (root) it belongs to, an
edge id. As Storm's acker does, a root's value is the XOR of every edge id sent
into its tree and every edge id acked out of it: each time a tuple is sent its
edge is XORed in, and each time it is acked the same edge is XORed in again.
The value reaches 0 when every tuple sent has been acked (otherwise with odds
of 2^-64).

* A spout emit sends one copy per target task, each with a fresh edge id; the
  init message carries the XOR of those edge ids.
* A bolt emit anchored to tuples ``a1..an`` gives the new copy a fresh edge id
  for each root of its anchors; ``(root, edge)`` is also the message that sends
  the edge into that tree.
* Acking a tuple sends ``(root, edge)`` for each of its roots: its edge leaves.

Storm carries a tuple's children's edges on the tuple's own ack (the "ack
val"); squall sends them in the report of the wave that emitted them, with that
wave's acks. A child's edge therefore never reaches the acker after its
parent's ack, so a tree's value covers every tuple sent and not yet acked, and
it never reaches 0 early. The acker applies a wave's reports all at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from squall.reliability.ids import new_id


class Anchorable(Protocol):
    """What the acker needs to know of a tuple."""

    anchors_to_ids: dict[int, int]  # root id -> edge id this tuple carries


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
    """The ``anchors_to_ids`` of one new tuple copy anchored to ``anchors``: a fresh edge per root.

    Each of its ``(root, edge)`` pairs is also the message that sends the edge into its tree
    (``enter_messages``), due no later than the ack of any of ``anchors``.
    """
    roots = dict.fromkeys(root for parent in anchors for root in parent.anchors_to_ids)
    return {root: next_id() for root in roots}


def enter_messages(anchors_to_ids: dict[int, int]) -> list[tuple[int, int]]:
    """The ``(root, edge)`` messages that send a new tuple copy's edges into its trees."""
    return list(anchors_to_ids.items())


def ack_messages(tup: Anchorable) -> list[tuple[int, int]]:
    """The ``(root, edge)`` messages that acking ``tup`` sends: its edges leave their trees."""
    return list(tup.anchors_to_ids.items())


def fail_messages(tup: Anchorable) -> list[int]:
    """The roots that failing ``tup`` fails."""
    return list(tup.anchors_to_ids)
