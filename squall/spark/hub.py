"""The driver's end of the control plane: a TCP server the run's workers connect to.

It carries control only: registration, assignments, wave markers, reports and
errors. Tuples go from worker to worker over their own links (``links.py``);
a frame addressed to anyone but the driver is refused, and the connection
closed.

It has no thread of its own. The thread that runs the topology reads the
connections when it polls (``next_event``), so a worker's report is handled
where it is read, with no hand-off between threads. Each connection first runs
the server's side of the link handshake (``squall/security/handshake.py``): the
hub and the worker each prove they hold the run's secret without sending it,
and the hub sends nothing but its challenge, and unpickles nothing, until the
worker's proof holds. A connection that has not proved it within
``squall.links.handshake.timeout.secs`` is closed, and at most
``squall.links.max.connections`` may be proving it at once: one more is closed
as soon as it is accepted. After it, every frame whose tag holds (and that
decrypts, when the run encrypts its links) becomes a ``Received`` event, and a
connection that closes a ``Disconnected`` one.

Any thread may ``send``: a frame goes to the socket at once, as far as the
socket takes it, and the rest waits in its connection's buffer until the poll
finds the socket writable, so a slow worker never blocks the sender. Any thread
may ``post`` an event (the worker job's end) or ``wake`` a poll that waits.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import pickle
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from squall.security.handshake import HELLO_BYTES, PROOF_BYTES, HandshakeFailed, LinkKeys, ServerHandshake, Session
from squall.spark.protocol import TO_DRIVER, Hello, encode

log = logging.getLogger("squall.hub")

READ_BYTES = 1 << 20  # at most this much is read from one connection in one go
ACCEPT_PAUSE_SECS = 1.0  # after accepting failed (out of file descriptors), as asyncio's server waits
CLOSED_WAIT_SECS = 0.1  # a poll of a closed hub waits this long at most, then says nothing came


@dataclass(frozen=True, slots=True)
class Received:
    connection: int
    message: Any


@dataclass(frozen=True, slots=True)
class Disconnected:
    connection: int
    worker: int | None


@dataclass(slots=True)
class _Connection:
    sock: socket.socket
    handshake: ServerHandshake
    accepted_at: float
    inbound: bytearray = field(default_factory=bytearray)  # read, not yet a whole frame
    outbound: bytearray = field(default_factory=bytearray)  # written, not yet taken by the socket
    session: Session | None = None  # once it proved the run's secret
    challenged: bool = False  # its hello came, and the hub's challenge went out
    worker: int | None = None  # its Hello's
    writing: bool = False  # registered for writability: its outbound is not empty


def _send_some(sock: socket.socket, data: bytes | bytearray) -> int:
    """The bytes of ``data`` done with: what the socket took (0 when it is full), or all of them when it is
    closing, since the poll reads its end and reports the close."""
    try:
        return sock.send(data)
    except BlockingIOError:
        return 0
    except OSError:
        return len(data)


class Hub:
    def __init__(
        self,
        host: str,
        keys: LinkKeys | None = None,
        handshake_timeout: float = 10.0,
        max_proving: int = 256,
    ) -> None:
        self.keys = keys if keys is not None else LinkKeys.generate()
        self.handshake_timeout = handshake_timeout
        self.max_proving = max_proving  # connections that may be proving the secret at once
        self.bytes_in = 0  # what the workers sent the driver, in frames
        self.bytes_out = 0  # what the driver sent the workers
        family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]  # IPv4 or IPv6, as the host is
        self._server = socket.create_server((host, 0), family=family, backlog=128)
        self._server.setblocking(False)
        self._address = (host, self._server.getsockname()[1])
        self._wake_in, self._wake_out = socket.socketpair()
        self._wake_in.setblocking(False)
        self._wake_out.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._selector.register(self._wake_in, selectors.EVENT_READ)
        self._connections: dict[int, _Connection] = {}
        self._next_connection = 0
        self._events: collections.deque[Received | Disconnected] = collections.deque()  # read, not yet taken
        self._posted: collections.deque[Any] = collections.deque()  # from other threads
        self._to_close: collections.deque[int] = collections.deque()
        self._lock = threading.Lock()  # the connections' outbound buffers and who is in the table
        self._polling = threading.Lock()  # one poll at a time
        self._closed = False
        self._accepting_again_at: float | None = None  # accepting paused (out of file descriptors) until then

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    # -- any thread ---------------------------------------------------------------------
    def send(self, messages: list[tuple[int, Any]]) -> None:
        """Send ``(connection, message)`` pairs, in order; never blocks on a slow connection."""
        frames = [(connection, encode(message, 0)) for connection, message in messages]
        left_over = False
        with self._lock:
            for connection, plain in frames:
                conn = self._connections.get(connection)
                if conn is None or conn.session is None:  # gone, or never proved the secret: nothing for it
                    continue
                frame = conn.session.seal(plain)  # under the lock: in the order the records go out
                self.bytes_out += len(frame)
                if conn.outbound:
                    conn.outbound += frame
                    continue
                sent = _send_some(conn.sock, frame)
                if sent < len(frame):
                    conn.outbound += memoryview(frame)[sent:]
                    left_over = True
        if left_over:
            self.wake()  # a poll waiting now registers the socket for writing

    def post(self, event: Any) -> None:
        """An event for the poll, from another thread (the worker job's end)."""
        self._posted.append(event)
        self.wake()

    def wake(self) -> None:
        """Make a poll that waits return now."""
        with contextlib.suppress(OSError):  # the pipe is full (a wake is pending anyway) or closed
            self._wake_out.send(b"\0")

    def close_connection(self, connection: int) -> None:
        self._to_close.append(connection)
        self.wake()

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._connections)

    def buffered_bytes(self) -> int:
        """Bytes written to the workers' connections and not yet sent."""
        with self._lock:
            return sum(len(conn.outbound) for conn in self._connections.values())

    # -- the polling thread ---------------------------------------------------------------
    def next_event(self, timeout: float | None) -> Any:
        """The next event: ``Received``, ``Disconnected`` or a posted one, waiting up to ``timeout`` seconds
        (``None``: until one comes). ``None`` when none came in time, or the poll was woken."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._polling:
            if self._closed:
                time.sleep(min(timeout or 0.0, CLOSED_WAIT_SECS))  # a caller that loops does not spin
                return None
            while True:
                if self._posted and not self._events:
                    self._poll_once(0.0)  # what the workers sent before it comes first, as it did
                if self._events:
                    return self._events.popleft()
                if self._posted:
                    return self._posted.popleft()
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                came, woken, moved = self._poll_once(wait)
                if self._posted or self._events:
                    continue
                # Bytes came (a partial frame) or went: read and write on, without waiting once the time is up,
                # until nothing moves.
                if (woken and not came) or (
                    not (came or moved) and deadline is not None and time.monotonic() >= deadline
                ):
                    return None

    def _poll_once(self, wait: float | None) -> tuple[bool, bool, bool]:
        """One select: accept, read, write and close what is ready. Returns whether bytes came, whether the poll
        was woken, and whether buffered bytes went out."""
        while self._to_close:
            self._drop(self._to_close.popleft())
        if self._accepting_again_at is not None and time.monotonic() >= self._accepting_again_at:
            self._accepting_again_at = None
            self._selector.register(self._server, selectors.EVENT_READ)
        with self._lock:
            for connection, conn in self._connections.items():
                if bool(conn.outbound) != conn.writing:
                    conn.writing = not conn.writing
                    events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.writing else 0)
                    self._selector.modify(conn.sock, events, connection)
        came = woken = moved = False
        if self._accepting_again_at is not None:
            wait = ACCEPT_PAUSE_SECS if wait is None else min(wait, ACCEPT_PAUSE_SECS)
        next_deadline = self._close_unproven_past_deadline()
        if next_deadline is not None:
            left = max(0.0, next_deadline - time.monotonic())
            wait = left if wait is None else min(wait, left)
        for key, mask in self._selector.select(wait):
            if key.fileobj is self._server:
                self._accept()
            elif key.fileobj is self._wake_in:
                woken = True
                with contextlib.suppress(OSError):  # drained
                    while self._wake_in.recv(4096):
                        pass
            else:
                if mask & selectors.EVENT_WRITE:
                    moved = self._flush(key.data) or moved
                if mask & selectors.EVENT_READ:
                    came = self._read(key.data) or came
        return came, woken, moved

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except (BlockingIOError, InterruptedError):  # none left
                return
            except OSError as exc:  # out of file descriptors, say: the listener stays readable, so pause it
                log.warning("the hub could not accept a connection (%s); trying again in %.0fs", exc, ACCEPT_PAUSE_SECS)
                self._selector.unregister(self._server)
                self._accepting_again_at = time.monotonic() + ACCEPT_PAUSE_SECS
                return
            sock.setblocking(False)
            with contextlib.suppress(OSError):  # reset already: its first read reports it
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if sum(conn.session is None for conn in self._connections.values()) >= self.max_proving:
                log.warning("the hub has %d connections proving the secret already; one more closed", self.max_proving)
                sock.close()
                continue
            connection = self._next_connection
            self._next_connection += 1
            with self._lock:
                self._connections[connection] = _Connection(sock, ServerHandshake(self.keys), time.monotonic())
            self._selector.register(sock, selectors.EVENT_READ, connection)

    def _flush(self, connection: int) -> bool:
        with self._lock:
            conn = self._connections.get(connection)
            if conn is None or not conn.outbound:
                return False
            sent = _send_some(conn.sock, conn.outbound)
            del conn.outbound[:sent]
            return sent > 0

    def _read(self, connection: int) -> bool:
        conn = self._connections.get(connection)
        if conn is None:
            return False
        try:
            data = conn.sock.recv(READ_BYTES)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._drop(connection)
            return True
        conn.inbound += data
        self._frames(connection, conn)
        return True

    def _frames(self, connection: int, conn: _Connection) -> None:
        """The whole frames ``conn`` has read, as events; what is left waits for more bytes. Before them, the
        handshake: nothing is unpickled from a connection that has not proved the run's secret."""
        buffer = conn.inbound
        try:
            if conn.session is None and not self._handshake(connection, conn):
                return
            frames, taken = conn.session.frames(buffer)
        except HandshakeFailed as exc:
            log.warning("hub connection %d closed: %s", connection, exc)
            self._drop(connection)
            return
        for size, destination, payload in frames:
            if destination != TO_DRIVER:
                log.error("a worker sent the hub a frame for %d: tuples go over the links; closed", destination)
                self._drop(connection)
                return
            try:
                message = pickle.loads(payload)
            except Exception:
                log.exception("a frame from hub connection %d could not be unpickled; closed", connection)
                self._drop(connection)
                return
            self.bytes_in += size
            if isinstance(message, Hello):
                conn.worker = message.worker
            self._events.append(Received(connection, message))
        del buffer[:taken]

    def _handshake(self, connection: int, conn: _Connection) -> bool:
        """Move ``conn``'s handshake on with what it sent; whether it is done (the worker proved the secret)."""
        buffer = conn.inbound
        if not conn.challenged:
            if len(buffer) < HELLO_BYTES:
                return False
            challenge = conn.handshake.challenge(bytes(buffer[:HELLO_BYTES]))
            del buffer[:HELLO_BYTES]
            conn.challenged = True
            with self._lock:
                sent = _send_some(conn.sock, challenge)
                if sent < len(challenge):
                    conn.outbound += challenge[sent:]
        if len(buffer) < PROOF_BYTES:
            return False
        conn.session = conn.handshake.finish(bytes(buffer[:PROOF_BYTES]))
        del buffer[:PROOF_BYTES]
        return True

    def _close_unproven_past_deadline(self) -> float | None:
        """Close the connections that did not prove the secret in time; the next deadline of those still proving
        it, if any."""
        now, next_deadline = time.monotonic(), None
        for connection, conn in list(self._connections.items()):
            if conn.session is None:
                deadline = conn.accepted_at + self.handshake_timeout
                if now >= deadline:
                    log.warning("hub connection %d did not prove the run's secret in time; closed", connection)
                    self._drop(connection)
                elif next_deadline is None or deadline < next_deadline:
                    next_deadline = deadline
        return next_deadline

    def _drop(self, connection: int) -> None:
        with self._lock:
            conn = self._connections.pop(connection, None)
        if conn is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()
        self._events.append(Disconnected(connection, conn.worker))

    def close(self) -> None:
        """Close every connection and the server; a poll waiting now returns first."""
        self._closed = True
        self.wake()
        with self._polling:
            with self._lock:
                connections, self._connections = self._connections, {}
            for conn in connections.values():
                conn.sock.close()
            self._server.close()
            self._selector.close()
            self._wake_in.close()
            self._wake_out.close()
