"""What crosses the wire of a running topology, read off the loopback interface as a capture tool would; and how
squall follows Spark's own security settings.

With ``squall.links.encrypt`` on, no word of any tuple appears in what the topology's processes send each other;
with it off (the control), the same capture finds them, so the capture does see the links. Spark's RPC encryption
turns squall's on, and a run that would turn it off while Spark's is on is refused, naming the key to set."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import threading

import pytest
from servers import wait_for

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder
from squall.model.errors import InvalidConfigError
from squall.security.keys import checkpoint_encryption, link_encryption

SENTENCES = 400
ETH_P_ALL = 0x0003


def word(i: int, j: int) -> str:
    """A word no other process on this machine sends: made where the spout runs, never pickled with the topology."""
    return f"zq{i:04d}quokka{j}"


class Sentences(Spout):
    outputs = ("sentence",)

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        if self.next < SENTENCES:
            i, self.next = self.next, self.next + 1
            self.collector.emit([" ".join(word(i, j) for j in range(4))], msg_id=i)


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for w in tup["sentence"].split(" "):
            collector.emit([w])


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


class LoopbackCapture:
    """Every packet on ``lo`` while it runs, as bytes (an AF_PACKET socket, as tcpdump opens)."""

    def __init__(self) -> None:
        try:
            self._socket = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
        except PermissionError:
            if os.environ.get("CI"):
                raise
            pytest.skip("capturing packets needs CAP_NET_RAW (root)")
        self._socket.bind(("lo", 0))
        self._socket.settimeout(0.2)
        self.captured = bytearray()
        self._running = True
        self._thread = threading.Thread(target=self._capture, daemon=True)
        self._thread.start()

    def _capture(self) -> None:
        while self._running:
            try:
                self.captured += self._socket.recv(1 << 16)
            except TimeoutError:
                continue

    def stop(self) -> bytes:
        self._running = False
        self._thread.join()
        self._socket.close()
        return bytes(self.captured)


@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "plain-control"])
def test_with_encryption_on_no_word_of_a_tuple_crosses_loopback_in_clear(spark, encrypt):
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("sink", Sink(), 2).shuffle_grouping("split")
    capture = LoopbackCapture()
    try:
        with LocalCluster() as cluster:
            run = cluster.submit_topology("secrets", {"squall.links.encrypt": encrypt}, builder.build())
            wait_for(lambda: run.stats.of("sentences").acked == SENTENCES, "every sentence acked")
            assert run.stats.of("sink").executed == SENTENCES * 4
    finally:
        captured = capture.stop()
    seen = {word(i, j) for i in range(SENTENCES) for j in range(4) if word(i, j).encode() in captured}
    if encrypt:
        assert seen == set()
        assert b"quokka" not in captured
    else:  # the capture sees the links: in clear, the words are there
        assert len(seen) > SENTENCES


def test_squall_follows_sparks_encryption_settings_and_refuses_to_contradict_them():
    assert link_encryption({}, {}) is False
    assert link_encryption({"squall.links.encrypt": True}, {}) is True
    assert link_encryption({}, {"spark.network.crypto.enabled": "true"}) is True
    assert link_encryption({}, {"spark.ssl.enabled": "true"}) is True
    with pytest.raises(
        InvalidConfigError, match=re.escape("spark.network.crypto.enabled is on but squall.links.encrypt")
    ):
        link_encryption({"squall.links.encrypt": False}, {"spark.network.crypto.enabled": "true"})
    assert checkpoint_encryption({}, {"spark.io.encryption.enabled": "true"}) is True
    with pytest.raises(InvalidConfigError, match=re.escape("set squall.checkpoint.encrypt to true")):
        checkpoint_encryption({"squall.checkpoint.encrypt": False}, {"spark.io.encryption.enabled": "true"})


TOPOLOGY_FILE = textwrap.dedent(
    """
    from squall import BasicBolt, Spout, TopologyBuilder


    class Numbers(Spout):
        outputs = ("n",)

        def open(self, conf, context, collector):
            self.collector, self.next = collector, 0

        def next_tuple(self):
            if self.next < 50:
                self.collector.emit([self.next], msg_id=self.next)
                self.next += 1


    class Sink(BasicBolt):
        outputs = ()

        def execute(self, tup, collector):
            pass


    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("sink", Sink(), 2).shuffle_grouping("numbers")
    topology = builder.build()
    """
)


def squall_run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "encrypted_run.py"
    path.write_text(TOPOLOGY_FILE)
    command = [sys.executable, "-m", "squall.cli", "-v", "run", str(path), "--master", "local[2]", "--no-ui"]
    command += ["--idle-secs", "1", "--conf", f"squall.checkpoint.dir={tmp_path / 'checkpoints'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)


SPARK_ENCRYPTS = ("--spark-conf", "spark.authenticate=true", "--spark-conf", "spark.network.crypto.enabled=true")


def test_squall_run_encrypts_its_links_when_spark_encrypts_its_own(tmp_path):
    done = squall_run(tmp_path, *SPARK_ENCRYPTS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "links authenticated by challenge and encrypted (AES-256-GCM)" in done.stderr, done.stderr[-3000:]


def test_squall_run_refuses_links_in_clear_when_spark_encrypts_its_own(tmp_path):
    done = squall_run(tmp_path, *SPARK_ENCRYPTS, "--conf", "squall.links.encrypt=false")
    assert done.returncode != 0
    assert "spark.network.crypto.enabled is on but squall.links.encrypt is false" in done.stderr + done.stdout
    assert "set squall.links.encrypt to true" in done.stderr + done.stdout
