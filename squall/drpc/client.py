"""Clients of a DRPC server (``squall drpc``): ``DRPCClient`` for callers, ``DRPCInvocations`` for the topologies
that serve requests.

Both send the server's token: the one given, else ``$SQUALL_DRPC_TOKEN``, else the token file a DRPC server on this
machine wrote for that host and port (``squall.security.tokens``). Each keeps its HTTP connection open between
calls.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import queue
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from squall.drpc.core import DRPCExecutionException
from squall.drpc.server import DEFAULT_PORT, SERVICE
from squall.model.config import DRPC_PORT, DRPC_SERVERS, SQUALL_DRPC_TOKEN
from squall.model.errors import SquallError
from squall.security import tokens

log = logging.getLogger("squall.drpc")

TOKEN_ENV = "SQUALL_DRPC_TOKEN"
FETCH_WAIT_MS = 1000  # a topology's long poll for requests
RETRY_SECS = 1.0  # after a server could not be reached


def server_token(host: str, port: int, token: str | None = None) -> str:
    given = token or os.environ.get(TOKEN_ENV)
    if given:
        return given
    path = tokens.token_file(SERVICE, host, port)
    if path is None:
        raise SquallError(
            f"no token for the DRPC server at {host}:{port}: give it (token=..., ${TOKEN_ENV} or squall.drpc.token), "
            f"or run as the user whose squall drpc wrote {tokens.token_dir(SERVICE)}/<host>_<port>.token"
        )
    return path.read_text().strip()


class _Connection:
    """One keep-alive HTTP connection to the server, opened again once if the server closed it."""

    def __init__(self, host: str, port: int, token: str, timeout: float | None) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/plain; charset=utf-8"}
        self._http: http.client.HTTPConnection | None = None

    def request(
        self, method: str, path: str, body: str | bytes = b"", timeout: float | None = None
    ) -> tuple[int, bytes]:
        if isinstance(body, str):
            body = body.encode()  # headers and body in one send: no wait on Nagle and delayed acks
        for again in (False, True):
            try:
                if self._http is None:
                    self._http = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
                    self._http.connect()
                    self._http.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._http.request(method, path, body=body, headers=self.headers)
                response = self._http.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                if again:
                    raise DRPCExecutionException(
                        f"the DRPC server at {self.host}:{self.port} went away: {exc}"
                    ) from None
            except OSError as exc:
                self.close()
                raise DRPCExecutionException(
                    f"cannot reach the DRPC server at {self.host}:{self.port}: {exc}"
                ) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None


class DRPCClient:
    """Calls functions on the DRPC server at ``host``:``port``: ``execute(function, args)`` returns the result's
    text, or raises ``DRPCExecutionException``. ``timeout``: seconds to wait for a result (None: the server's)."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, timeout: float | None = None, token: str | None = None
    ) -> None:
        self._connection = _Connection(host, port, server_token(host, port, token), timeout)
        self._lock = threading.Lock()

    def execute(self, function: str, args: str) -> str:
        with self._lock:
            status, body = self._connection.request("POST", f"/drpc/{quote(function, safe='')}", args.encode())
        text = body.decode("utf-8", errors="replace")
        if status == 200:
            return text
        try:
            why = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            why = text
        raise DRPCExecutionException(why if status != 401 else f"the DRPC server refused the token: {why}")

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> DRPCClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class DRPCInvocations:
    """A topology's requests from DRPC servers (a ``RequestSource``): one thread per server long-polls for the
    functions the topology serves; results and failures go back to the server that gave the request."""

    def __init__(self, servers: list[str], port: int = DEFAULT_PORT, token: str | None = None) -> None:
        self.servers = [(host, port, token) for host in servers]
        self._wakes: dict[str, Callable[[], None]] = {}
        self._queues: dict[str, deque[tuple[int, str]]] = {}
        self._origin: dict[int, tuple[int, int]] = {}  # local id -> (server, the server's id)
        self._next_id = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._senders: dict[int, _Connection] = {}
        self._threads: list[threading.Thread] = []
        self._replies: queue.SimpleQueue[tuple[int, str, str] | None] = queue.SimpleQueue()
        threading.Thread(target=self._reply, name="squall-drpc-reply", daemon=True).start()

    @classmethod
    def from_conf(cls, conf: dict[str, Any]) -> DRPCInvocations:
        servers = conf.get(DRPC_SERVERS)
        if not servers:
            raise SquallError(
                "a DRPC stream without a LocalDRPC takes its requests from DRPC servers: set drpc.servers (and "
                "drpc.port) to where squall drpc runs"
            )
        return cls(list(servers), conf.get(DRPC_PORT) or DEFAULT_PORT, conf.get(SQUALL_DRPC_TOKEN))

    def register(self, function: str, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakes[function] = wake
            self._queues.setdefault(function, deque())
            if not self._threads:
                for index in range(len(self.servers)):
                    thread = threading.Thread(target=self._poll, args=(index,), name="squall-drpc-fetch", daemon=True)
                    self._threads.append(thread)
                    thread.start()

    def unregister(self, function: str) -> None:
        with self._lock:
            self._wakes.pop(function, None)
            done = not self._wakes
        if done:
            self.close()

    def take(self, function: str, most: int) -> list[tuple[int, str]]:
        with self._lock:
            queue = self._queues.get(function)
            return [queue.popleft() for _ in range(min(most, len(queue)))] if queue else []

    def result(self, request_id: int, text: str) -> None:
        self._replies.put((request_id, "result", text))

    def fail(self, request_id: int, message: str) -> None:
        self._replies.put((request_id, "fail", message))

    def _reply(self) -> None:
        """Sends the answers, off the run's thread: a slow server holds up no step."""
        while True:
            reply = self._replies.get()
            if reply is None:
                for connection in self._senders.values():
                    connection.close()
                return
            self._send(*reply)

    def _send(self, request_id: int, what: str, text: str) -> None:
        with self._lock:
            origin = self._origin.pop(request_id, None)
        if origin is None:
            return
        server, remote_id = origin
        try:
            connection = self._sender(server)
            status, body = connection.request("POST", f"/invocations/{what}/{remote_id}", text.encode())
            if status != 200:
                log.warning("the DRPC server refused request %d's %s: %s %s", remote_id, what, status, body[:200])
        except (DRPCExecutionException, SquallError) as exc:
            log.warning("request %d's %s did not reach its DRPC server: %s", remote_id, what, exc)

    def _sender(self, server: int) -> _Connection:
        connection = self._senders.get(server)
        if connection is None:
            host, port, token = self.servers[server]
            connection = self._senders[server] = _Connection(host, port, server_token(host, port, token), 30.0)
        return connection

    def _poll(self, server: int) -> None:
        host, port, token = self.servers[server]
        connection: _Connection | None = None
        while not self._stop.is_set():
            try:
                if connection is None:
                    connection = _Connection(host, port, server_token(host, port, token), FETCH_WAIT_MS / 1000 + 30)
                with self._lock:
                    functions = list(self._wakes)
                asked = json.dumps({"functions": functions, "max": 64, "wait_ms": FETCH_WAIT_MS})
                status, body = connection.request("POST", "/invocations/fetch", asked)
                if status != 200:
                    raise DRPCExecutionException(f"{status} {body[:200]!r}")
                self._arrived(server, json.loads(body))
            except Exception as exc:  # the server away, a reply cut short or malformed: try again
                log.warning("DRPC server %s:%d: %s; trying again", host, port, exc)
                if connection is not None:
                    connection.close()
                    connection = None
                self._stop.wait(RETRY_SECS)

    def _arrived(self, server: int, requests: list[list[Any]]) -> None:
        wakes = set()
        with self._lock:
            for remote_id, function, args in requests:
                self._next_id += 1
                self._origin[self._next_id] = (server, remote_id)
                self._queues.setdefault(function, deque()).append((self._next_id, args))
                wake = self._wakes.get(function)
                if wake is not None:
                    wakes.add(wake)
        for wake in wakes:
            wake()

    def close(self) -> None:
        """Stops polling; the requests taken from the servers and not begun fail, and then the answers go."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._lock:
            waiting = [request_id for queued in self._queues.values() for request_id, _ in queued]
            for queued in self._queues.values():
                queued.clear()
        for request_id in waiting:
            self.fail(request_id, "the topology stopped")
        self._replies.put(None)
