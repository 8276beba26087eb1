"""What squall writes under ``squall.checkpoint.dir`` and reads back is sealed under the checkpoint key: a file
changed, replaced or planted by anyone without the key is refused with an error naming its path, before anything
of it is unpickled. The key comes from the config, the environment or an owner-only key file; with
``squall.checkpoint.encrypt`` on, no value of the state is on disk in clear."""

from __future__ import annotations

import os
import pickle
import stat
import time
from collections import Counter

import pytest

from squall import LocalCluster, StatefulBolt, TopologyBuilder
from squall.connectors.queue import QueueSpout, ReliableQueue
from squall.security import BlobSealer, TamperedBlobError, checkpoint_key
from squall.spark.protocol import Batch
from squall.spark.snapshots import RECORD_HEADER, SEGMENT_MAGIC, SnapshotStore, pickle_spout_wave
from squall.state.providers import FileStateProvider, StatePart

LAYOUT = {"count": [1]}


class MakesADirectory:
    """Unpickled, it makes a directory: the mark that a planted file was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def sealer(key: str = "the run's checkpoint key", encrypt: bool = False) -> BlobSealer:
    return BlobSealer(checkpoint_key({"squall.checkpoint.key": key}), encrypt)


def test_a_planted_or_changed_checkpoint_file_is_refused_with_its_path_before_unpickling(tmp_path):
    provider = FileStateProvider(str(tmp_path / "state"), sealer())
    provider.prepare(1, 1, StatePart({"a": 1}, [], whole=True))
    provider.commit(1, LAYOUT, [(1, 1, True)])
    assert provider.load().states == {1: {"a": 1}}
    part = tmp_path / "state" / "part-000000000001-1.pickle"

    good = part.read_bytes()
    changed = bytearray(good)
    changed[-3] ^= 0x01  # one bit of the pickled state
    part.write_bytes(bytes(changed))
    with pytest.raises(TamperedBlobError, match=f"{part}: its signature does not match"):
        provider.load()

    marker = tmp_path / "unpickled"
    part.write_bytes(pickle.dumps({"part": MakesADirectory(str(marker))}))  # an unsigned pickle put in its place
    with pytest.raises(TamperedBlobError, match=f"{part}: it is not a blob squall sealed"):
        provider.load()
    assert not marker.exists()

    part.write_bytes(good)
    assert provider.load().states == {1: {"a": 1}}
    commit = tmp_path / "state" / "commit-000000000001.pickle"
    with pytest.raises(TamperedBlobError, match=f"{commit}: its signature does not match"):  # another key
        FileStateProvider(str(tmp_path / "state"), sealer("another key")).load()


def test_snapshots_and_spout_logs_written_by_the_workers_are_refused_once_changed(tmp_path):
    store = SnapshotStore(str(tmp_path), "run-0123456789ab", sealer())
    batch = Batch(0, 3, 1, "sentences", 1, 2)
    batch.add("default", ("the cow jumped",), 5, 9)
    store.log_spout_wave(1, 3, pickle_spout_wave([batch]))
    assert [list(b.rows()) for b in store.spout_wave(1, 3)] == [[("default", ("the cow jumped",))]]
    path = store.write_task(3, 2, pickle.dumps({"counts": {"cow": 1}}))
    assert pickle.loads(store.read_task(path)) == {"counts": {"cow": 1}}

    (log,) = (tmp_path / "run-0123456789ab" / "spout-log" / "task-1").iterdir()
    good = log.read_bytes()
    log.write_bytes(good.replace(b"the cow", b"the pig"))
    reader = SnapshotStore(str(tmp_path), "run-0123456789ab", sealer())  # another worker, reading it afresh
    with pytest.raises(TamperedBlobError, match=f"{log}: its signature does not match"):
        reader.spout_wave(1, 3)
    relabelled = bytearray(good)  # the record's own header says another wave
    RECORD_HEADER.pack_into(relabelled, len(SEGMENT_MAGIC), 7, RECORD_HEADER.unpack_from(good, len(SEGMENT_MAGIC))[1])
    log.write_bytes(bytes(relabelled))
    reader = SnapshotStore(str(tmp_path), "run-0123456789ab", sealer())
    with pytest.raises(TamperedBlobError, match=f"{log}: its record of task 1's wave 7 holds another's"):
        reader.spout_wave(1, 7)
    marker = tmp_path / "unpickled"
    planted = pickle.dumps([MakesADirectory(str(marker))])
    log.write_bytes(SEGMENT_MAGIC + RECORD_HEADER.pack(3, len(planted)) + planted)  # a record never sealed
    reader = SnapshotStore(str(tmp_path), "run-0123456789ab", sealer())
    with pytest.raises(TamperedBlobError, match=f"{log}: it is not a blob squall sealed"):
        reader.spout_wave(1, 3)
    log.write_bytes(planted)
    reader = SnapshotStore(str(tmp_path), "run-0123456789ab", sealer())
    with pytest.raises(TamperedBlobError, match=f"{log}: it is not a spout log squall wrote"):
        reader.spout_wave(1, 3)
    snapshot = tmp_path / "run-0123456789ab" / "snapshots" / "3" / "task-2"
    snapshot.write_bytes(snapshot.read_bytes().replace(b"cow", b"pig"))
    with pytest.raises(TamperedBlobError, match=f"{snapshot}: its signature does not match"):
        store.read_task(path)
    assert not marker.exists()


def test_encrypted_checkpoints_hold_no_value_in_clear_and_open_with_the_key(tmp_path):
    provider = FileStateProvider(str(tmp_path / "state"), sealer(encrypt=True))
    provider.prepare(1, 1, StatePart({"aardvark-in-clear": "zebra-in-clear"}, [], whole=True))
    provider.commit(1, LAYOUT, [(1, 1, True)])
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "state").iterdir())
    assert b"aardvark-in-clear" not in on_disk and b"zebra-in-clear" not in on_disk
    assert provider.load().states == {1: {"aardvark-in-clear": "zebra-in-clear"}}
    with pytest.raises(TamperedBlobError, match="does not decrypt under the checkpoint key"):
        FileStateProvider(str(tmp_path / "state"), sealer("another key", encrypt=True)).load()


def test_the_checkpoint_key_comes_from_the_config_the_environment_or_an_owner_only_file(tmp_path, monkeypatch):
    monkeypatch.delenv("SQUALL_CHECKPOINT_KEY", raising=False)
    key_file = tmp_path / "keys" / "checkpoint.key"
    from_file = checkpoint_key({"squall.checkpoint.key.file": str(key_file)})
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(from_file) == 32
    assert checkpoint_key({"squall.checkpoint.key.file": str(key_file)}) == from_file  # made once, then read
    monkeypatch.setenv("SQUALL_CHECKPOINT_KEY", "from the environment")
    from_env = checkpoint_key({"squall.checkpoint.key.file": str(key_file)})
    assert from_env != from_file
    assert checkpoint_key({"squall.checkpoint.key": "from the environment"}) == from_env
    assert checkpoint_key({"squall.checkpoint.key": "given in the config"}) not in (from_env, from_file)


class CountInState(StatefulBolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        self.counts.put(tup["word"], self.counts.get(tup["word"], 0) + 1)
        self.collector.ack(tup)


def count_words(tmp_path, conf: dict, words: list[str]) -> None:
    """``words`` through a stateful count under ``LocalCluster``, until every one is acked."""
    queue_path = tmp_path / "queue.sqlite"
    ReliableQueue(queue_path, "q").put_many([w] for w in words)
    builder = TopologyBuilder()
    builder.set_spout("queue", QueueSpout(queue_path, "q", fields=["word"]))
    builder.set_bolt("count", CountInState(), 2).fields_grouping("queue", ["word"])
    producer = ReliableQueue(queue_path, "q")
    with LocalCluster({"squall.spark.master": "local[2]", **conf}) as cluster:
        cluster.submit_topology("sealed", {"topology.state.checkpoint.interval.ms": 200}, builder.build())
        deadline = time.monotonic() + 120
        while sum(producer.counts().values()):
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, producer.counts()
            time.sleep(0.05)
        cluster.kill_topology("sealed")


def test_a_run_whose_checkpoint_was_tampered_with_refuses_to_restore_it_naming_the_file(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    conf = {
        "squall.checkpoint.dir": str(checkpoints),
        "squall.checkpoint.key": "a topology's own key",
        "squall.checkpoint.encrypt": True,
    }
    words = [f"okapi{i % 40}" for i in range(1200)]
    count_words(tmp_path, conf, words)
    directory = checkpoints / "sealed" / "state"
    on_disk = b"".join(p.read_bytes() for p in directory.iterdir() if p.is_file())
    assert b"okapi" not in on_disk  # encrypted: no word of the state in clear
    counts = Counter()
    for state in FileStateProvider(str(directory), sealer("a topology's own key")).load().states.values():
        counts.update(state)
    assert counts == Counter(words)

    newest = max(p for p in directory.iterdir() if p.name.startswith("part-"))
    marker = tmp_path / "unpickled"
    newest.write_bytes(pickle.dumps({"part": MakesADirectory(str(marker))}))
    with (
        pytest.raises(TamperedBlobError, match=f"{newest}: it is not a blob squall sealed"),
        LocalCluster({"squall.spark.master": "local[2]", **conf}) as cluster,
    ):
        builder = TopologyBuilder()
        builder.set_spout("queue", QueueSpout(tmp_path / "queue.sqlite", "q", fields=["word"]))
        builder.set_bolt("count", CountInState(), 2).fields_grouping("queue", ["word"])
        cluster.submit_topology("sealed", {}, builder.build())
    assert not marker.exists()


def test_a_worker_process_keeps_one_blob_store_per_key_not_per_directory(tmp_path):
    """A reused Python worker sees runs with other keys (or with encryption turned on): each writes its blobs with
    its own key."""
    from squall.state.blobs import StateBlobs
    from squall.state.providers import StateStoreSpec

    spec = StateStoreSpec("file", str(tmp_path / "state"))
    plain = StateBlobs.open(spec.sealed_with(sealer()), "window", 1)
    encrypted = StateBlobs.open(spec.sealed_with(sealer(encrypt=True)), "window", 1)
    assert plain.provider is not encrypted.provider
    encrypted.put("sealed-1", ["armadillo-in-clear"])
    on_disk = (tmp_path / "state" / "blobs" / "window.1" / "sealed-1.pickle").read_bytes()
    assert b"armadillo-in-clear" not in on_disk
    assert encrypted.get("sealed-1") == ["armadillo-in-clear"]
