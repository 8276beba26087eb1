"""A wave's spout emits leave before its log is written, and no tree is acked before the log of its wave is.

The spout tasks' logs are what a run again after a worker loss replays: a tree acked before its wave's log is
written could be acked and then lost. The log is written off the emits' way, when the worker is idle, and at the
latest before the worker's ackers apply any ack: this drives one worker's spout and acker tasks message by message.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from squall import BasicBolt, Spout, TopologyBuilder
from squall.reliability.acks import AckBatch
from squall.security import BlobSealer
from squall.spark.protocol import AckerInput, Batch, RunSettings, WaveInput
from squall.spark.shipping import shipped_here
from squall.spark.snapshots import (
    SEGMENT_MAGIC,
    SnapshotStore,
    filesystem_of,
    on_host_disk,
    pickle_spout_wave,
    wave_part,
)
from squall.spark.worker_spouts import WorkerSpouts

RUN = "logged-0123456789ab"


KEY = b"a checkpoint key of 32 bytes...."


def logged(root: Path, task: int) -> list[int]:
    """The waves of spout task ``task`` whose logs a worker could read from ``root`` now: a store of its own."""
    return SnapshotStore(str(root), RUN, BlobSealer(KEY)).logged_spout_waves(task)


class Numbers(Spout):
    """Emits 0, 1, 2, ...; at each ``ack`` it notes which of its waves' logs can be read then."""

    outputs = ("n",)

    def __init__(self, root: str) -> None:
        self.root = root

    def open(self, conf, context, collector):
        self.collector, self.next, self.acked = collector, 0, []
        self.task = context.task_id

    def next_tuple(self):
        self.collector.emit([self.next], msg_id=self.next)
        self.next += 1

    def ack(self, msg_id):
        self.acked.append((msg_id, logged(Path(self.root), self.task)))


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def one_worker(tmp_path, spout: Spout | None = None, conf: dict | None = None):
    """The spout and acker tasks of ``numbers -> sink`` on one worker, logging under ``tmp_path``: the
    ``WorkerSpouts``, its ``SnapshotStore``, and the spout's and the sink's task ids."""
    b = TopologyBuilder()
    b.set_spout("numbers", spout or Numbers(str(tmp_path)))
    b.set_bolt("sink", Sink()).shuffle_grouping("numbers")
    topology = b.build()
    (spout_task,), (sink_task,) = topology.task_ids("numbers"), topology.task_ids("sink")
    settings = RunSettings(RUN, seed=1, acking=True, capture=False, num_ackers=1)
    store = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))
    spouts = WorkerSpouts(shipped_here(topology, conf or {}), settings, [spout_task], [0], 1, 0, store)
    return spouts, store, spout_task, sink_task


class Trickle(Spout):
    """Has a tuple at every other call, as a source read while it is being written to."""

    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.next, self.calls = collector, 0, 0

    def next_tuple(self):
        self.calls += 1
        if self.calls % 2:
            self.collector.emit([self.next], msg_id=self.next)
            self.next += 1


def test_a_burst_leaves_in_slices_and_ends_at_the_first_slice_a_spout_ran_short_in(tmp_path):
    spouts, _, _, _ = one_worker(tmp_path / "full", conf={"squall.wave.spout.slice": 4})
    sent = []
    spouts.run_wave(WaveInput(0, 1, None, (), spout_calls=10), 0, sent.append)
    assert [[n for _, (n,) in batch.rows()] for batch in sent] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [batch.last for batch in sent] == [False, False, True]

    # A spout with a tuple now and then ends the burst at its first slice: the rest is the open wave's, called at
    # the worker's idle moments, rather than a part for every tuple or two that came meanwhile.
    spouts, _, _, _ = one_worker(tmp_path / "trickle", Trickle(), {"squall.wave.spout.slice": 4})
    sent = []
    spouts.run_wave(WaveInput(0, 1, None, (), spout_calls=10), 0, sent.append)
    assert [[n for _, (n,) in batch.rows()] for batch in sent] == [[0]]
    assert spouts.opened is not None  # the wave stays open for more


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
    assert spout.acked == [(0, [1]), (1, [1]), (2, [1])]  # logged before the first ack
    assert [list(b.rows()) for b in store.spout_wave(spout_task, 1)] == [
        [("default", (0,)), ("default", (1,)), ("default", (2,))]
    ]


def test_an_idle_worker_writes_the_log_and_a_commit_drops_it(tmp_path):
    spouts, store, spout_task, _ = one_worker(tmp_path)

    spouts.run_wave(WaveInput(0, 1, None, (), spout_calls=2), 0, lambda batch: None)
    spouts.run_wave(WaveInput(0, 2, None, (), spout_calls=2), 0, lambda batch: None)  # logs wave 1 first
    assert logged(tmp_path, spout_task) == [1]

    spouts.settle_due()  # what the worker does when its inbox is empty
    assert logged(tmp_path, spout_task) == [1, 2]

    # A complete snapshot holds wave 1's effects: the segment holding waves 1 and 2 is closed, and stays while
    # wave 2 is not in a complete snapshot; wave 3 starts a new segment.
    spouts.commit(2, snapshot=1)
    spouts.run_wave(WaveInput(0, 3, None, (), spout_calls=2), 0, lambda batch: None)
    spouts.settle_due()
    assert logged(tmp_path, spout_task) == [1, 2, 3]
    assert len(list((tmp_path / RUN / "spout-log").glob("task-*/segment-*"))) == 2

    spouts.commit(3, snapshot=2)  # every wave of the first segment is in a complete snapshot: it goes
    assert logged(tmp_path, spout_task) == [3]
    assert [list(b.rows()) for b in store.spout_wave(spout_task, 3)] == [[("default", (4,)), ("default", (5,))]]
    assert store.spout_wave(spout_task, 1) == []


def wave_of(wave: int) -> bytes:
    """A spout task's log of ``wave``: one batch with the row ``(wave,)``."""
    batch = Batch(0, wave, 1, "numbers", 1, 2)
    batch.add("default", (wave,), 5, 9)
    return pickle_spout_wave([batch])


def rows(batches) -> list:
    return [list(b.rows()) for b in batches]


def test_a_record_cut_short_by_a_dying_worker_is_read_as_absent_and_its_segment_dropped_by_another(tmp_path):
    spouts, _, spout_task, _ = one_worker(tmp_path)
    for wave in (1, 2):
        spouts.run_wave(WaveInput(0, wave, None, (), spout_calls=2), 0, lambda batch: None)
    spouts.settle_due()
    (segment,) = (tmp_path / RUN / "spout-log").glob("task-*/segment-*")
    segment.write_bytes(segment.read_bytes()[:-5])  # the worker died writing wave 2's record

    now = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))  # the worker that runs the spout task now
    assert now.logged_spout_waves(spout_task) == [1]
    assert rows(now.spout_wave(spout_task, 1)) == [[("default", (0,)), ("default", (1,))]]
    assert now.spout_wave(spout_task, 2) == []

    for wave in (3, 4):
        now.log_spout_wave(spout_task, wave, wave_of(wave))
    # The dead worker's last whole record is wave 1: its segment goes. Wave 4 is in no complete snapshot yet:
    # the segment holding it stays.
    now.drop_spout_waves(spout_task, 3)
    (left,) = (tmp_path / RUN / "spout-log").glob("task-*/segment-*")
    assert left != segment
    assert now.logged_spout_waves(spout_task) == [3, 4]


def test_on_a_filesystem_that_cannot_append_each_wave_is_a_file_of_its_own(tmp_path):
    store = SnapshotStore("mock:///checkpoints", RUN, BlobSealer(KEY))  # an object store's way: whole files only
    assert not store.segments
    for wave in (1, 2):
        store.log_spout_wave(1, wave, wave_of(wave))
    assert store.logged_spout_waves(1) == [1, 2]

    store.drop_spout_waves(1, 1)
    assert store.logged_spout_waves(1) == [2]
    assert rows(store.spout_wave(1, 2)) == [[("default", (2,))]]
    assert store.spout_wave(1, 1) == []


MOUNTINFO = """22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 27 0:52 / /checkpoints rw,relatime - nfs4 server:/export rw,vers=4.2
32 31 8:17 / /checkpoints/local rw,relatime - xfs /dev/sdb1 rw
"""


def test_a_wave_files_name_says_its_wave_and_part():
    assert [wave_part(name) for name in ("wave-7", "wave-7.1", "wave-7.12")] == [(7, 0), (7, 1), (7, 12)]
    for other in ("wave-7.", "wave-7.0", "wave-7.x", "wave-", "segment-000000000007-1-ab", "wave-7.1.2"):
        assert wave_part(other) == (None, 0), other


def test_segments_only_on_a_disk_of_the_host_itself(tmp_path):
    assert filesystem_of(os.makedev(254, 0), MOUNTINFO) == "ext4"
    assert filesystem_of(os.makedev(0, 52), MOUNTINFO) == "nfs4"  # a network mount: a file a wave
    assert filesystem_of(os.makedev(8, 17), MOUNTINFO) == "xfs"  # a disk mounted inside it
    assert filesystem_of(os.makedev(9, 9), MOUNTINFO) is None
    assert on_host_disk(str(tmp_path / "not made yet"))  # the test's own temporary directory
    assert not on_host_disk("/proc/self")  # no disk at all, as a network mount is none of this host's
    assert SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY)).segments


def test_a_worker_reads_either_layout_and_what_another_wrote_after_it_first_read(tmp_path):
    def store(segments: bool) -> SnapshotStore:
        made = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))
        made.segments = segments  # as a worker on a network mount (False) or on the disk itself (True) decides
        return made

    def log(writer: SnapshotStore, wave: int) -> None:
        writer.log_spout_wave(1, wave, wave_of(wave))

    log(store(False), 1)
    segments = store(True)
    log(segments, 2)
    reader = store(True)
    assert rows(reader.spout_wave(1, 1)) + rows(reader.spout_wave(1, 2)) == [[("default", (1,))], [("default", (2,))]]
    log(segments, 3)  # after the reader read the segment once
    assert rows(reader.spout_wave(1, 3)) == [[("default", (3,))]]
    assert reader.logged_spout_waves(1) == [1, 2, 3]

    reader.drop_spout_waves(1, 1)  # the wave file goes; the segment holds wave 3 still
    assert reader.logged_spout_waves(1) == [2, 3]
    segments.drop_spout_waves(1, 3)
    assert reader.logged_spout_waves(1) == []


def test_a_segment_cut_short_before_its_first_record_holds_none_and_goes(tmp_path):
    directory = tmp_path / RUN / "spout-log" / "task-1"
    directory.mkdir(parents=True)
    (directory / "segment-000000000004-0123456789ab").write_bytes(SEGMENT_MAGIC[:5])  # its writer died there
    store = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))
    assert store.logged_spout_waves(1) == []
    assert store.spout_wave(1, 4) == []
    store.drop_spout_waves(1, 3)
    assert list(directory.iterdir()) == []


def part_of(wave: int, *values: int) -> bytes:
    """One part of a spout task's log of ``wave``: one batch with a row ``(v,)`` for each of ``values``."""
    batch = Batch(0, wave, 1, "numbers", 1, 2)
    for v in values:
        batch.add("default", (v,), 5, 9)
    return pickle_spout_wave([batch])


@pytest.mark.parametrize("segments", [True, False])
def test_an_open_waves_parts_are_read_back_in_the_order_written_and_go_together(tmp_path, segments):
    store = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))
    store.segments = segments  # appended to a segment (a disk of the host) or a file a part (a network mount)
    store.log_spout_wave(1, 1, part_of(1, 10, 11))
    store.log_spout_wave(1, 1, part_of(1, 12))
    store.log_spout_wave(1, 1, part_of(1, 13))
    store.log_spout_wave(1, 2, part_of(2, 20))
    assert rows(store.spout_wave(1, 1)) == [
        [("default", (10,)), ("default", (11,))],
        [("default", (12,))],
        [("default", (13,))],
    ]
    assert store.logged_spout_waves(1) == [1, 2]

    store.drop_spout_waves(1, 1)  # a snapshot that holds wave 1: every part of it goes, wave 2 stays
    store.log_spout_wave(1, 3, part_of(3, 30))
    store.log_spout_wave(1, 3, part_of(3, 31))
    reader = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))  # the worker that runs the spout task after a loss
    reader.segments = segments
    # A segment goes once its last wave is held (wave 1's shares one with wave 2); a file as soon as its own is.
    assert reader.logged_spout_waves(1) == ([1, 2, 3] if segments else [2, 3])
    assert rows(reader.spout_wave(1, 2)) == [[("default", (20,))]]
    assert rows(reader.spout_wave(1, 3)) == [[("default", (30,))], [("default", (31,))]]


def test_a_waves_parts_on_both_sides_of_a_completed_snapshot_are_read_in_order(tmp_path):
    """A snapshot completed while wave 4 was open: its segment closed between two of wave 4's parts, and the
    next part went to a new segment that begins with the same wave."""
    store = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))
    store.log_spout_wave(1, 4, part_of(4, 1))
    store.drop_spout_waves(1, 3)
    store.log_spout_wave(1, 4, part_of(4, 2))
    store.drop_spout_waves(1, 3)
    store.log_spout_wave(1, 4, part_of(4, 3))
    assert len(list((tmp_path / RUN / "spout-log").glob("task-1/segment-*"))) == 3
    reader = SnapshotStore(str(tmp_path), RUN, BlobSealer(KEY))
    assert rows(reader.spout_wave(1, 4)) == [[("default", (1,))], [("default", (2,))], [("default", (3,))]]
