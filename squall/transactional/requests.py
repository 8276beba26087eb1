"""Request groups: batches that each carry one request (a DRPC call), beside a topology's transactional batches.

A request group has a stand-in spout with one field, ``args``. The driver takes requests from the group's
``RequestSource``, emits each one's ``[args]`` itself as a try of its own, and once every worker has processed the
try, hands the rows the group's tasks gave as results back to the source, as JSON (Storm's batch-per-tuple DRPC
spout, with its ``ReturnResults``). A request is never retried: a try that fails fails its request. Request tries
do not go through the transactional coordinator, wait for no commit, and write nothing to its store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from squall.model.fields import Fields

REQUEST_FIELDS = Fields("args")
REQUEST_WITH_ID_FIELDS = Fields("request", "args")  # a linear DRPC topology's: the request's id first
TUPLES, VALUE = "tuples", "value"  # a result: the JSON list of the result rows, or the first row's second value


class RequestSource(Protocol):
    """Where a request group's requests come from and its results go: a ``squall.drpc.LocalDRPC``, or the client
    of a DRPC server. Called on the driver, from the run's thread, except ``register``'s ``wake``."""

    def register(self, function: str, wake: Callable[[], None]) -> None:
        """The run serves ``function`` from now on; ``wake()`` is to be called (from any thread) when a request
        for it comes."""

    def unregister(self, function: str) -> None: ...

    def take(self, function: str, most: int) -> list[tuple[int, str]]:
        """Up to ``most`` waiting requests for ``function``, as ``(request id, args)``; none waits."""

    def result(self, request_id: int, text: str) -> None: ...

    def fail(self, request_id: int, message: str) -> None: ...


@dataclass(frozen=True)
class RequestAttempt:
    """A request try's batch id: the request's id, and the last txid committed when it began, so that what it
    reads of a state is what that txid, or a later committed one, left (``int()`` gives the id)."""

    request_id: int
    committed: int

    def __int__(self) -> int:
        return self.request_id

    __index__ = __int__


@dataclass(frozen=True)
class RequestGroup:
    """A request group of a transactional topology: its stand-in spout, the function it serves, where requests
    come from, and the bolts that process them."""

    spout_id: str
    function: str
    source: Any  # a RequestSource; None: the run's ``drpc.servers``
    components: frozenset[str]
    with_id: bool = False  # each request is emitted as ``[id, args]`` (else ``[args]``)
    result: str = TUPLES

    def values(self, request_id: int, args: str) -> list[Any]:
        return [request_id, args] if self.with_id else [args]

    def answer(self, rows: list[Any]) -> str | None:
        """The caller's answer from the result rows (None: there is none)."""
        if self.result == TUPLES:
            return json.dumps(rows, default=str)
        return str(rows[0][1]) if rows else None


class RequestSpoutStandIn:
    """What the topology model sees of a request group's spout: its fields."""

    def __init__(self, with_id: bool = False) -> None:
        self.outputs = REQUEST_WITH_ID_FIELDS if with_id else REQUEST_FIELDS

    def next_tuple(self) -> None:  # requests are emitted by the driver
        pass
