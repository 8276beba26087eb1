"""Checkpoints whose parts the stateful tasks write where they run, and which the driver only commits.

Under ``LocalCluster`` and ``squall run`` each stateful task writes its part of a checkpoint through the state
provider (what its state changed since its last part, or all of it), and the driver commits the checkpoint by
naming the parts: a marker file, or one script the Redis server runs. These tests drive both providers against
real storage (a directory, a Redis server), then a topology on ``LocalCluster``.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter

import pytest

from squall import LocalCluster, StatefulBolt, TopologyBuilder
from squall.connectors import QueueSpout, ReliableQueue
from squall.security import BlobSealer, checkpoint_key
from squall.state.providers import FileStateProvider, RedisStateProvider, StatePart

SEALER = BlobSealer(checkpoint_key({}))  # the key every run here signs its checkpoints with (the default key file)

LAYOUT = {"count": [1, 2]}


@pytest.fixture(params=["file", "redis"])
def provider(request, tmp_path):
    if request.param == "file":
        yield FileStateProvider(str(tmp_path / "state"), SEALER)
        return
    redis_server = request.getfixturevalue("redis_server")
    yield RedisStateProvider(redis_server.url, "parts", SEALER)


def test_committed_parts_make_the_state_and_uncommitted_ones_are_ignored_then_discarded(provider):
    provider.prepare(1, 1, StatePart({"a": 1, "b": 1}, [], whole=True))
    provider.prepare(1, 2, StatePart({"c": 1}, [], whole=True))
    provider.commit(1, LAYOUT, [(1, 1, True), (1, 2, True)])
    provider.prepare(2, 1, StatePart({"a": 2}, ["b"]))
    provider.prepare(2, 2, StatePart({"d": 1}, []))
    provider.commit(2, LAYOUT, [(2, 1, False), (2, 2, False)])
    provider.prepare(3, 1, StatePart({"a": 99}, []))  # the driver died before committing 3

    restored = provider.load()
    assert (restored.checkpoint, restored.layout) == (2, LAYOUT)
    assert restored.states == {1: {"a": 2}, 2: {"c": 1, "d": 1}}

    provider.discard_uncommitted(2)
    provider.prepare(3, 2, StatePart({"c": 2}, []))
    provider.commit(3, LAYOUT, [(3, 2, False)])
    assert provider.load().states == {1: {"a": 2}, 2: {"c": 2, "d": 1}}  # task 1's discarded part is gone


def test_a_checkpoint_that_did_not_complete_leaves_its_parts_to_the_next_commit(provider):
    provider.prepare(1, 1, StatePart({"a": 1}, [], whole=True))
    provider.prepare(1, 2, StatePart({"b": 1}, [], whole=True))
    provider.commit(1, LAYOUT, [(1, 1, True), (1, 2, True)])
    provider.prepare(2, 1, StatePart({"a": 2}, []))  # task 2 could not write its part of checkpoint 2
    provider.prepare(3, 1, StatePart({"a": 3}, []))
    provider.prepare(3, 2, StatePart({"b": 3}, []))  # what it changed since its last part written, checkpoint 1
    provider.commit(3, LAYOUT, [(2, 1, False), (3, 1, False), (3, 2, False)])

    assert provider.load().states == {1: {"a": 3}, 2: {"b": 3}}


def test_a_commit_whose_whole_parts_make_an_older_part_redundant_still_loads(provider):
    """A task's part of checkpoint 2 comes only with the commit of 3, beside whole parts of 3 from every task:
    the older part goes, and the commit does not name it any more."""
    provider.prepare(1, 1, StatePart({"a": 1}, [], whole=True))
    provider.prepare(1, 2, StatePart({"b": 1}, [], whole=True))
    provider.commit(1, LAYOUT, [(1, 1, True), (1, 2, True)])
    provider.prepare(2, 1, StatePart({"a": 2}, []))
    provider.prepare(3, 1, StatePart({"a": 3}, [], whole=True))
    provider.prepare(3, 2, StatePart({"b": 3}, [], whole=True))
    provider.commit(3, LAYOUT, [(2, 1, False), (3, 1, True), (3, 2, True)])

    assert provider.load().states == {1: {"a": 3}, 2: {"b": 3}}


def test_a_driver_that_dies_while_removing_old_files_leaves_a_state_that_loads(tmp_path, monkeypatch):
    provider = FileStateProvider(str(tmp_path / "state"), SEALER)
    for checkpoint in (1, 2):
        provider.prepare(checkpoint, 1, StatePart({"a": checkpoint}, [], whole=checkpoint == 1))
        provider.commit(checkpoint, {"count": [1]}, [(checkpoint, 1, checkpoint == 1)])
    provider.prepare(3, 1, StatePart({"a": 3}, [], whole=True))
    removed = []

    def remove_then_die(path):
        if removed:
            raise SystemExit("the driver dies")
        removed.append(path)
        real_remove(path)

    real_remove = os.remove
    monkeypatch.setattr("squall.state.providers.os.remove", remove_then_die)
    with pytest.raises(SystemExit):
        provider.commit(3, {"count": [1]}, [(3, 1, True)])
    monkeypatch.undo()
    assert os.path.basename(removed[0]).startswith("commit-")  # commits go first
    assert FileStateProvider(str(tmp_path / "state"), SEALER).load().states == {1: {"a": 3}}


def test_whole_parts_from_every_task_replace_what_came_before(provider, tmp_path):
    for checkpoint in (1, 2):
        provider.prepare(checkpoint, 1, StatePart({"a": checkpoint, f"old{checkpoint}": 1}, []))
        provider.prepare(checkpoint, 2, StatePart({"b": checkpoint}, []))
        provider.commit(checkpoint, LAYOUT, [(checkpoint, 1, False), (checkpoint, 2, False)])
    provider.prepare(3, 1, StatePart({"a": 3}, [], whole=True))
    provider.prepare(3, 2, StatePart({}, [], whole=True))
    provider.commit(3, LAYOUT, [(3, 1, True), (3, 2, True)])

    assert provider.load().states == {1: {"a": 3}, 2: {}}
    if isinstance(provider, FileStateProvider):  # what the whole parts made redundant is gone
        assert sorted(os.listdir(provider.directory)) == [
            "commit-000000000003.pickle",
            "part-000000000003-1.pickle",
            "part-000000000003-2.pickle",
        ]


class CountInState(StatefulBolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        self.counts.put(tup["word"], self.counts.get(tup["word"], 0) + 1)
        self.collector.ack(tup)


def queued_count(queue_path, words: list[str]):
    """``words`` put in a queue, and a topology that counts them in a stateful bolt of 2 tasks."""
    ReliableQueue(queue_path, "q").put_many([w] for w in words)
    builder = TopologyBuilder()
    builder.set_spout("queue", QueueSpout(queue_path, "q", fields=["word"]))
    builder.set_bolt("count", CountInState(), 2).fields_grouping("queue", ["word"])
    return builder.build()


def test_stateful_tasks_on_the_workers_write_their_parts_and_the_driver_only_commits(tmp_path):
    queue_path, checkpoints = tmp_path / "queue.sqlite", tmp_path / "checkpoints"
    words = [f"w{i % 500}" for i in range(6000)]
    topology = queued_count(queue_path, words)
    producer = ReliableQueue(queue_path, "q")
    conf = {"squall.checkpoint.dir": str(checkpoints), "squall.spark.master": "local[2]"}
    with LocalCluster(conf) as cluster:
        cluster.submit_topology("parts", {"topology.state.checkpoint.interval.ms": 200}, topology)
        deadline = time.monotonic() + 120
        while sum(producer.counts().values()):
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, producer.counts()
            time.sleep(0.05)
        cluster.kill_topology("parts")

    directory = checkpoints / "parts" / "state"
    names = os.listdir(directory)
    assert any(n.startswith("commit-") for n in names) and any(n.startswith("part-") for n in names)
    assert not [n for n in names if n.startswith(("delta-", "base-"))]  # the driver wrote no state
    counts = Counter()
    for state in FileStateProvider(str(directory), SEALER).load().states.values():
        counts.update(state)
    assert counts == Counter(words)  # every word acked only once its count was in a committed checkpoint


MARKER = "restored-marker-5c1e"


def _marked_sets() -> int:
    """Sets holding ``MARKER`` alive in this process (a set is always tracked by the collector)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is frozenset and MARKER in o)


def test_a_restarted_driver_lets_go_of_the_restored_state_once_the_workers_hold_it(tmp_path):
    """The driver restores the stateful tasks' state from the last checkpoint and hands it to the workers; it
    keeps none of it once a complete snapshot holds each task (found by the soak: every restarted driver held
    the whole restored state of every stateful task for the rest of its run)."""
    queue_path, checkpoints = tmp_path / "queue.sqlite", tmp_path / "checkpoints"
    words = [f"w{i % 50}" for i in range(2000)]
    topology = queued_count(queue_path, words)
    producer = ReliableQueue(queue_path, "q")
    saved = FileStateProvider(str(checkpoints / "held" / "state"), SEALER)
    tasks = list(topology.task_ids("count"))
    for task in tasks:  # a checkpoint an earlier driver committed: each task holds a marked value
        saved.prepare(1, task, StatePart({"marker": frozenset({MARKER, str(task)})}, [], whole=True))
    saved.commit(1, {"count": tasks}, [(1, task, True) for task in tasks])
    assert _marked_sets() == 0

    conf = {"squall.checkpoint.dir": str(checkpoints), "squall.spark.master": "local[2]"}
    with LocalCluster(conf) as cluster:
        run = cluster.submit_topology("held", {"squall.snapshot.interval.ms": 200}, topology)
        deadline = time.monotonic() + 120
        while sum(producer.counts().values()) or _marked_sets():
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, (producer.counts(), _marked_sets())
            time.sleep(0.1)
        assert run.stats.of("count").executed == len(words)
        cluster.kill_topology("held")

    restored = Counter()
    for state in FileStateProvider(str(checkpoints / "held" / "state"), SEALER).load().states.values():
        assert state.pop("marker") & {MARKER}  # the workers kept the restored values
        restored.update(state)
    assert restored == Counter(words)


def test_a_new_run_removes_what_killed_runs_of_its_topology_left_in_the_checkpoint_directory(tmp_path):
    """Each run keeps its snapshots and spout logs under ``<checkpoint dir>/<name>-<12 hex>``; a killed driver
    cannot remove its own, so the next run of the same topology does (found by the soak: 6 MB left behind by
    every driver it killed). Other topologies' runs and directories that are not runs stay."""
    queue_path, checkpoints = tmp_path / "queue.sqlite", tmp_path / "checkpoints"
    left = [checkpoints / "again-0123456789ab" / "snapshots" / "7", checkpoints / "again-fedcba987654" / "spout-log"]
    kept = [checkpoints / "again-other-0123456789ab", checkpoints / "again-notarun", checkpoints / "other-0123456789ab"]
    for directory in left + kept:
        directory.mkdir(parents=True)
        (directory / "task-1").write_bytes(b"x")
    topology = queued_count(queue_path, ["a", "b", "a"])
    conf = {"squall.checkpoint.dir": str(checkpoints), "squall.spark.master": "local[2]"}
    with LocalCluster(conf) as cluster:
        run = cluster.submit_topology("again", {}, topology)
        deadline = time.monotonic() + 120
        while run.stats.of("queue").acked < 3:
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline
            time.sleep(0.05)
        runs = sorted(p.name for p in checkpoints.iterdir() if p.name.startswith(("again", "other")))
        cluster.kill_topology("again")

    own = [name for name in runs if name not in {"again", *(p.name for p in kept)}]
    assert len(own) == 1 and own[0].startswith("again-")  # this run's own directory, and no earlier one
    assert all(not directory.parent.exists() for directory in left)
    assert all((directory / "task-1").exists() for directory in kept)
