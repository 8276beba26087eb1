"""Worker-to-worker links (``squall/spark/links.py``): a connection proves the run's secret before anything it
sends is unpickled, and what a peer with the secret sends arrives in its order."""

from __future__ import annotations

import os
import socket

from squall.spark.links import PEER, Inbox, PeerLinks, PeerListener
from squall.spark.protocol import SECRET_BYTES, encode


class MakesADirectory:
    """Unpickled, it makes a directory: the mark that bytes from a stranger were unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_a_link_without_the_runs_secret_is_closed_before_anything_it_sent_is_unpickled(tmp_path):
    secret = os.urandom(SECRET_BYTES)
    inbox = Inbox()
    listener = PeerListener("127.0.0.1", secret, inbox)
    marker = tmp_path / "unpickled"
    try:
        with socket.create_connection(listener.address, timeout=30) as stranger:
            stranger.sendall(bytes(SECRET_BYTES) + encode(MakesADirectory(str(marker)), PEER))
            assert stranger.recv(1) == b""  # closed by the listener
        links = PeerLinks(secret)
        links.update({1: listener.address})
        for n in range(3):
            links.send(1, ("from a peer", n))
        assert [inbox.get() for _ in range(3)] == [("from a peer", 0), ("from a peer", 1), ("from a peer", 2)]
        assert not marker.exists() and inbox.buffered == 0
        links.close()
    finally:
        listener.close()
