"""A link between two running workers breaks: what it carried is lost, and neither worker is. The driver hears of
it from the worker whose link broke, starts both again from the last completed wave, and the waves in flight run
again on new links: every tree is acked, none failed, and nothing stalls. Links that keep breaking stop the
topology, loudly, as workers that keep failing do."""

import contextlib
import gc
import os
import socket
import time
from pathlib import Path

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder
from squall.spark.links import PeerLinks

NUMBERS = 3000
BREAK_AT = 1000


class Numbers(Spout):
    """Emits 0 to NUMBERS - 1, one a call, and writes each id acked or failed to its own line of ``path``."""

    outputs = ("n",)

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, conf, context, collector):
        self.collector, self.next, self.log = collector, 0, open(self.path, "a")  # noqa: SIM115

    def next_tuple(self):
        if self.next < NUMBERS:
            self.collector.emit([self.next], msg_id=self.next)
            self.next += 1

    def ack(self, msg_id):
        self.log.write(f"acked {msg_id}\n")
        self.log.flush()

    def fail(self, msg_id):
        self.log.write(f"failed {msg_id}\n")
        self.log.flush()

    def close(self):
        self.log.close()


def shut_down_peer_links() -> None:
    """Shut down every link this worker process opened to its peers, as a connection reset under both would."""
    for links in [obj for obj in gc.get_objects() if isinstance(obj, PeerLinks)]:
        for link in list(links._sockets.values()):
            with contextlib.suppress(OSError):  # shut down already
                link.shutdown(socket.SHUT_RDWR)


class BreakLinksOnce(BasicBolt):
    """Relays each number. At ``BREAK_AT``, the first time in the whole run (a marker file says so), it shuts down
    the links its worker opened to its peers, as a connection reset under two running workers would."""

    outputs = ("n",)

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def execute(self, tup, collector):
        if tup[0] == BREAK_AT and not os.path.exists(self.marker):
            Path(self.marker).touch()
            shut_down_peer_links()
        collector.emit([tup[0]])


class BreakLinksAlways(BasicBolt):
    """Shuts down its worker's links to its peers at every tuple: no wave that crosses a link can complete."""

    outputs = ("n",)

    def execute(self, tup, collector):
        shut_down_peer_links()
        collector.emit([tup[0]])


class Seen(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def test_a_link_that_breaks_between_running_workers_is_recovered_and_every_tree_acked(spark, tmp_path):
    acks, marker = tmp_path / "acks.txt", tmp_path / "broken"
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(str(acks)))
    b.set_bolt("relay", BreakLinksOnce(str(marker)), 2).shuffle_grouping("numbers")
    b.set_bolt("seen", Seen(), 2).fields_grouping("relay", ["n"])  # half of each worker's relays cross a link
    with LocalCluster() as cluster:
        run = cluster.submit_topology("broken-link", {"squall.workers": 2}, b.build())
        while len(run.scheduler.hellos) < 2:
            time.sleep(0.05)
        processes = {worker: pid for worker, (_, pid, _) in run.scheduler.hellos.items()}
        deadline = time.monotonic() + 120
        while run.stats.of("numbers").acked < NUMBERS and time.monotonic() < deadline and not cluster.failures:
            time.sleep(0.05)
        assert not cluster.failures
        assert marker.exists()  # the links did break
        assert run.scheduler.recoveries >= 1 and run.scheduler.generation >= 2
        assert {worker: pid for worker, (_, pid, _) in run.scheduler.hellos.items()} == processes  # none lost
        stats = run.stats.of("numbers")
        assert stats.acked == NUMBERS and stats.failed == 0 and stats.emitted == NUMBERS
        assert run.stats.of("seen").executed >= NUMBERS
    lines = acks.read_text().split()
    acked = {int(n) for kind, n in zip(lines[::2], lines[1::2], strict=True) if kind == "acked"}
    failed = {int(n) for kind, n in zip(lines[::2], lines[1::2], strict=True) if kind == "failed"}
    assert acked == set(range(NUMBERS)) and failed == set()


def test_links_that_keep_breaking_stop_the_topology_with_the_reason(spark, tmp_path):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(str(tmp_path / "acks.txt")))
    b.set_bolt("relay", BreakLinksAlways(), 2).shuffle_grouping("numbers")
    b.set_bolt("seen", Seen(), 2).fields_grouping("relay", ["n"])
    with LocalCluster() as cluster:
        cluster.submit_topology("breaking-links", {"squall.workers": 2, "squall.wave.max.failures": 2}, b.build())
        deadline = time.monotonic() + 60
        while not cluster.failures and time.monotonic() < deadline:
            time.sleep(0.05)
        failure = cluster.take_failure("breaking-links")
        assert failure is not None and list(cluster.failures) == ["breaking-links"]
        assert "2 worker restarts in a row with no wave completed" in str(failure)
        assert "link to worker" in str(failure)
