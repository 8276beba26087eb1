"""The driver's end of the control plane: a TCP server the run's workers connect to.

It carries control only: registration, assignments, wave markers, reports and
errors. Tuples go from worker to worker over their own links (``links.py``);
a frame addressed to anyone but the driver is refused, and the connection
closed.

It runs an asyncio loop on a thread of its own. Frames are unpickled only after
the connection proved it knows the run's secret, and queued for the driver as
``Received`` events. A connection that closes becomes a ``Disconnected`` event.
Writes never block the loop: each connection buffers what it has not sent yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import pickle
import queue
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from squall.spark.protocol import HEADER, SECRET_BYTES, TO_DRIVER, Hello, encode

log = logging.getLogger("squall.hub")


@dataclass(frozen=True, slots=True)
class Received:
    connection: int
    message: Any


@dataclass(frozen=True, slots=True)
class Disconnected:
    connection: int
    worker: int | None


class Hub:
    def __init__(self, host: str) -> None:
        self.secret = secrets.token_bytes(SECRET_BYTES)
        self.events: queue.Queue[Received | Disconnected] = queue.Queue()
        self._writers: dict[int, asyncio.StreamWriter] = {}  # connection -> writer
        self._workers: dict[int, int] = {}  # worker -> its current connection
        self._next_connection = 0
        self.bytes_in = 0  # what the workers sent the driver, frames and secrets
        self.bytes_out = 0  # what the driver sent the workers
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(host,), name="squall-hub", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    def _run(self, host: str) -> None:
        asyncio.set_event_loop(self._loop)
        self._error: BaseException | None = None
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, host, 0))
            self._address = (host, self._server.sockets[0].getsockname()[1])
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = self._next_connection
        self._next_connection += 1
        worker = None
        try:
            secret = await reader.readexactly(SECRET_BYTES)
            if not hmac.compare_digest(secret, self.secret):
                log.warning("a connection to the hub did not know the run's secret; closed")
                return
            self._writers[connection] = writer
            while True:
                length, destination = HEADER.unpack(await reader.readexactly(HEADER.size))
                payload = await reader.readexactly(length)
                self.bytes_in += HEADER.size + length
                if destination != TO_DRIVER:
                    log.error("a worker sent the hub a frame for %d: tuples go over the links; closed", destination)
                    return
                message = pickle.loads(payload)
                if isinstance(message, Hello):
                    worker = message.worker
                    self._workers[worker] = connection
                self.events.put(Received(connection, message))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.pop(connection, None)
            if worker is not None and self._workers.get(worker) == connection:
                del self._workers[worker]
            writer.close()
            self.events.put(Disconnected(connection, worker))

    def _write(self, frames: list[tuple[int, bytes]]) -> None:
        for connection, frame in frames:
            writer = self._writers.get(connection)
            if writer is not None:
                writer.write(frame)
                self.bytes_out += len(frame)

    def buffered_bytes(self) -> int:
        """Bytes written to the workers' connections and not yet sent."""
        total = 0
        for writer in list(self._writers.values()):
            with contextlib.suppress(Exception):  # a connection closing meanwhile
                total += writer.transport.get_write_buffer_size()
        return total

    def send(self, messages: list[tuple[int, Any]]) -> None:
        """Send ``(connection, message)`` pairs, in order, as one step of the loop."""
        frames = [(connection, encode(message, 0)) for connection, message in messages]
        self._loop.call_soon_threadsafe(self._write, frames)

    def close_connection(self, connection: int) -> None:
        def close() -> None:
            writer = self._writers.pop(connection, None)
            if writer is not None:
                writer.close()

        self._loop.call_soon_threadsafe(close)

    def close(self) -> None:
        def stop() -> None:
            self._server.close()
            for writer in self._writers.values():
                writer.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()  # each connection's task ends before the loop stops
            self._loop.call_soon(self._loop.stop)

        if self._loop.is_running():
            self._loop.call_soon_threadsafe(stop)
        self._thread.join(timeout=10)
