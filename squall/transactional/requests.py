"""Request groups: batches that each carry one request (a DRPC call), beside a topology's transactional batches.

A request group has a stand-in spout with one field, ``args``. The driver takes requests from the group's
``RequestSource``, emits each one's ``[args]`` itself as a try of its own, and once every worker has processed the
try, hands the rows the group's tasks gave as results back to the source, as JSON (Storm's batch-per-tuple DRPC
spout, with its ``ReturnResults``). A request is never retried: a try that fails fails its request. Request tries
do not go through the transactional coordinator, wait for no commit, and write nothing to its store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from squall.model.fields import Fields

REQUEST_FIELDS = Fields("args")


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
class RequestGroup:
    """A request group of a transactional topology: its stand-in spout, the function it serves, where requests
    come from, and the bolts that process them."""

    spout_id: str
    function: str
    source: Any  # a RequestSource; None: the run's ``drpc.servers``
    components: frozenset[str]


class RequestSpoutStandIn:
    """What the topology model sees of a request group's spout: its one field."""

    outputs = REQUEST_FIELDS

    def next_tuple(self) -> None:  # requests are emitted by the driver
        pass
