"""Persistent windows with ``with_max_events_in_memory(n)``: past ``n`` events, sealed partitions of the window
are in the state store (a directory, a Redis server) and read back when a firing, an expiry or ``get_iter()``
needs them. The executor is driven directly, with its state as the runtime hands it over, then a topology runs
on ``LocalCluster``."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_windowed_bolt_executor import prepared, tuple_of

from squall import BasicBolt, Count, Duration, InvalidTopologyError, LocalCluster, TopologyBuilder, WindowedBolt
from squall.connectors import QueueSpout, ReliableQueue
from squall.model.fields import Fields
from squall.model.state import KeyValueState
from squall.model.tuple import TICK_COMPONENT, TICK_STREAM, Tuple
from squall.security import BlobSealer, checkpoint_key
from squall.state.blobs import StateBlobs
from squall.state.providers import FileStateProvider, RedisStateProvider
from squall.time import simulated_time

SEALER = BlobSealer(checkpoint_key({}))  # the key every run here signs its checkpoints with (the default key file)

LENGTH, SLIDE, BOUND = 5000, 1000, 1200  # partitions of BOUND // 4 = 300 events


class Sums(WindowedBolt):
    """Records each window's sum and size, read with ``get_iter()``."""

    outputs = ()

    def __init__(self):
        self.sums = []

    def execute(self, window):
        self.sums.append((sum(t[0] for t in window.get_iter()), len(window)))


def expected_sums(total, length=LENGTH, slide=SLIDE):
    return [(sum(range(max(0, end - length), end)), min(end, length)) for end in range(slide, total + 1, slide)]


@pytest.fixture(params=["file", "redis"])
def store(request, tmp_path):
    if request.param == "file":
        return FileStateProvider(str(tmp_path / "state"), SEALER)
    redis_server = request.getfixturevalue("redis_server")
    return RedisStateProvider(redis_server.url, f"bounded-{time.monotonic_ns()}", SEALER)


def bounded(bolt=None):
    bolt = bolt or Sums()
    return bolt.with_window(Count(LENGTH), Count(SLIDE)).with_persistence().with_max_events_in_memory(BOUND)


def started(store, bolt, data=None, task=2):
    """The executor as task ``task`` of ``w``, handed its state (``data``) with its blobs in ``store``."""
    executor, collector = prepared(bolt)
    state = KeyValueState("w", data, StateBlobs(store, "w", task))
    executor.init_state(state)
    return executor, collector, state


def test_a_bounded_window_keeps_at_most_its_bound_in_memory_and_fires_exact_windows(store):
    bolt = bounded()
    executor, collector, state = started(store, bolt)
    most = 0
    for i in range(20_000):
        executor.execute(tuple_of(i))
        most = max(most, executor.events_in_memory)
    assert bolt.sums == expected_sums(20_000)
    assert most == BOUND
    assert len(collector.acked) == 20_000  # acked at once: the runtime holds them until the checkpoint
    # 66 partitions of 300 were sealed; those whose every tuple expired are released, the others named by the state
    sealed = {key[2] for key in state if key[:2] == ("window", "sealed")}
    assert sealed == set(range(50, 66))  # tuples 15,000 to 19,799 (19,800 on are in the open partition)
    assert sorted(state.get(("window", "part", 66))) == list(range(19_800, 20_001))  # seqs count from 1
    assert state.blobs.waiting == 50
    assert len(state.blobs.names()) == 66


def test_released_partitions_go_once_no_restorable_state_names_them(store):
    executor, _, state = started(store, bounded())
    for i in range(10_000):
        executor.execute(tuple_of(i))
    state.blobs.end_wave(7)
    assert state.blobs.waiting == 16
    assert state.blobs.collect(6) == 0 and len(state.blobs.names()) == 33
    assert state.blobs.collect(7) == 16 and len(state.blobs.names()) == 17
    assert state.blobs.waiting == 0


def test_a_window_restored_from_its_saved_state_goes_on_exactly_and_lets_unnamed_partitions_go(store):
    uninterrupted = bounded()
    executor, _, _ = started(store, uninterrupted, task=3)
    for i in range(20_000):
        executor.execute(tuple_of(i))

    first = bounded()
    executor, _, state = started(store, first)
    for i in range(12_345):
        executor.execute(tuple_of(i))
    saved = {key: pickle_round_trip(value) for key, value in state.items()}  # as a checkpoint holds it
    for i in range(12_345, 14_000):  # then the task is lost; these are replayed
        executor.execute(tuple_of(i))
    written = set(state.blobs.names())

    second = bounded()
    executor, _, restored = started(store, second, saved)
    assert executor.events_in_memory <= BOUND
    named = {value[0] for key, value in saved.items() if key[:2] == ("window", "sealed")}
    assert named < written and restored.blobs.waiting == len(written - named)  # no restorable state names those
    for i in range(12_345, 20_000):
        executor.execute(tuple_of(i))
        assert executor.events_in_memory <= BOUND
    assert first.sums[:12] + second.sums == uninterrupted.sums == expected_sums(20_000)


def pickle_round_trip(value):
    import pickle

    return pickle.loads(pickle.dumps(value))


class WholeWindow(WindowedBolt):
    outputs = ()

    def __init__(self):
        self.windows = []

    def execute(self, window):
        self.windows.append([t[0] for t in window.get()])


def test_get_reads_the_whole_window_back(store):
    bolt = WholeWindow().with_window(Count(100), Count(40)).with_persistence().with_max_events_in_memory(64)
    executor, _, _ = started(store, bolt)
    for i in range(400):
        executor.execute(tuple_of(i))
        assert executor.events_in_memory <= 64
    assert bolt.windows == [list(range(max(0, end - 100), end)) for end in range(40, 401, 40)]


def test_without_a_store_the_window_is_whole_in_memory_and_exact(tmp_path):
    bolt = bounded()
    executor, _ = prepared(bolt)
    executor.init_state(KeyValueState("w"))  # as TestCluster hands it over: the test's process holds every state
    for i in range(8_000):
        executor.execute(tuple_of(i))
    assert bolt.sums == expected_sums(8_000)
    assert executor.events_in_memory == LENGTH  # nothing sealed: no store to seal partitions in


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "100"])
def test_a_bound_that_is_not_a_whole_number_above_zero_is_refused(value):
    with pytest.raises(InvalidTopologyError, match="Sums: max events in memory must be a whole number >= 1"):
        Sums().with_max_events_in_memory(value)


def test_a_bound_needs_persistence_and_the_error_names_the_bolt():
    b = TopologyBuilder()
    from test_windowed_bolt_executor import Source

    b.set_spout("s1", Source())
    b.set_bolt("sums", Sums().with_window(Count(10)).with_max_events_in_memory(5)).shuffle_grouping("s1")
    with pytest.raises(InvalidTopologyError, match="windowed bolt 'sums': max events in memory needs with_persistence"):
        b.build()


# -- on LocalCluster: the workers seal partitions into the checkpoint directory, and let them go -------------------
class SumEvery(WindowedBolt):
    outputs = ("window", "sum", "count")

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.fired = 0

    def execute(self, window):
        self.fired += 1
        values = [t["n"] for t in window.get_iter()]
        self.collector.emit([window.end_timestamp, sum(values), len(values)])


class WriteDown(BasicBolt):
    outputs = ()

    def __init__(self, out: str) -> None:
        self.out = out

    def prepare(self, conf, context):
        self.file = open(Path(self.out, f"{context.task_id}-{os.getpid()}.log"), "a", buffering=1)  # noqa: SIM115

    def execute(self, tup, collector):
        self.file.write(f"{tup['sum']} {tup['count']}\n")


def test_on_local_cluster_a_bounded_window_seals_partitions_in_the_store_and_lets_expired_ones_go(tmp_path):
    total, length, slide, bound = 12_000, 3_000, 500, 400  # partitions of 100
    queue_path, checkpoints, out = tmp_path / "queue.sqlite", tmp_path / "checkpoints", tmp_path / "out"
    out.mkdir()
    producer = ReliableQueue(queue_path, "q")
    producer.put_many([i] for i in range(total))
    window = SumEvery().with_window(Count(length), Count(slide)).with_persistence().with_max_events_in_memory(bound)
    builder = TopologyBuilder()
    builder.set_spout("numbers", QueueSpout(queue_path, "q", fields=["n"]))
    builder.set_bolt("sums", window).global_grouping("numbers")
    builder.set_bolt("sink", WriteDown(str(out))).shuffle_grouping("sums")
    conf = {"squall.checkpoint.dir": str(checkpoints), "squall.spark.master": "local[2]"}
    blobs = checkpoints / "bounded" / "state" / "blobs"
    with LocalCluster(conf) as cluster:
        cluster.submit_topology("bounded", {"topology.state.checkpoint.interval.ms": 200}, builder.build())
        deadline = time.monotonic() + 120
        while sum(producer.counts().values()):
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, producer.counts()
            time.sleep(0.05)
        # 120 partitions were sealed (the 121st is open); the window's last 3,000 tuples are in 30 of them, and
        # the others go once a snapshot and a checkpoint have both passed the wave that released them
        deadline = time.monotonic() + 60
        while (left := sealed_left(blobs)) != list(range(90, 120)):
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, left
            time.sleep(0.1)
        cluster.kill_topology("bounded")

    lines = sorted(tuple(map(int, line.split())) for p in out.glob("*.log") for line in p.read_text().splitlines())
    assert lines == sorted(expected_sums(total, length, slide))  # arrival order is the queue's: one spout task


def sealed_left(blobs: Path) -> list[int]:
    """The partition numbers of the blobs left in the store (one task's)."""
    if not blobs.exists():
        return []
    (owner,) = blobs.iterdir()
    assert owner.name.startswith("sums.")
    return sorted(int(name.split("-")[1].split(".")[0]) for name in os.listdir(owner) if name.endswith(".pickle"))


@settings(max_examples=40, deadline=None)
@given(
    length=st.integers(1, 300),
    slide=st.integers(1, 120),
    bound=st.integers(1, 200),
    n=st.integers(0, 1500),
)
def test_a_bounded_window_fires_what_an_unbounded_one_fires(length, slide, bound, n):
    with tempfile.TemporaryDirectory() as directory:
        store = FileStateProvider(directory, SEALER)
        unbounded = WholeWindow().with_window(Count(length), Count(slide)).with_persistence()
        limited = WholeWindow().with_window(Count(length), Count(slide)).with_persistence()
        limited = limited.with_max_events_in_memory(bound)
        plain, _, _ = started(store, unbounded, task=1)
        held, _, _ = started(store, limited, task=2)
        for i in range(n):
            plain.execute(tuple_of(i))
            held.execute(tuple_of(i))
            assert held.events_in_memory <= max(bound, 16)  # a partition holds 16 tuples at least
        assert limited.windows == unbounded.windows


def test_a_partition_whose_tuples_all_expired_while_it_was_open_is_not_sealed(store):
    bolt = WholeWindow().with_window(Duration.seconds(1), Duration.seconds(1)).with_max_events_in_memory(64)
    bolt = bolt.with_persistence()  # partitions of 16 tuples; seqs 1-15 are the first
    tick = Tuple((1,), Fields(["rate_secs"]), TICK_COMPONENT, -1, TICK_STREAM)
    with simulated_time(1.0):
        executor, _, state = started(store, bolt)
        for i in range(15):
            executor.execute(tuple_of(i))
    for moment in (2.0, 3.0):  # a window of the 15, then an empty one: all 15 expired
        with simulated_time(moment):
            executor.execute(tick)
    with simulated_time(3.5):
        executor.execute(tuple_of(15))  # the 16th opens the next partition
    assert bolt.windows == [list(range(15))]
    assert state.blobs.names() == [] and not [key for key in state if key[1] == "sealed"]
    assert sorted(state.get(("window", "part", 1))) == [16]
