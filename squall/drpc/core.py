"""``DRPC``: the queue of distributed RPC requests between callers and the topologies serving them (Storm's
``DRPC.java``).

A caller's ``execute(function, args)`` waits for the result. A topology serving ``function`` takes requests
(``take``) and answers each with ``result(id, text)`` or ``fail(id, message)``. A request unanswered after
``timeout_secs`` fails with "Timed Out"; ``close()`` fails every request still waiting.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_TIMEOUT_SECS = 600.0  # Storm's drpc.request.timeout.secs


class DRPCExecutionException(Exception):
    """A DRPC request failed: the topology failed it, it timed out, or the server shut down."""


@dataclass
class _Request:
    id: int
    function: str
    args: str
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    result: str | None = None
    error: str | None = None


class DRPC:
    """Requests by function, and what waits on them. Thread-safe."""

    def __init__(self, timeout_secs: float = DEFAULT_TIMEOUT_SECS) -> None:
        self.timeout_secs = timeout_secs
        self._ids = itertools.count(1)
        self._queues: dict[str, deque[_Request]] = {}
        self._requests: dict[int, _Request] = {}
        self._wakes: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # a request was queued
        self._closed = False

    # -- callers --------------------------------------------------------------------------------------
    def execute(self, function: str, args: str, timeout_secs: float | None = None) -> str:
        """The JSON text of ``function``'s result tuples for ``args``, or ``DRPCExecutionException``."""
        if not isinstance(function, str) or not function:
            raise ValueError(f"DRPC execute: the function must be a non-empty string, got {function!r}")
        if not isinstance(args, str):
            raise TypeError(f"DRPC execute({function!r}): args must be a string, got {type(args).__name__}")
        limit = self.timeout_secs if timeout_secs is None else timeout_secs
        with self._lock:
            if self._closed:
                raise DRPCExecutionException("Server Shutting Down")
            request = _Request(next(self._ids), function, args, time.monotonic() + limit)
            self._requests[request.id] = request
            self._queues.setdefault(function, deque()).append(request)
            self._arrived.notify_all()
            wake = self._wakes.get(function)
        if wake is not None:
            wake()
        if not request.done.wait(limit):
            self.fail(request.id, "Timed Out")
            with self._lock:  # no topology took it: it leaves the queue too
                queue = self._queues.get(function)
                if queue is not None and request in queue:
                    queue.remove(request)
        if request.error is not None:
            raise DRPCExecutionException(f"DRPC request for {function!r} failed: {request.error}")
        return request.result

    # -- topologies -------------------------------------------------------------------------------------
    def register(self, function: str, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakes[function] = wake
            waiting = bool(self._queues.get(function))
        if waiting:
            wake()

    def unregister(self, function: str) -> None:
        with self._lock:
            self._wakes.pop(function, None)

    def take(self, function: str, most: int) -> list[tuple[int, str]]:
        with self._lock:
            return [(i, args) for i, _, args in self._take_locked([function], most)]

    def fetch(self, functions: list[str], most: int, wait_secs: float) -> list[tuple[int, str, str]]:
        """Up to ``most`` requests for any of ``functions``, as ``(id, function, args)``, waiting up to
        ``wait_secs`` for the first (the invocations API's long poll)."""
        deadline = time.monotonic() + wait_secs
        with self._lock:
            while True:
                taken = self._take_locked(functions, most)
                left = deadline - time.monotonic()
                if taken or left <= 0 or self._closed:
                    return taken
                self._arrived.wait(left)

    def _take_locked(self, functions: list[str], most: int) -> list[tuple[int, str, str]]:
        taken: list[tuple[int, str, str]] = []
        for function in functions:
            queue = self._queues.get(function)
            while queue and len(taken) < most:
                request = queue.popleft()
                if not request.done.is_set():
                    taken.append((request.id, function, request.args))
        return taken

    def result(self, request_id: int, text: str) -> None:
        self._finish(request_id, text, None)

    def fail(self, request_id: int, message: str = "Request failed") -> None:
        self._finish(request_id, None, message)

    def _finish(self, request_id: int, text: str | None, error: str | None) -> None:
        with self._lock:
            request = self._requests.pop(request_id, None)
        if request is not None and not request.done.is_set():
            request.result, request.error = text, error
            request.done.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._arrived.notify_all()
            waiting = list(self._requests)
        for request_id in waiting:
            self.fail(request_id, "Server Shutting Down")
