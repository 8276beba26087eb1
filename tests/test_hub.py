"""The driver's hub, read by the thread that polls it: whole frames from partial reads, the link handshake first
(nothing unpickled from a connection that has not proved the run's secret, a recorded handshake replayed
refused, an encrypted record changed on the way refused), a closed connection as one ``Disconnected``, events
posted by other threads after what the workers sent before them, and a poll that waits woken from another
thread."""

from __future__ import annotations

import os
import pickle
import socket
import threading
from collections.abc import Iterator

import pytest

from squall.security.handshake import ClientHandshake, HandshakeFailed, LinkKeys, Session, client_handshake
from squall.spark.hub import Disconnected, Hub, Received
from squall.spark.protocol import HEADER, TO_DRIVER, Hello, encode


class MakesADirectory:
    """Unpickled, it makes a directory: the mark that bytes from a stranger were unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.fixture(params=[False, True], ids=["plain", "encrypted"])
def hub(request) -> Iterator[Hub]:
    hub = Hub("127.0.0.1", LinkKeys.generate(encrypt=request.param))
    yield hub
    hub.close()


class Recording:
    """A socket's ``sendall``, keeping every byte sent."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.sent = sock, bytearray()

    def sendall(self, data: bytes) -> None:
        self.sent += data
        self.sock.sendall(data)


def handshake(hub: Hub, worker: socket.socket, keys: LinkKeys, send=None) -> Session:
    """The worker's side of the handshake on a thread, while this one polls the hub as the driver's does."""
    done: dict = {}

    def run() -> None:
        try:
            with worker.makefile("rb", buffering=0) as reply:
                done["session"] = client_handshake(reply.read, send or worker.sendall, keys)
        except Exception as exc:
            done["error"] = exc

    client = threading.Thread(target=run)
    client.start()
    while client.is_alive():
        assert hub.next_event(0.02) is None
    if "error" in done:
        raise done["error"]
    return done["session"]


def connect(hub: Hub, receive_buffer: int | None = None) -> tuple[socket.socket, Session]:
    worker = socket.socket()
    if receive_buffer is not None:  # before connecting: the window stays small
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    worker.connect(hub.address)
    return worker, handshake(hub, worker, hub.keys)


def closed_by_peer(sock: socket.socket) -> bool:
    """The other end closed ``sock`` (with unread bytes it sent, a reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def events_until_none(hub: Hub, timeout: float = 0.5) -> list:
    events = []
    while (event := hub.next_event(timeout)) is not None:
        events.append(event)
    return events


def test_frames_split_across_reads_come_whole_and_in_order(hub):
    worker, session = connect(hub)
    frames = session.seal(encode(Hello(0, 0, 1, "h", 1, ("127.0.0.1", 1)), TO_DRIVER)) + session.seal(
        encode(["a", 1], TO_DRIVER)
    )
    events = []
    for i in range(len(frames)):  # a byte at a time, read as it comes: the frames split everywhere
        worker.sendall(frames[i : i + 1])
        if (event := hub.next_event(0.0)) is not None:
            events.append(event)
    worker.sendall(session.seal(encode(["b", 2], TO_DRIVER)))
    events += events_until_none(hub)
    assert [e.message for e in events] == [Hello(0, 0, 1, "h", 1, ("127.0.0.1", 1)), ["a", 1], ["b", 2]]
    assert {e.connection for e in events} == {0}
    worker.close()
    assert events_until_none(hub) == [Disconnected(0, 0)]  # the worker its Hello named
    assert hub.connections == 0


def test_a_connection_without_the_secret_is_closed_before_anything_is_unpickled(hub, tmp_path):
    marker = tmp_path / "unpickled"
    intruder = socket.create_connection(hub.address)
    with pytest.raises(HandshakeFailed, match="did not prove"):  # the worker's side: this hub is not its run's
        handshake(hub, intruder, LinkKeys(b"x" * 32, hub.keys.encrypt))
    intruder.sendall(b"p" * 32 + encode(MakesADirectory(str(marker)), TO_DRIVER))  # a proof it cannot make
    assert events_until_none(hub) == [Disconnected(0, None)]
    assert closed_by_peer(intruder)  # closed by the hub
    assert hub.bytes_in == 0 and not marker.exists()


def test_a_connection_that_sends_a_frame_without_any_handshake_is_closed_unread(hub, tmp_path):
    marker = tmp_path / "unpickled"
    intruder = socket.create_connection(hub.address)
    intruder.sendall(encode(MakesADirectory(str(marker)), TO_DRIVER) + b"\0" * 64)
    assert events_until_none(hub) == [Disconnected(0, None)]
    assert hub.bytes_in == 0 and not marker.exists()


def test_a_recorded_handshake_replayed_is_refused_before_anything_is_unpickled(hub, tmp_path):
    worker = socket.create_connection(hub.address)
    recording = Recording(worker)
    session = handshake(hub, worker, hub.keys, recording.sendall)
    recording.sendall(session.seal(encode(["report", 1], TO_DRIVER)))
    assert [e.message for e in events_until_none(hub)] == [["report", 1]]
    # Someone who watched that connection open sends the same bytes again, then a payload of their own.
    marker = tmp_path / "unpickled"
    replayer = socket.create_connection(hub.address)
    replayer.sendall(bytes(recording.sent) + encode(MakesADirectory(str(marker)), TO_DRIVER))
    events = events_until_none(hub)
    assert events == [Disconnected(1, None)]
    assert not marker.exists()
    worker.close()


def test_a_frame_changed_on_the_way_closes_its_connection_before_it_is_unpickled(hub):
    worker, session = connect(hub)
    worker.sendall(session.seal(encode(["first"], TO_DRIVER)))
    assert [e.message for e in events_until_none(hub)] == [["first"]]
    record = bytearray(session.seal(encode(["second", "never", "read"], TO_DRIVER)))
    record[len(record) // 2] ^= 0x01  # one bit flipped: in the ciphertext, or in the pickle sent in clear
    worker.sendall(bytes(record))
    assert events_until_none(hub) == [Disconnected(0, None)]
    assert closed_by_peer(worker)


def test_a_frame_injected_into_a_proven_connection_is_refused_before_it_is_unpickled(hub, tmp_path):
    """Someone who can write into the connection after the handshake (not knowing the secret) cannot make the hub
    unpickle what they write, on a link in clear too: every frame carries a tag under the link's keys."""
    worker, _session = connect(hub)
    marker = tmp_path / "unpickled"
    worker.sendall(encode(MakesADirectory(str(marker)), TO_DRIVER) + bytes(16))
    assert events_until_none(hub) == [Disconnected(0, None)]
    assert not marker.exists() and hub.bytes_in == 0


def test_the_hub_holds_at_most_its_cap_of_connections_proving_the_secret():
    hub = Hub("127.0.0.1", LinkKeys.generate(), handshake_timeout=1.0, max_proving=3)
    idle = [socket.create_connection(hub.address) for _ in range(10)]
    try:
        assert hub.next_event(0.3) is None
        assert hub.connections == 3
        assert sum(closed_by_peer(s) for s in idle[3:]) == 7  # each past the cap closed as it came
        assert events_until_none(hub, 2.0) == [Disconnected(c, None) for c in range(3)]  # their time ran out
        worker, session = connect(hub)  # then a worker that proves the secret gets in
        worker.sendall(session.seal(encode(["report"], TO_DRIVER)))
        assert [e.message for e in events_until_none(hub)] == [["report"]]
    finally:
        for s in idle:
            s.close()
        hub.close()


def test_a_connection_that_never_proves_the_secret_is_closed_after_the_handshake_timeout():
    hub = Hub("127.0.0.1", LinkKeys.generate(), handshake_timeout=0.3)
    try:
        idle = socket.create_connection(hub.address)
        idle.sendall(ClientHandshake(hub.keys).hello)  # the hello, and then nothing
        assert events_until_none(hub, 2.0) == [Disconnected(0, None)]
        assert hub.connections == 0
        idle.close()
    finally:
        hub.close()


def test_a_frame_for_another_worker_or_one_that_cannot_be_unpickled_closes_its_connection_only(hub):
    (astray, to_astray), (broken, to_broken), (good, to_good) = connect(hub), connect(hub), connect(hub)
    assert events_until_none(hub, 0.2) == []  # all three accepted, in this order
    astray.sendall(to_astray.seal(encode(["tuples"], 3)))  # tuples go over the links, never the hub
    payload = b"not a pickle"
    broken.sendall(
        to_broken.seal(encode(["first"], TO_DRIVER)) + to_broken.seal(HEADER.pack(len(payload), TO_DRIVER) + payload)
    )
    good.sendall(to_good.seal(encode(["still", "here"], TO_DRIVER)))
    events = events_until_none(hub)
    assert Disconnected(0, None) in events and Disconnected(1, None) in events
    assert [e for e in events if isinstance(e, Received)] == [
        Received(1, ["first"]),
        Received(2, ["still", "here"]),
    ]
    assert events.index(Received(1, ["first"])) < events.index(Disconnected(1, None))  # what came before stays
    assert hub.connections == 1


def test_a_posted_event_comes_after_what_the_workers_sent_before_it(hub):
    worker, session = connect(hub)
    assert hub.next_event(0.2) is None
    worker.sendall(session.seal(encode(["report", 1], TO_DRIVER)) + session.seal(encode(["failed", 1], TO_DRIVER)))
    hub.post("job ended")
    assert [getattr(e, "message", e) for e in events_until_none(hub)] == [["report", 1], ["failed", 1], "job ended"]


def test_a_poll_that_waits_for_ever_returns_when_woken_from_another_thread(hub):
    returned = []
    poller = threading.Thread(target=lambda: returned.append(hub.next_event(None)))
    poller.start()
    hub.wake()
    poller.join(timeout=30)
    assert returned == [None]


def test_what_a_send_could_not_write_goes_out_as_the_poll_finds_room(hub):
    worker, session = connect(hub, receive_buffer=4096)
    assert hub.next_event(0.2) is None
    big = [b"y" * 8_000_000, list(range(10))]
    hub.send([(0, big), (0, "after it")])
    assert hub.buffered_bytes() > 0
    received: list = []

    def read() -> None:
        with worker.makefile("rb") as stream:
            for _ in range(2):
                _, _, payload = session.read(stream.read)
                received.append(pickle.loads(payload))

    reader = threading.Thread(target=read)
    reader.start()
    while reader.is_alive():
        hub.next_event(0.05)
    assert received == [big, "after it"]
    assert hub.buffered_bytes() == 0
