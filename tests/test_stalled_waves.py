"""A wave that makes no progress for ``squall.wave.stall.secs``: at half of it the driver names what it waits for
and asks every worker for its own account, which it logs. At all of it, if every worker answered (none is at work
in a component), every worker starts again from the last complete snapshot and the waves in flight run again: a
tree's timeout turns with the waves, so a wave that never completes would hold its trees, and the spouts, for
ever. Waves that keep stalling stop the topology, loudly; a worker busy in a bolt is waited for."""

import gc
import logging
import os
import re
import time
from pathlib import Path

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder
from squall.spark.protocol import DRIVER
from squall.spark.wave_gate import Arrived
from squall.spark.worker import Worker

NUMBERS = 3000
AT = 1000
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


def lose_the_next_last_batch(bolt: BasicBolt) -> None:
    """As a message lost between two workers would: the next ``last`` batch from a task that ``bolt``'s worker
    takes never reaches its task, which never ends its wave, and both workers wait with nothing to do."""
    worker = next(
        w for w in gc.get_objects() if isinstance(w, Worker) and any(h.task.bolt is bolt for h in w.tasks.values())
    )
    gate, handle = worker.gate, worker.gate.handle

    def losing(event):
        if isinstance(event, Arrived) and event.batch and event.message.last and event.message.producer != DRIVER:
            gate.handle = handle
            return []
        return handle(event)

    gate.handle = losing


class LoseOnce(BasicBolt):
    """Relays each number; at ``AT``, the first time in the whole run (the file ``marker`` says so), its worker
    loses the next ``last`` batch it takes; with ``always``, every time."""

    outputs = ("n",)

    def __init__(self, marker: str, always: bool = False) -> None:
        self.marker, self.always = marker, always

    def execute(self, tup, collector):
        if tup[0] == AT and (self.always or not os.path.exists(self.marker)):
            Path(self.marker).touch()
            lose_the_next_last_batch(self)
        collector.emit([tup[0]])


class Hold(BasicBolt):
    """Relays each number; at ``AT``, the first time in the whole run (the file ``held`` says so), it waits until
    the file ``release`` exists, as a sink waiting for its broker would."""

    outputs = ("n",)

    def __init__(self, held: str, release: str) -> None:
        self.held, self.release = held, release

    def execute(self, tup, collector):
        if tup[0] == AT and not os.path.exists(self.held):
            Path(self.held).touch()
            deadline = time.monotonic() + HOLD_AT_MOST_SECS
            while not os.path.exists(self.release) and time.monotonic() < deadline:
                time.sleep(0.05)
        collector.emit([tup[0]])


class Seen(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def topology(tmp_path: Path, relay: BasicBolt):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(str(tmp_path / "acks.txt")))
    b.set_bolt("relay", relay, 2).shuffle_grouping("numbers")
    b.set_bolt("seen", Seen(), 2).fields_grouping("relay", ["n"])  # half of each worker's relays cross a link
    return b.build()


def wait_until(condition, cluster, secs: float = 120) -> None:
    deadline = time.monotonic() + secs
    while not condition() and time.monotonic() < deadline and not cluster.failures:
        time.sleep(0.05)


def acks_of(tmp_path: Path) -> dict[str, set[int]]:
    lines = (tmp_path / "acks.txt").read_text().split()
    found: dict[str, set[int]] = {"acked": set(), "failed": set()}
    for kind, n in zip(lines[::2], lines[1::2], strict=True):
        found[kind].add(int(n))
    return found


def test_a_wave_that_makes_no_progress_is_described_then_run_again_and_every_tree_acked(spark, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="squall")
    relay = LoseOnce(str(tmp_path / "lost"))
    with LocalCluster() as cluster:
        conf = {"squall.workers": 2, "squall.wave.stall.secs": 3}
        run = cluster.submit_topology("stalled", conf, topology(tmp_path, relay))
        wait_until(lambda: len(run.scheduler.hellos) == 2, cluster)
        processes = {worker: pid for worker, (_, pid, _) in run.scheduler.hellos.items()}
        wait_until(lambda: run.stats.of("numbers").acked == NUMBERS, cluster)
        assert not cluster.failures
        assert (tmp_path / "lost").exists()  # a batch was lost
        assert run.scheduler.recoveries == 1 and run.scheduler.generation == 2  # the stall started them again
        assert {worker: pid for worker, (_, pid, _) in run.scheduler.hellos.items()} == processes  # none lost
        stats = run.stats.of("numbers")
        assert stats.acked == NUMBERS and stats.failed == 0 and stats.emitted == NUMBERS
        assert run.stats.of("seen").executed >= NUMBERS
    found = acks_of(tmp_path)
    assert found["acked"] == set(range(NUMBERS)) and found["failed"] == set()
    logged = caplog.text
    assert "no report yet from tasks" in logged
    for worker in (0, 1):  # both answered: what each task waits for, the spouts' worker its spout part too
        assert f"worker {worker} (generation 1) says: task" in logged
    assert "waiting for the last batch of" in logged and "spout part: " in logged
    assert re.search(r"made no progress in \d+s \(squall\.wave\.stall\.secs\)", logged)


def test_waves_that_keep_stalling_stop_the_topology_with_the_reason(spark, tmp_path):
    relay = LoseOnce(str(tmp_path / "lost"), always=True)
    with LocalCluster() as cluster:
        conf = {"squall.workers": 2, "squall.wave.stall.secs": 2, "squall.wave.max.failures": 2}
        cluster.submit_topology("stalling", conf, topology(tmp_path, relay))
        wait_until(lambda: False, cluster, 60)
        failure = cluster.take_failure("stalling")
        assert failure is not None and list(cluster.failures) == ["stalling"]
        assert "2 worker restarts in a row with no wave completed" in str(failure)
        assert re.search(r"made no progress in \d+s \(squall\.wave\.stall\.secs\)", str(failure))


def test_a_worker_at_work_in_a_bolt_is_waited_for_not_started_again(spark, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="squall")
    held, release = tmp_path / "held", tmp_path / "release"
    with LocalCluster() as cluster:
        conf = {"squall.workers": 2, "squall.wave.stall.secs": 2}
        run = cluster.submit_topology("busy", conf, topology(tmp_path, Hold(str(held), str(release))))
        wait_until(held.exists, cluster)
        wait_until(lambda: "did not say what they wait for" in caplog.text, cluster, 30)  # two half periods
        release.touch()
        wait_until(lambda: run.stats.of("numbers").acked == NUMBERS, cluster)
        assert not cluster.failures
        assert run.scheduler.recoveries == 0 and run.scheduler.generation == 1
        assert run.stats.of("numbers").acked == NUMBERS and run.stats.of("numbers").failed == 0
    found = acks_of(tmp_path)
    assert found["acked"] == set(range(NUMBERS)) and found["failed"] == set()
    assert "did not say what they wait for: at work in a bolt or spout" in caplog.text
