"""The bytes held on the way: by the driver's hub (written to a worker's connection, not yet sent), and by the
workers' links (received and not yet handled; sent to a peer and not yet acknowledged). Each grows while the
other end does not read, and comes back to 0 once it has; a running topology shows both in its REST summary and
its metrics."""

from __future__ import annotations

import socket
import threading

from servers import wait_for
from test_hub import handshake
from test_ui import FailEveryThird, Numbers, get, metric, topology

from squall import LocalCluster
from squall.security.handshake import (
    CHALLENGE_BYTES,
    HELLO_BYTES,
    TAG_BYTES,
    LinkKeys,
    ServerHandshake,
    client_handshake,
    server_handshake,
)
from squall.spark.hub import Hub
from squall.spark.links import Inbox, PeerLinks
from squall.spark.protocol import HEADER, encode, read_frames

BIG = b"x" * 4_000_000  # more than a socket pair's buffers hold


def slow_reader() -> tuple[socket.socket, tuple[str, int]]:
    """A listening socket with a small receive buffer, which the test reads only when it chooses."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return server, server.getsockname()


def drain(connection: socket.socket, size: int) -> None:
    left = size
    while left > 0:
        left -= len(connection.recv(min(left, 1 << 20)))


def test_the_inbox_counts_the_bytes_of_the_frames_it_holds():
    inbox = Inbox()
    reader = socket.socketpair()
    keys = LinkKeys.generate()
    accepting = threading.Thread(
        target=lambda: sessions.append(server_handshake(reader[1].recv, reader[1].sendall, keys))
    )
    sessions: list = []
    accepting.start()
    sending = client_handshake(reader[0].recv, reader[0].sendall, keys)
    accepting.join()
    frames = [sending.seal(encode(["a", n], 0)) for n in range(3)]
    for frame in frames:
        reader[0].sendall(frame)
    reader[0].close()
    with reader[1].makefile("rb") as stream:
        read_frames(stream, sessions[0], inbox, None)
    assert inbox.buffered == sum(len(f) for f in frames)
    assert inbox.get() == ["a", 0]
    assert inbox.buffered == sum(len(f) for f in frames[1:])
    assert [inbox.get(), inbox.get(), inbox.get()] == [["a", 1], ["a", 2], None]
    assert inbox.buffered == 0


def test_a_link_counts_what_its_peer_has_not_acknowledged():
    server, address = slow_reader()
    keys = LinkKeys.generate()
    links = PeerLinks(keys)
    links.update({1: address})
    sender = threading.Thread(target=links.send, args=(1, BIG))
    sender.start()
    connection, _ = server.accept()
    handshake = ServerHandshake(keys)  # the peer's side, by hand: then it reads nothing for a while
    connection.sendall(handshake.challenge(connection.recv(HELLO_BYTES, socket.MSG_WAITALL)))
    handshake.finish(connection.recv(CHALLENGE_BYTES - 32, socket.MSG_WAITALL))
    wait_for(lambda: links.unsent_bytes() > 100_000, "bytes waiting on the link")
    drain(connection, len(encode(BIG, 0)) + TAG_BYTES)
    sender.join()
    wait_for(lambda: links.unsent_bytes() == 0, "the link emptied")
    links.close()
    connection.close()
    server.close()


def test_the_hub_counts_what_it_has_not_sent_yet():
    hub = Hub("127.0.0.1")
    try:
        worker = socket.socket()
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
        worker.connect(hub.address)
        handshake(hub, worker, hub.keys)
        assert hub.buffered_bytes() == 0
        hub.send([(0, BIG)])  # the socket takes what fits; the rest waits in the hub
        assert hub.buffered_bytes() > 100_000

        # The driver's thread polls, as a run's does; what waits goes out as the worker reads.
        def poll() -> None:
            while hub.buffered_bytes():
                hub.next_event(0.05)

        poller = threading.Thread(target=poll)
        poller.start()
        length, _ = HEADER.unpack(worker.recv(HEADER.size, socket.MSG_WAITALL))
        drain(worker, length)
        wait_for(lambda: hub.buffered_bytes() == 0, "the hub's buffer emptied")
        poller.join()
        worker.close()
    finally:
        hub.close()


def test_a_running_topology_shows_its_buffered_bytes(spark):
    spout = Numbers(30)
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        url = cluster.ui.url
        cluster.submit_topology("numbers", {}, topology(spout, FailEveryThird()))
        wait_for(lambda: len(spout.acked) + len(spout.failed) == 30, "settled trees")
        (summary,) = get(f"{url}/api/v1/topology/summary")["topologies"]
        # Idle: at most a wave's control messages are on the way.
        assert 0 <= summary["hubBufferedBytes"] < 10_000 and 0 <= summary["linkBufferedBytes"] < 10_000
        metrics = get(f"{url}/metrics")
        assert 0 <= metric(metrics, "squall_hub_buffered_bytes", topology="numbers") < 10_000
        assert 0 <= metric(metrics, "squall_link_buffered_bytes", topology="numbers") < 10_000
