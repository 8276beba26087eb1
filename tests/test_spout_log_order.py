"""A wave's spout emits leave before its log is written, and no tree is acked before the log of its wave is.

The spout tasks' logs are what a run again after a worker loss replays: a tree acked before its wave's log is
written could be acked and then lost. The log is written off the emits' way, when the worker is idle, and at the
latest before the worker's ackers apply any ack: this drives one worker's spout and acker tasks message by message.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from squall import BasicBolt, Spout, TopologyBuilder
from squall.reliability.acks import AckBatch
from squall.security import BlobSealer
from squall.spark.protocol import AckerInput, RunSettings, WaveInput
from squall.spark.shipping import shipped_here
from squall.spark.snapshots import SnapshotStore
from squall.spark.worker_spouts import WorkerSpouts

RUN = "logged-0123456789ab"


class Numbers(Spout):
    """Emits 0, 1, 2, ...; at each ``ack`` it notes which of its waves' logs exist then."""

    outputs = ("n",)

    def __init__(self, logs: str) -> None:
        self.logs = logs

    def open(self, conf, context, collector):
        self.collector, self.next, self.acked = collector, 0, []

    def next_tuple(self):
        self.collector.emit([self.next], msg_id=self.next)
        self.next += 1

    def ack(self, msg_id):
        logs = Path(self.logs)
        self.acked.append((msg_id, sorted(p.name for p in logs.glob("task-*/wave-*"))))


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def one_worker(tmp_path):
    """The spout and acker tasks of ``numbers -> sink`` on one worker, logging under ``tmp_path``: the
    ``WorkerSpouts``, its ``SnapshotStore``, and the spout's and the sink's task ids."""
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(str(tmp_path / RUN / "spout-log")))
    b.set_bolt("sink", Sink()).shuffle_grouping("numbers")
    topology = b.build()
    (spout_task,), (sink_task,) = topology.task_ids("numbers"), topology.task_ids("sink")
    settings = RunSettings(RUN, seed=1, acking=True, capture=False, num_ackers=1)
    store = SnapshotStore(str(tmp_path), RUN, BlobSealer(b"a checkpoint key of 32 bytes...."))
    spouts = WorkerSpouts(shipped_here(topology, {}), settings, [spout_task], [0], 1, 0, store)
    return spouts, store, spout_task, sink_task


def test_the_emits_leave_first_and_a_tree_is_acked_only_once_its_wave_is_logged(tmp_path):
    spouts, store, spout_task, sink_task = one_worker(tmp_path)
    sent = []

    spouts.run_wave(WaveInput(0, 1, None, (), spout_calls=3), 0, sent.append)

    (batch,) = sent
    assert [values for _, values in batch.rows()] == [(0,), (1,), (2,)]
    assert not (tmp_path / RUN / "spout-log").exists()  # the emits left; the log waits for an idle moment

    acks = AckBatch.from_acks(np.asarray(batch.roots), np.asarray(batch.edges), [], [])
    spouts.acker_input(AckerInput(0, 1, sink_task, acks, held=False, final=True))
    assert spouts.host.tasks[0].spout.acked == []  # applied when the worker is next idle
    spouts.settle_due()  # what the worker does when its inbox is empty

    spout = spouts.host.tasks[0].spout
    assert spout.acked == [(0, ["wave-1"]), (1, ["wave-1"]), (2, ["wave-1"])]  # logged before the first ack
    assert [list(b.rows()) for b in store.spout_wave(spout_task, 1)] == [
        [("default", (0,)), ("default", (1,)), ("default", (2,))]
    ]


def test_an_idle_worker_writes_the_log_and_a_commit_drops_it(tmp_path):
    spouts, _, _, _ = one_worker(tmp_path)

    spouts.run_wave(WaveInput(0, 1, None, (), spout_calls=2), 0, lambda batch: None)
    spouts.run_wave(WaveInput(0, 2, None, (), spout_calls=2), 0, lambda batch: None)  # logs wave 1 first
    assert [p.name for p in (tmp_path / RUN / "spout-log").glob("task-*/wave-*")] == ["wave-1"]

    spouts.settle_due()  # what the worker does when its inbox is empty
    assert sorted(p.name for p in (tmp_path / RUN / "spout-log").glob("task-*/wave-*")) == ["wave-1", "wave-2"]

    spouts.commit(2, snapshot=1)  # a complete snapshot holds wave 1's effects: its log goes
    assert [p.name for p in (tmp_path / RUN / "spout-log").glob("task-*/wave-*")] == ["wave-2"]
