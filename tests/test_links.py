"""Worker-to-worker links (``squall/spark/links.py``): both ends prove the run's secret before anything is
sent or unpickled, an encrypted record changed on the way closes its link unread, what a peer with the secret
sends arrives in its order, and a listener holds a bounded number of connections, each for a bounded time
until it proves the secret."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import threading
import time

import pytest
from servers import wait_for
from test_hub import closed_by_peer

from squall.security.handshake import CHALLENGE_BYTES, ClientHandshake, LinkKeys, ServerHandshake, client_handshake
from squall.spark.links import PEER, Inbox, PeerLinks, PeerListener
from squall.spark.protocol import encode


class MakesADirectory:
    """Unpickled, it makes a directory: the mark that bytes from a stranger were unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_a_link_without_the_runs_secret_is_closed_before_anything_it_sent_is_unpickled(tmp_path, encrypt):
    keys = LinkKeys.generate(encrypt)
    inbox = Inbox()
    listener = PeerListener("127.0.0.1", keys, inbox)
    marker = tmp_path / "unpickled"
    try:
        with socket.create_connection(listener.address, timeout=30) as stranger:
            stranger.sendall(ClientHandshake(LinkKeys(os.urandom(32), encrypt)).hello)
            stranger.recv(CHALLENGE_BYTES, socket.MSG_WAITALL)  # a challenge it cannot answer
            stranger.sendall(bytes(32) + encode(MakesADirectory(str(marker)), PEER))
            assert closed_by_peer(stranger)  # closed by the listener
        links = PeerLinks(keys)
        links.update({1: listener.address})
        for n in range(3):
            links.send(1, ("from a peer", n))
        assert [inbox.get() for _ in range(3)] == [("from a peer", 0), ("from a peer", 1), ("from a peer", 2)]
        assert not marker.exists() and inbox.buffered == 0
        links.close()
    finally:
        listener.close()


def test_a_peer_that_cannot_prove_the_secret_is_sent_nothing(tmp_path):
    """The sending end checks the listener too: a "peer" that does not know the secret gets the hello and no
    frame."""
    impostor = socket.create_server(("127.0.0.1", 0))
    received = bytearray()

    def pretend() -> None:
        connection, _ = impostor.accept()
        with connection:
            received.extend(connection.recv(1024))
            connection.sendall(os.urandom(CHALLENGE_BYTES))  # no MAC it could make
            connection.settimeout(5)
            while chunk := connection.recv(1 << 16):
                received.extend(chunk)

    thread = threading.Thread(target=pretend)
    thread.start()
    links = PeerLinks(LinkKeys.generate())
    links.update({1: impostor.getsockname()})
    links.send(1, ("a tuple's words", "never", "sent"))
    links.close()
    thread.join(timeout=30)
    impostor.close()
    assert len(received) == len(ClientHandshake(LinkKeys.generate()).hello)
    assert b"never" not in received


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_a_record_changed_on_the_way_closes_the_link_before_it_is_unpickled(tmp_path, encrypt):
    keys = LinkKeys.generate(encrypt)
    inbox = Inbox()
    listener = PeerListener("127.0.0.1", keys, inbox)
    marker = tmp_path / "unpickled"
    try:
        with socket.create_connection(listener.address, timeout=30) as peer:
            with peer.makefile("rb", buffering=0) as reply:
                session = client_handshake(reply.read, peer.sendall, keys)
            peer.sendall(session.seal(encode(("first",), PEER)))
            assert inbox.get() == ("first",)
            record = bytearray(session.seal(encode(MakesADirectory(str(marker)), PEER)))
            record[-20] ^= 0x80  # a bit of the ciphertext flipped
            peer.sendall(bytes(record))
            assert closed_by_peer(peer)  # closed by the listener
        assert not marker.exists()
        wait_for(lambda: listener.connections == 0, "the listener let the connection go")
    finally:
        listener.close()


def test_a_connection_that_trickles_its_handshake_is_closed_at_the_deadline_however_slow_its_bytes():
    """The handshake's time is a deadline for the whole of it, not a wait for each byte: a byte every 0.2 s would
    otherwise hold a connection for ever."""
    listener = PeerListener("127.0.0.1", LinkKeys.generate(), Inbox(), handshake_timeout=1.0)
    hello = ClientHandshake(LinkKeys.generate()).hello
    try:
        with socket.create_connection(listener.address, timeout=30) as slow:
            slow.settimeout(0.2)
            sent, closed = 0, False
            while sent < len(hello) and not closed:
                slow.sendall(hello[sent : sent + 1])
                sent += 1
                with contextlib.suppress(TimeoutError):
                    closed = closed_by_peer(slow)
            assert closed and sent < len(hello)  # 37 bytes would take 7 s at this pace
        wait_for(lambda: listener.connections == 0, "the listener let the connection go")
    finally:
        listener.close()


def test_a_challenge_that_arrives_in_pieces_still_opens_the_link():
    """A handshake message may come in several reads: the link opens all the same."""
    keys = LinkKeys.generate()
    peer = socket.create_server(("127.0.0.1", 0))
    received: list = []

    def serve_in_pieces() -> None:
        connection, _ = peer.accept()
        with connection, connection.makefile("rb") as stream:
            handshake = ServerHandshake(keys)
            challenge = handshake.challenge(stream.read(len(ClientHandshake(keys).hello)))
            for piece in (challenge[:10], challenge[10:40], challenge[40:]):
                connection.sendall(piece)
                time.sleep(0.1)
            session = handshake.finish(stream.read(32))
            received.append(session.read(stream.read))

    thread = threading.Thread(target=serve_in_pieces)
    thread.start()
    links = PeerLinks(keys)
    links.update({1: peer.getsockname()})
    links.send(1, ("through", "the", "link"))
    thread.join(timeout=30)
    links.close()
    peer.close()
    [(_, _, payload)] = received
    assert pickle.loads(payload) == ("through", "the", "link")


def test_a_listener_holds_at_most_its_cap_of_connections_and_drops_those_that_never_prove_the_secret():
    listener = PeerListener("127.0.0.1", LinkKeys.generate(), Inbox(), handshake_timeout=1.0, max_connections=8)
    idle = []
    try:
        for _ in range(50):
            idle.append(socket.create_connection(listener.address, timeout=30))
        wait_for(lambda: listener.connections == 8, "the listener at its cap")
        closed_at_once = [s for s in idle[8:] if closed_by_peer(s)]
        assert len(closed_at_once) == 42  # each one past the cap closed as it came
        assert listener.connections == 8
        # The eight it holds never say hello: each is closed once its handshake time is up.
        assert all(closed_by_peer(s) for s in idle[:8])
        wait_for(lambda: listener.connections == 0, "the idle connections dropped")
        assert threading.active_count() < 20  # no thread left behind for them
    finally:
        for s in idle:
            s.close()
        listener.close()
