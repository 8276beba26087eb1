"""A tree is acked once its last tuple is executed and its worker has a moment with nothing else to do, not when
the wave that carried it ends everywhere.

Two spout tuples, ``A`` and ``B``, go out in the same wave, to the two tasks of ``first`` (on the two workers), and
on to the one ``sink`` task. ``first``'s task with ``B`` does not return until the spout has been told ``A`` is
acked. ``sink`` cannot end the wave before that task has, so if ``A``'s acks waited for the end of the wave, they
would wait for ``B``, which waits for them: ``B``'s task gives up after ``GIVE_UP_SECS`` and says so.
"""

from __future__ import annotations

import time
from pathlib import Path

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder
from squall.model.hashing import stable_hash

GIVE_UP_SECS = 30


def _keys_for_each_task(tasks: int) -> list[int]:
    """A value of ``n`` for each task of a ``tasks``-task fields grouping on ``n``, in task order."""
    keys: dict[int, int] = {}
    n = 0
    while len(keys) < tasks:
        keys.setdefault(stable_hash([n]) % tasks, n)
        n += 1
    return [keys[i] for i in range(tasks)]


A, B = _keys_for_each_task(2)


class TwoTuples(Spout):
    """Emits ``A`` then ``B``, one a call; each ack leaves a file named for it."""

    outputs = ("n",)

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, conf, context, collector):
        self.collector, self.left = collector, [A, B]

    def next_tuple(self):
        if self.left:
            n = self.left.pop(0)
            self.collector.emit([n], msg_id=n)

    def ack(self, msg_id):
        Path(self.directory, f"acked-{msg_id}").touch()


class WaitsForA(BasicBolt):
    """Passes each tuple on; ``B`` only once ``A`` is acked, or after ``GIVE_UP_SECS``, noting which."""

    outputs = ("n",)

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def execute(self, tup, collector):
        if tup["n"] == B:
            deadline = time.monotonic() + GIVE_UP_SECS
            acked = Path(self.directory, f"acked-{A}")
            while not acked.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            Path(self.directory, "B-saw-A-acked" if acked.exists() else "B-gave-up").touch()
        collector.emit([tup["n"]])


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def test_a_tree_is_acked_before_its_wave_ends(spark, tmp_path):
    b = TopologyBuilder()
    b.set_spout("two", TwoTuples(str(tmp_path)))
    b.set_bolt("first", WaitsForA(str(tmp_path)), 2).fields_grouping("two", ["n"])
    b.set_bolt("sink", Sink()).shuffle_grouping("first")
    with LocalCluster() as cluster:
        cluster.submit_topology("early-acks", {}, b.build())
        stats = cluster.wait_idle("early-acks", timeout=GIVE_UP_SECS * 4)
        assert not cluster.failures
    assert stats.of("two").acked == 2 and stats.of("two").failed == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["B-saw-A-acked", f"acked-{A}", f"acked-{B}"]
