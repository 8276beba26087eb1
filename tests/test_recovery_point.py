"""The recovery point: where a new generation's tasks start, and which waves run again from the spouts' logs."""

from __future__ import annotations

import pickle

from squall.security import BlobSealer, checkpoint_key
from squall.spark.protocol import Snapshot
from squall.spark.recovery import RecoveryPoint
from squall.spark.snapshots import SnapshotStore


def store(tmp_path) -> SnapshotStore:
    return SnapshotStore(str(tmp_path), "run-0123456789ab", BlobSealer(checkpoint_key({}), False))


def test_a_generation_starts_from_the_last_complete_snapshot_and_runs_every_wave_sent_since_it_again(tmp_path):
    point = RecoveryPoint(store(tmp_path), "words")
    assert point.keeps and point.due
    for wave in (1, 2, 3, 4, 5):
        point.sent(wave, f"input {wave}", snapshot=wave == 2)
        assert point.due == (wave != 2)
        if wave == 2:
            point.completed(2, {7: Snapshot(2, "task 7 at 2")})
            assert point.due
    # Waves 3 and 4 completed, 5 was in flight when a worker was lost: its acks may have been applied already,
    # so it runs again too.
    assert point.start(applied=4) == 2
    assert point.restart() == ["input 3", "input 4", "input 5"]
    assert point.snapshot_of(7) == Snapshot(2, "task 7 at 2") and point.snapshot_of(8) is None
    # Wave 6 goes out, a snapshot wave; another loss comes before it completes.
    point.sent(6, "input 6", snapshot=True)
    assert point.restart() == ["input 3", "input 4", "input 5", "input 6"] and point.due
    point.sent(7, "input 7", snapshot=True)
    point.completed(7, {7: Snapshot(7, "task 7 at 7")})  # task 8 had nothing new
    assert point.snapshot_of(7) == Snapshot(7, "task 7 at 7") and point.snapshot_of(8) is None
    assert point.start(applied=7) == 7 and point.restart() == []


def test_a_restored_task_starts_from_its_checkpoint_until_a_complete_snapshot_holds_it(tmp_path):
    point = RecoveryPoint(store(tmp_path), "words", restored={7: {"cow": 3}})
    assert pickle.loads(point.snapshot_of(7).blob) == {"cow": 3} and point.snapshot_of(7).version == 0
    point.sent(1, "input 1", snapshot=True)
    point.completed(1, {7: Snapshot(1, "task 7 at 1")})
    assert point.snapshot_of(7) == Snapshot(1, "task 7 at 1")


def test_without_snapshots_a_generation_starts_from_the_waves_applied_and_runs_none_again():
    point = RecoveryPoint(None, "words", restored={7: {"cow": 3}})
    assert not point.keeps and not point.due
    assert point.start(applied=9) == 9 and point.restart() == []
    assert pickle.loads(point.snapshot_of(7).blob) == {"cow": 3}
