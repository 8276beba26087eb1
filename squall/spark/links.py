"""Worker-to-worker tuple links: batches go straight from the worker that emits them to the one that hosts
their target task, never through the driver.

Each worker listens on its executor's host (the address it reaches the driver from) and says where in its
``Hello``; the driver hands every worker the others' addresses in ``Assign``. A worker opens one connection to
each peer when it first has something for it, so what one producer sends one target task arrives in the order
it was sent. A connection's first bytes are the run's secret; nothing from it is unpickled before they match.

Everything a worker receives, from its peers and from the driver's hub, goes into one ``Inbox`` that its
serving loop reads. What is in flight between workers is bounded by the waves: at most
``squall.wave.max.inflight`` waves, each of at most ``squall.wave.spout.batch`` spout calls a spout task.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import logging
import queue
import socket
import struct
import termios
import threading
from typing import Any

from squall.spark.protocol import SECRET_BYTES, encode, read_frames

log = logging.getLogger("squall.worker")

PEER = 0  # the header's destination field on a peer link: the receiving worker itself


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

    def take_peak(self) -> int:
        """The most bytes held at once since the last call (or since the start)."""
        with self._lock:
            peak, self._peak = self._peak, self.buffered
        return peak

    def get(self) -> Any:
        message, size = self._queue.get()
        if size:
            with self._lock:
                self.buffered -= size
        return message


class PeerListener:
    """A worker's server for its peers' links."""

    def __init__(self, host: str, secret: bytes, inbox: Inbox) -> None:
        self._secret = secret
        self._inbox = inbox
        self._server = socket.create_server((host, 0))
        self.address: tuple[str, int] = (host, self._server.getsockname()[1])
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="squall-links-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._lock:
                self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), name="squall-link-in", daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb", buffering=1 << 20) as stream:
            secret = stream.read(SECRET_BYTES)
            if len(secret) < SECRET_BYTES or not hmac.compare_digest(secret, self._secret):
                log.warning("a link to %s did not know the run's secret; closed", self.address)
                return
            read_frames(stream, self._inbox)

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
    """A worker's outgoing links, one per peer, opened when first used."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._addresses: dict[int, tuple[str, int]] = {}
        self._sockets: dict[int, socket.socket] = {}
        self._broken: set[int] = set()  # until the next update: the driver will notice and assign again
        self.bytes_sent = 0

    def update(self, addresses: dict[int, tuple[str, int]]) -> None:
        """Where every worker listens now; a link to an address that changed is closed."""
        for worker in list(self._sockets):
            if addresses.get(worker) != self._addresses.get(worker):
                self._drop(worker)
        self._addresses = dict(addresses)
        self._broken.clear()

    def send(self, worker: int, message: Any) -> None:
        """Send ``message`` to ``worker``; if its link is broken the message is dropped: the worker is lost, and
        the driver runs the wave again once it has noticed."""
        if worker in self._broken:
            return
        frame = encode(message, PEER)
        link = self._sockets.get(worker)
        try:
            if link is None:
                link = self._sockets[worker] = socket.create_connection(self._addresses[worker], timeout=10)
                link.settimeout(None)
                link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                link.sendall(self._secret)
            link.sendall(frame)
            self.bytes_sent += len(frame)
        except OSError as exc:  # a peer that stopped, or was lost: the driver sees that too, and says so
            log.info("link to worker %d broke (%s); dropping what is for it until the run recovers", worker, exc)
            self._drop(worker)
            self._broken.add(worker)

    def unsent_bytes(self) -> int:
        """Bytes sent on the links that their peers have not yet acknowledged (the sockets' send queues)."""
        total = 0
        for link in list(self._sockets.values()):
            with contextlib.suppress(OSError, ValueError):
                total += struct.unpack("i", fcntl.ioctl(link.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        return total

    def _drop(self, worker: int) -> None:
        link = self._sockets.pop(worker, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        for worker in list(self._sockets):
            self._drop(worker)
