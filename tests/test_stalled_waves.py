"""A wave that makes no progress for ``squall.wave.stall.secs``: at half of it the driver names what it waits for
and logs each worker's own account; at all of it every worker starts again from the last complete snapshot, and
the waves in flight run again. A tree's timeout turns with the waves, so without this a wave that never completes
would hold its trees, and the spouts, for ever. Waves that keep stalling stop the topology, loudly."""

import logging
import os
import time
from pathlib import Path

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder

NUMBERS = 3000
HOLD_AT = 1000
HOLD_AT_MOST_SECS = 60  # a held bolt goes on by itself after this, so that no test can hang on it


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


class Hold(BasicBolt):
    """Relays each number. At ``HOLD_AT`` it waits until the file ``release`` exists: the first time in the whole
    run only (the file ``held`` says it happened), or every time with ``always``."""

    outputs = ("n",)

    def __init__(self, held: str, release: str, always: bool = False) -> None:
        self.held, self.release, self.always = held, release, always

    def execute(self, tup, collector):
        if tup[0] == HOLD_AT and (self.always or not os.path.exists(self.held)):
            Path(self.held).touch()
            deadline = time.monotonic() + HOLD_AT_MOST_SECS
            while not os.path.exists(self.release) and time.monotonic() < deadline:
                time.sleep(0.05)
        collector.emit([tup[0]])


class Seen(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def topology(tmp_path: Path, always: bool = False):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(str(tmp_path / "acks.txt")))
    b.set_bolt("relay", Hold(str(tmp_path / "held"), str(tmp_path / "release"), always), 2).shuffle_grouping("numbers")
    b.set_bolt("seen", Seen(), 2).fields_grouping("relay", ["n"])
    return b.build()


def test_a_wave_that_makes_no_progress_is_described_then_run_again_and_every_tree_acked(spark, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="squall")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("stalled", {"squall.workers": 2, "squall.wave.stall.secs": 3}, topology(tmp_path))
        while len(run.scheduler.hellos) < 2:
            time.sleep(0.05)
        processes = {worker: pid for worker, (_, pid, _) in run.scheduler.hellos.items()}
        deadline = time.monotonic() + 60
        while run.scheduler.recoveries == 0 and time.monotonic() < deadline and not cluster.failures:
            time.sleep(0.05)
        assert run.scheduler.recoveries == 1 and run.scheduler.generation == 2  # the stall started them again
        (tmp_path / "release").touch()  # the held bolt goes on: its worker takes the new generation's Assign
        deadline = time.monotonic() + 120
        while run.stats.of("numbers").acked < NUMBERS and time.monotonic() < deadline and not cluster.failures:
            time.sleep(0.05)
        assert not cluster.failures
        assert {worker: pid for worker, (_, pid, _) in run.scheduler.hellos.items()} == processes  # none lost
        stats = run.stats.of("numbers")
        assert stats.acked == NUMBERS and stats.failed == 0 and stats.emitted == NUMBERS
        assert run.stats.of("seen").executed >= NUMBERS
    lines = acks_of(tmp_path)
    assert lines["acked"] == set(range(NUMBERS)) and lines["failed"] == set()
    logged = caplog.text
    assert "in flight for" in logged and "no report yet from tasks" in logged
    # The worker not held answered the driver's question; the held one could not, its thread being in the bolt.
    assert "(generation 1) says: task" in logged and "waiting for the last batch of" in logged
    assert "made no progress in 3s (squall.wave.stall.secs)" in logged


def test_waves_that_keep_stalling_stop_the_topology_with_the_reason(spark, tmp_path):
    with LocalCluster() as cluster:
        conf = {"squall.workers": 2, "squall.wave.stall.secs": 2, "squall.wave.max.failures": 2}
        cluster.submit_topology("stalling", conf, topology(tmp_path, always=True))
        try:
            deadline = time.monotonic() + 60
            while not cluster.failures and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            (tmp_path / "release").touch()  # the held worker may stop
        failure = cluster.take_failure("stalling")
        assert failure is not None and list(cluster.failures) == ["stalling"]
        assert "2 worker restarts in a row with no wave completed" in str(failure)
        assert "made no progress in 2s (squall.wave.stall.secs)" in str(failure)


def acks_of(tmp_path: Path) -> dict[str, set[int]]:
    lines = (tmp_path / "acks.txt").read_text().split()
    found: dict[str, set[int]] = {"acked": set(), "failed": set()}
    for kind, n in zip(lines[::2], lines[1::2], strict=True):
        found[kind].add(int(n))
    return found
