"""Worker-to-worker tuple links: batches go straight from the worker that emits them to the one that hosts
their target task, never through the driver.

Each worker listens on its executor's host (the address it reaches the driver from) and says where in its
``Hello``; the driver hands every worker the others' addresses in ``Assign``. A worker opens one connection to
each peer when it first has something for it, so what one producer sends one target task arrives in the order
it was sent. Every link opens with the mutual handshake of ``squall/security/handshake.py``: the sender sends
no frame before the listener proved the run's secret, and the listener unpickles nothing before the sender
proved it, and every frame after it carries a tag under the link's keys. A listener closes a connection that has
not proved the secret within ``squall.links.handshake.timeout.secs`` (however slowly its bytes trickle in), and
holds at most ``squall.links.max.connections`` that have not proved it yet: one more is closed as soon as it is
accepted. Proven links are one per peer worker, however many connections wait.

Everything a worker receives, from its peers and from the driver's hub, goes into one ``Inbox`` that its
serving loop reads. What is in flight between workers is bounded by the waves: at most
``squall.wave.max.inflight`` waves, each of at most ``squall.wave.spout.batch`` spout calls a spout task.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import queue
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable
from typing import Any

from squall.security.handshake import HandshakeFailed, LinkKeys, Session, client_handshake, server_handshake
from squall.spark.protocol import Verified, encode, read_frames, read_within

log = logging.getLogger("squall.worker")

PEER = 0  # the header's destination field on a peer link: the receiving worker itself
ACCEPT_PAUSE_SECS = 1.0  # after accepting failed (out of file descriptors)


NOTHING = object()  # what ``Inbox.get`` returns when nothing came in time


class Inbox:
    """What a worker is sent, from every connection, in one queue; ``None`` means the driver went away.
    ``buffered`` is the bytes of the frames received and not yet taken."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Any, int]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.buffered = 0
        self._peak = 0  # the most ``buffered`` reached since ``take_peak``

    def put(self, message: Any, size: int = 0) -> None:
        """``message``, which came in a frame of ``size`` bytes."""
        if size:
            with self._lock:
                self.buffered += size
                if self.buffered > self._peak:
                    self._peak = self.buffered
        self._queue.put((message, size))

    def empty(self) -> bool:
        """Nothing waits to be taken (a ``get`` now would block)."""
        return self._queue.empty()

    def take_peak(self) -> int:
        """The most bytes held at once since the last call (or since the start)."""
        with self._lock:
            peak, self._peak = self._peak, self.buffered
        return peak

    def get(self, timeout: float | None = None) -> Any:
        """The next message, unpickled here if its frame came ``Verified`` (a peer's link); ``NOTHING`` if none
        came within ``timeout`` seconds, when one is given."""
        try:
            message, size = self._queue.get(timeout=timeout)
        except queue.Empty:
            return NOTHING
        if size:
            with self._lock:
                self.buffered -= size
        if type(message) is Verified:
            try:
                return message.message()
            except Exception as exc:  # its tag held: a peer sent what this side cannot import
                raise RuntimeError(f"a frame from a peer's link could not be unpickled: {exc!r}") from exc
        return message


class PeerListener:
    """A worker's server for its peers' links: a thread per connection, at most ``max_connections`` of them still
    proving the run's secret."""

    def __init__(
        self, host: str, keys: LinkKeys, inbox: Inbox, handshake_timeout: float = 10.0, max_connections: int = 256
    ) -> None:
        self._keys = keys
        self._inbox = inbox
        self._handshake_timeout = handshake_timeout
        self._max_connections = max_connections
        self._server = socket.create_server((host, 0))
        self.address: tuple[str, int] = (host, self._server.getsockname()[1])
        self._connections: set[socket.socket] = set()
        self._proving = 0  # connections that have not proved the secret yet
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="squall-links-accept", daemon=True).start()

    @property
    def connections(self) -> int:
        """Connections open now, proven or not."""
        with self._lock:
            return len(self._connections)

    def _accept(self) -> None:
        while True:
            try:
                connection, peer = self._server.accept()
            except OSError:
                if self._server.fileno() == -1:
                    return  # closed
                time.sleep(ACCEPT_PAUSE_SECS)  # out of file descriptors, say: try again, as the hub does
                continue
            with self._lock:
                full = self._proving >= self._max_connections
                if not full:
                    self._connections.add(connection)
                    self._proving += 1
            if full:
                log.warning(
                    "%s has %d connections proving the secret already; %s closed",
                    self.address,
                    self._max_connections,
                    peer,
                )
                connection.close()
                continue
            threading.Thread(target=self._serve, args=(connection,), name="squall-link-in", daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        proving = True
        try:
            with connection:
                deadline = time.monotonic() + self._handshake_timeout
                try:
                    session = server_handshake(read_within(connection, deadline), connection.sendall, self._keys)
                except (HandshakeFailed, OSError) as exc:
                    log.warning("a link to %s did not prove the run's secret (%s); closed", self.address, exc)
                    return
                with self._lock:
                    self._proving, proving = self._proving - 1, False
                connection.settimeout(None)
                with connection.makefile("rb", buffering=1 << 20) as stream:
                    read_frames(stream, session, self._inbox, where=f"a link to {self.address}", verified=True)
        finally:
            with self._lock:
                self._connections.discard(connection)
                self._proving -= proving

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._server.close()
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self._connections.clear()


class PeerLinks:
    """A worker's outgoing links, one per peer, opened (and authenticated) when first used."""

    def __init__(self, keys: LinkKeys, handshake_timeout: float = 10.0) -> None:
        self._keys = keys
        self._handshake_timeout = handshake_timeout
        # Told (peer, why) when a link breaks: the worker tells the driver, which recovers if the peer lives on.
        self.on_broken: Callable[[int, str], None] | None = None
        self._addresses: dict[int, tuple[str, int]] = {}
        self._sockets: dict[int, socket.socket] = {}
        self._sessions: dict[int, Session] = {}
        self._broken: set[int] = set()  # until the next update: the driver will notice and assign again
        self.bytes_sent = 0

    def update(self, addresses: dict[int, tuple[str, int]]) -> None:
        """Where every worker listens now; a link to an address that changed is closed."""
        for worker in list(self._sockets):
            if addresses.get(worker) != self._addresses.get(worker):
                self._drop(worker)
        self._addresses = dict(addresses)
        self._broken.clear()

    def _open(self, worker: int) -> socket.socket:
        deadline = time.monotonic() + self._handshake_timeout
        link = socket.create_connection(self._addresses[worker], timeout=self._handshake_timeout)
        try:
            link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sessions[worker] = client_handshake(read_within(link, deadline), link.sendall, self._keys)
            link.settimeout(None)
        except BaseException:
            link.close()
            raise
        self._sockets[worker] = link
        return link

    def send(self, worker: int, message: Any) -> None:
        """Send ``message`` to ``worker``; if its link is broken the message is dropped, and ``on_broken`` is told
        when it breaks: the driver runs the waves in flight again, whether the peer was lost or not."""
        if worker in self._broken:
            return
        frame = encode(message, PEER)
        try:
            link = self._sockets.get(worker) or self._open(worker)
            record = self._sessions[worker].seal(frame)
            link.sendall(record)
            self.bytes_sent += len(record)
        except HandshakeFailed as exc:  # not this run's worker: it is sent nothing
            log.warning("worker %d's address did not prove the run's secret (%s); nothing sent to it", worker, exc)
            self._broke(worker, f"its address did not prove the run's secret: {exc}")
        except OSError as exc:  # a peer that stopped or was lost, or a connection that broke under both
            # Info only: a peer that stops first as the run stops breaks it too; the driver warns when it recovers.
            log.info("link to worker %d broke (%s); dropping what is for it until the run recovers", worker, exc)
            self._broke(worker, repr(exc))

    def _broke(self, worker: int, why: str) -> None:
        self._drop(worker)
        self._broken.add(worker)
        if self.on_broken is not None:
            self.on_broken(worker, why)

    def unsent_bytes(self) -> int:
        """Bytes sent on the links that their peers have not yet acknowledged (the sockets' send queues)."""
        total = 0
        for link in list(self._sockets.values()):
            with contextlib.suppress(OSError, ValueError):
                total += struct.unpack("i", fcntl.ioctl(link.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        return total

    def _drop(self, worker: int) -> None:
        self._sessions.pop(worker, None)
        link = self._sockets.pop(worker, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        for worker in list(self._sockets):
            self._drop(worker)
