"""The driver's hub, read by the thread that polls it: whole frames from partial reads, the run's secret first,
a closed connection as one ``Disconnected``, events posted by other threads after what the workers sent
before them, and a poll that waits woken from another thread."""

from __future__ import annotations

import pickle
import socket
import threading
from collections.abc import Iterator

import pytest

from squall.spark.hub import Disconnected, Hub, Received
from squall.spark.protocol import HEADER, TO_DRIVER, Hello, encode


@pytest.fixture
def hub() -> Iterator[Hub]:
    hub = Hub("127.0.0.1")
    yield hub
    hub.close()


def connect(hub: Hub, secret: bytes | None = None, receive_buffer: int | None = None) -> socket.socket:
    worker = socket.socket()
    if receive_buffer is not None:  # before connecting: the window stays small
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    worker.connect(hub.address)
    worker.sendall(hub.secret if secret is None else secret)
    return worker


def events_until_none(hub: Hub, timeout: float = 0.5) -> list:
    events = []
    while (event := hub.next_event(timeout)) is not None:
        events.append(event)
    return events


def test_frames_split_across_reads_come_whole_and_in_order(hub):
    worker = connect(hub)
    frames = encode(Hello(0, 0, 1, "h", 1, ("127.0.0.1", 1)), TO_DRIVER) + encode(["a", 1], TO_DRIVER)
    events = []
    for i in range(len(frames)):  # a byte at a time, read as it comes: the frames split everywhere
        worker.sendall(frames[i : i + 1])
        if (event := hub.next_event(0.0)) is not None:
            events.append(event)
    worker.sendall(encode(["b", 2], TO_DRIVER))
    events += events_until_none(hub)
    assert [e.message for e in events] == [Hello(0, 0, 1, "h", 1, ("127.0.0.1", 1)), ["a", 1], ["b", 2]]
    assert {e.connection for e in events} == {0}
    worker.close()
    assert events_until_none(hub) == [Disconnected(0, 0)]  # the worker its Hello named
    assert hub.connections == 0


def test_a_connection_without_the_secret_is_closed_before_anything_is_unpickled(hub):
    intruder = connect(hub, b"x" * len(hub.secret))
    intruder.sendall(encode(["never", "read"], TO_DRIVER))
    assert events_until_none(hub) == [Disconnected(0, None)]
    assert intruder.recv(1) == b""  # closed by the hub
    assert hub.bytes_in == 0


def test_a_frame_for_another_worker_or_one_that_cannot_be_unpickled_closes_its_connection_only(hub):
    astray, broken, good = connect(hub), connect(hub), connect(hub)
    assert events_until_none(hub, 0.2) == []  # all three accepted, in this order
    astray.sendall(encode(["tuples"], 3))  # tuples go over the links, never the hub
    payload = b"not a pickle"
    broken.sendall(encode(["first"], TO_DRIVER) + HEADER.pack(len(payload), TO_DRIVER) + payload)
    good.sendall(encode(["still", "here"], TO_DRIVER))
    events = events_until_none(hub)
    assert Disconnected(0, None) in events and Disconnected(1, None) in events
    assert [e for e in events if isinstance(e, Received)] == [
        Received(1, ["first"]),
        Received(2, ["still", "here"]),
    ]
    assert events.index(Received(1, ["first"])) < events.index(Disconnected(1, None))  # what came before stays
    assert hub.connections == 1


def test_a_posted_event_comes_after_what_the_workers_sent_before_it(hub):
    worker = connect(hub)
    assert hub.next_event(0.2) is None
    worker.sendall(encode(["report", 1], TO_DRIVER) + encode(["failed", 1], TO_DRIVER))
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
    worker = connect(hub, receive_buffer=4096)
    assert hub.next_event(0.2) is None
    big = [b"y" * 8_000_000, list(range(10))]
    hub.send([(0, big), (0, "after it")])
    assert hub.buffered_bytes() > 0
    received: list = []

    def read() -> None:
        with worker.makefile("rb") as stream:
            for _ in range(2):
                length, _ = HEADER.unpack(stream.read(HEADER.size))
                received.append(pickle.loads(stream.read(length)))

    reader = threading.Thread(target=read)
    reader.start()
    while reader.is_alive():
        hub.next_event(0.05)
    assert received == [big, "after it"]
    assert hub.buffered_bytes() == 0
