"""Stateful bolts on the wave runtime: the task's KeyValueState survives a dying Python worker and a restarted
driver (from its last complete checkpoint), each wave saves only the keys it changed, acks wait for the
checkpoint that holds their state, and a value that cannot be saved stops the topology with its component and
key."""

import os
import pickle
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from components import RequeueingFeeder
from drivers import finish_driver, kill_driver, start_driver

from squall import BasicBolt, InvalidConfigError, InvalidTopologyError, StatefulBolt, TopologyBuilder, TopologyFailed
from squall.connectors.queue import ReliableQueue
from squall.security import BlobSealer, TamperedBlobError, checkpoint_key
from squall.state.providers import FileStateProvider, StatePart
from squall.testing import FeederSpout, TestCluster

SEALER = BlobSealer(checkpoint_key({}))  # the key every run here signs its checkpoints with (the default key file)


class CrashOnce(BasicBolt):
    """Kills its Python worker on the first word ``crash``, once per marker file."""

    outputs = ("word",)

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def execute(self, tup, collector):
        if tup[0] == "crash" and not Path(self.marker).exists():
            Path(self.marker).write_text("crashed")
            os._exit(1)
        collector.emit([tup[0]])


class StatefulCount(StatefulBolt):
    """Counts words in its KeyValueState; emits (word, count) anchored, and acks."""

    outputs = ("word", "count")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        word = tup[0]
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        self.collector.emit([word, count], anchors=tup)
        self.collector.ack(tup)


class Unsaveable(StatefulBolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put(tup[0], threading.Lock())  # a lock cannot be pickled
        self.collector.ack(tup)


def counted(run) -> dict[str, int]:
    counts = {}
    for word, n in run.captured["count"]:
        counts[word] = max(counts.get(word, 0), n)
    return counts


def word_count(feeder, middle):
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("middle", middle, 2).shuffle_grouping("s")
    b.set_bolt("count", StatefulCount(), 2).fields_grouping("middle", ["word"])
    return b.build()


def test_state_survives_a_python_worker_that_dies_mid_wave(cluster, tmp_path):
    marker = tmp_path / "crashed"
    feeder = RequeueingFeeder(["word"])  # the trees in flight at the loss fail back, and come again
    run = cluster.submit_for_capture("stateful-crash", {}, word_count(feeder, CrashOnce(str(marker))))
    words = ["a", "b", "a", "c"] * 5
    for w in words:
        feeder.feed([w])
    cluster.wait_idle()
    for w in [*words, "crash", *words]:  # this wave loses a worker; its tasks restart from their checkpoint
        feeder.feed([w])
    cluster.wait_idle()
    assert marker.read_text() == "crashed" and run.stats.restarts >= 1
    cluster.advance_time(1)  # the checkpoint that holds the counts releases their acks

    acks = Counter(m for kind, m in feeder.calls if kind == "ack")
    assert len(acks) == 3 * len(words) + 1 and set(acks.values()) == {1}
    assert counted(run) == dict(Counter([*words, *words, "crash", *words]))


def test_a_checkpoint_saves_only_the_keys_changed_since_the_last(cluster):
    feeder = FeederSpout(["word"])
    run = cluster.submit_for_capture("stateful-delta", {}, word_count(feeder, Passthrough()))
    held = [f"w{i}" for i in range(1000)]
    for w in held:
        feeder.feed([w])
    cluster.advance_time(1)  # topology.state.checkpoint.interval.ms: a checkpoint holds them
    stats = run.stats.of("count")
    assert stats.state_changes == 1000  # each key saved once
    for w in ["a", "b", "a", "c", "b", "w7"] * 3:  # touching 4 keys, with 1000 held
        feeder.feed([w])
    cluster.advance_time(1)
    assert stats.state_changes == 1000 + 4
    assert counted(run)["a"] == 6 and counted(run)["w7"] == 4


class Passthrough(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        collector.emit([tup[0]])


def test_a_state_value_that_cannot_be_saved_stops_the_topology_naming_component_and_key(cluster):
    feeder = FeederSpout(["word"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("keeper", Unsaveable()).shuffle_grouping("s")
    run = cluster.submit_topology("unsaveable", {}, b.build())
    feeder.feed(["k1"])
    with pytest.raises(TopologyFailed) as failed:
        cluster.advance_time(60)
    task = run.topology.task_ids("keeper")[0]
    assert f"component 'keeper' task {task}: its state cannot be saved" in str(failed.value)
    assert "state key 'k1'" in str(failed.value)
    assert feeder.acked == set()


def one_count(feeder, parallelism=1):
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("count", StatefulCount(), parallelism).fields_grouping("s", ["word"])
    return b.build()


def test_acks_wait_for_the_checkpoint_that_holds_their_state(cluster, tmp_path):
    feeder = FeederSpout(["word"])
    conf = {"topology.state.checkpoint.interval.ms": 5000, "squall.checkpoint.dir": str(tmp_path)}
    run = cluster.submit_for_capture("held", conf, one_count(feeder))
    ids = [feeder.feed([w]) for w in ["a", "b", "a"]]
    cluster.wait_idle()
    assert counted(run) == {"a": 2, "b": 1} and feeder.acked == set()  # executed, counted, not yet acked
    assert run.stats.pending == 3
    saved = FileStateProvider(str(tmp_path / "held" / "state"), SEALER)
    assert saved.load().checkpoint == 0
    cluster.advance_time(4.9)
    assert feeder.acked == set() and saved.load().checkpoint == 0
    cluster.advance_time(0.2)  # t = 5.1: the checkpoint is written, then the acks go out
    assert feeder.acked == set(ids) and feeder.failed == set()
    restored = saved.load()
    assert restored.checkpoint == 1 and restored.states == {run.topology.task_ids("count")[0]: {"a": 2, "b": 1}}


def test_a_restarted_topology_resumes_from_its_last_complete_checkpoint(spark, tmp_path):
    conf = {"squall.checkpoint.dir": str(tmp_path)}
    with TestCluster() as first:
        feeder = FeederSpout(["word"])
        first.submit_for_capture("resume", conf, one_count(feeder, 2))
        for w in ["a", "b", "a", "c"]:
            feeder.feed([w])
        first.advance_time(1)  # checkpoint 1
        assert len(feeder.acked) == 4
        for w in ["a", "z"]:  # counted, but the topology stops before a checkpoint holds them: never acked
            feeder.feed([w])
        first.wait_idle()
        assert len(feeder.acked) == 4
    state_dir = tmp_path / "resume" / "state"
    (state_dir / "delta-000000000002.pickle.tmp-1").write_bytes(b"cut off mid-write")  # ignored on restart

    with TestCluster() as second:
        feeder = FeederSpout(["word"])
        run = second.submit_for_capture("resume", conf, one_count(feeder, 2))
        for w in ["a", "z"]:  # the source replays what was never acked
            feeder.feed([w])
        second.advance_time(1)
        assert counted(run) == {"a": 3, "z": 1} and len(feeder.acked) == 2


def test_a_changed_parallelism_deals_the_keys_out_again_by_the_fields_grouping(spark, tmp_path):
    conf = {"squall.checkpoint.dir": str(tmp_path)}
    words = [f"w{i}" for i in range(40)]
    with TestCluster() as first:
        feeder = FeederSpout(["word"])
        first.submit_topology("rebalance", conf, one_count(feeder, 2))
        for w in words:
            feeder.feed([w])
        first.advance_time(1)
    with TestCluster() as second:
        feeder = FeederSpout(["word"])
        run = second.submit_for_capture("rebalance", conf, one_count(feeder, 3))
        for w in words:
            feeder.feed([w])
        second.advance_time(1)
        assert counted(run) == {w: 2 for w in words}  # every key found on the task its word now goes to


def test_a_changed_parallelism_without_a_key_field_refuses_to_start(spark, tmp_path):
    conf = {"squall.checkpoint.dir": str(tmp_path)}

    feeder = FeederSpout(["word"])

    def shuffled(parallelism):
        b = TopologyBuilder()
        b.set_spout("s", feeder)
        b.set_bolt("count", StatefulCount(), parallelism).shuffle_grouping("s")
        return b.build()

    with TestCluster() as first:
        run = first.submit_topology("no-key", conf, shuffled(2))
        feeder.feed(["a"])
        first.advance_time(1)
        assert run.stats.of("count").state_changes == 1
    with TestCluster() as second, pytest.raises(Exception, match="bolt 'count' ran with 2 tasks and now has 3"):
        second.submit_topology("no-key", conf, shuffled(3))


def test_an_unknown_state_provider_is_refused_by_name(cluster):
    conf = {"topology.state.provider": "zookeeper"}
    with pytest.raises(InvalidConfigError, match=r"'topology\.state\.provider' must be one of 'file'"):
        cluster.submit_topology("bad-provider", conf, one_count(FeederSpout(["word"])))


@pytest.mark.parametrize("provider", ["file", "redis"])
def test_a_stateful_word_count_survives_three_driver_kills(tmp_path, provider):
    """``squall run`` SIGKILLed three times at random points and restarted: no count falls below the exact one,
    and what is over it is bounded by the tuples in flight. With Redis holding the checkpoints, the server is
    also restarted under the second driver."""
    from servers import RedisServer
    from stateful_word_count import NAME, PENDING

    from squall.state.providers import RedisStateProvider

    queue_path, checkpoints = tmp_path / "queue.sqlite", tmp_path / "checkpoints"
    producer = ReliableQueue(queue_path, "q")
    words = [f"w{i % 97}" for i in range(4000)]
    producer.put_many([w] for w in words)
    conf = {"test.queue": queue_path, "squall.checkpoint.dir": checkpoints}
    server = None
    if provider == "redis":
        (tmp_path / "redis").mkdir()
        server = RedisServer(tmp_path / "redis", persistent=True)
        conf.update({"topology.state.provider": "redis", "squall.redis.url": server.url})

    def gone() -> int:
        return len(words) - sum(producer.counts().values())

    def wait_for(wanted: int, driver) -> None:
        deadline = time.monotonic() + 240
        while gone() < wanted:
            assert driver.poll() is None, driver.stdout.read()
            assert time.monotonic() < deadline, "the driver made no progress"
            time.sleep(0.05)

    rnd = random.Random(11)
    try:
        for kill in range(3):
            driver = start_driver("stateful_word_count.py", conf)
            wait_for(gone() + rnd.randint(200, 800), driver)  # kill once this many more messages are acked
            if server is not None and kill == 1:
                server.stop()  # checkpoints fail, and their acks wait, until it is back
                time.sleep(1.5)
                server.start()
                wait_for(gone() + 200, driver)
            kill_driver(driver)
        finish_driver(start_driver("stateful_word_count.py", conf), timeout=300)
        assert producer.counts() == {"ready": 0, "pending": 0, "dead": 0}
        if server is None:
            restored = FileStateProvider(str(checkpoints / NAME / "state"), SEALER).load()
        else:
            restored = RedisStateProvider(server.url, NAME, SEALER).load()
    finally:
        if server is not None:
            server.stop()
    counts = Counter()
    for state in restored.states.values():
        assert not set(state) & set(counts)  # each word on one task
        counts.update(state)
    exact = Counter(words)
    assert set(counts) == set(exact) and all(counts[w] >= exact[w] for w in exact)  # never below
    duplicates = sum(counts.values()) - len(words)
    assert duplicates <= 3 * PENDING  # at most what three dead drivers had in flight
    print(f"provider={provider} words={len(words)} driver_kills=3 duplicates={duplicates}")


def test_checkpoints_in_redis_wait_out_a_server_restart_and_resume_the_topology(spark, tmp_path):
    from servers import RedisServer

    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis", persistent=True)
    try:
        conf = {
            "topology.state.provider": "redis",
            "squall.redis.url": server.url,
            "squall.checkpoint.dir": str(tmp_path / "checkpoints"),
        }
        with TestCluster() as first:
            feeder = FeederSpout(["word"])
            first.submit_for_capture("in-redis", conf, one_count(feeder, 2))
            for w in ["a", "b", "a"]:
                feeder.feed([w])
            first.advance_time(1)  # checkpoint 1, in Redis
            assert len(feeder.acked) == 3
            server.stop()
            for w in ["a", "c"]:
                feeder.feed([w])
            first.advance_time(1)  # the server is away: the checkpoint fails, and the acks wait
            assert len(feeder.acked) == 3 and feeder.failed == set()
            server.start()
            first.advance_time(1)  # written now, with the changes it missed
            assert len(feeder.acked) == 5 and feeder.failed == set()

        with TestCluster() as second:  # a restarted topology finds its state in Redis
            feeder = FeederSpout(["word"])
            run = second.submit_for_capture("in-redis", conf, one_count(feeder, 2))
            feeder.feed(["a"])
            second.advance_time(1)
            assert counted(run) == {"a": 4} and len(feeder.acked) == 1
        keys = redis.Redis.from_url(server.url).keys("squall:state:in-redis:*")
        assert sorted(k.decode() for k in keys if k.endswith(b"checkpoint") or k.endswith(b"layout")) == [
            "squall:state:in-redis:checkpoint",
            "squall:state:in-redis:layout",
        ]
    finally:
        server.stop()


def test_a_redis_state_entry_not_signed_by_the_checkpoint_key_is_refused(tmp_path, redis_server):
    from squall.state.providers import RedisStateProvider

    provider = RedisStateProvider(redis_server.url, "signed", SEALER)
    provider.prepare(1, 1, StatePart({"a": 1}, [], True))
    provider.commit(1, {"count": [1]}, [(1, 1, True)])
    assert provider.load().states == {1: {"a": 1}}
    client = redis.Redis.from_url(redis_server.url)
    client.hset("squall:state:signed:task:1", b"\0" * 32 + pickle.dumps("evil"), b"\0" * 32 + pickle.dumps(0))
    with pytest.raises(TamperedBlobError, match="task 1's state: it is not a blob squall sealed"):
        provider.load()


class CountAndNoteCommits(StatefulCount):
    """Notes each checkpoint id it is asked to get ready for, with its state's size then."""

    def __init__(self, notes: str) -> None:
        self.notes = notes

    def pre_commit(self, checkpoint_id):
        with open(self.notes, "a") as out:
            out.write(f"{checkpoint_id}:{len(self.counts)}\n")


def test_pre_commit_runs_on_every_task_before_each_checkpoint(cluster, tmp_path):
    notes = tmp_path / "notes"
    feeder = FeederSpout(["word"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("count", CountAndNoteCommits(str(notes))).fields_grouping("s", ["word"])
    cluster.submit_topology("pre-commit", {"squall.checkpoint.dir": str(tmp_path)}, b.build())
    feeder.feed(["a"])
    cluster.wait_idle()
    assert not notes.exists()  # no checkpoint yet
    cluster.advance_time(1)
    feeder.feed(["b"])
    feeder.feed(["c"])
    cluster.advance_time(1)
    cluster.advance_time(1)  # nothing changed and nothing waits: no checkpoint
    assert notes.read_text().splitlines() == ["1:1", "2:3"]
    assert FileStateProvider(str(tmp_path / "pre-commit" / "state"), SEALER).load().checkpoint == 2


def test_rebalance_moves_a_stateful_bolts_keys_to_its_new_tasks(cluster, tmp_path):
    feeder = FeederSpout(["word"])
    conf = {"squall.checkpoint.dir": str(tmp_path)}
    words = [f"w{i}" for i in range(30)]
    first = cluster.submit_for_capture("rebalanced", conf, one_count(feeder, 2))
    ids = [feeder.feed([w]) for w in words]
    cluster.wait_idle()  # counted; the acks wait for a checkpoint, which rebalance lets happen
    run = cluster.rebalance("rebalanced", {"count": 3})
    assert feeder.acked == set(ids) and feeder.failed == set()
    assert run is not first and run.topology.task_ids("count") == (1, 2, 3)
    for w in words:
        feeder.feed([w])
    cluster.advance_time(1)
    assert counted(run) == {w: 2 for w in words}


def test_rebalance_names_what_it_cannot_change(cluster):
    cluster.submit_topology("fixed", {}, one_count(FeederSpout(["word"])))
    with pytest.raises(InvalidTopologyError, match="'nope': no such component"):
        cluster.rebalance("fixed", {"nope": 2})
    with pytest.raises(InvalidTopologyError, match="component 'count': parallelism must be an int >= 1, got 0"):
        cluster.rebalance("fixed", {"count": 0})


@pytest.mark.parametrize("provider", ["file", "redis"])
def test_tasks_numbered_anew_keep_their_state_when_their_bolts_parallelism_stays(spark, tmp_path, provider):
    """Another bolt's parallelism changed, and with it the task ids of a shuffle-grouped stateful bolt: each of
    its tasks keeps the state it had, by position, and later checkpoints build on it."""
    from servers import RedisServer

    from squall.state.providers import RedisStateProvider

    conf = {"squall.checkpoint.dir": str(tmp_path)}
    server = None
    if provider == "redis":
        (tmp_path / "redis").mkdir()
        server = RedisServer(tmp_path / "redis")
        conf.update({"topology.state.provider": "redis", "squall.redis.url": server.url})

    def build(feeder, upstream):
        b = TopologyBuilder()
        b.set_spout("s", feeder)
        b.set_bolt("a_first", Passthrough(), upstream).shuffle_grouping("s")  # its tasks are numbered first
        b.set_bolt("count", StatefulCount(), 2).shuffle_grouping("a_first")
        return b.build()

    if server is None:
        saved = FileStateProvider(str(tmp_path / "renumbered" / "state"), SEALER)
    else:
        saved = RedisStateProvider(server.url, "renumbered", SEALER)
    for upstream, word in ((1, "x"), (3, "y")):  # the second run counts only y: x must come through untouched
        with TestCluster() as cluster:
            feeder = FeederSpout(["word"])
            run = cluster.submit_topology("renumbered", conf, build(feeder, upstream))
            for _ in range(10):
                feeder.feed([word])
            cluster.advance_time(1)
            assert len(feeder.acked) == 10
        restored = saved.load()
        tasks = list(run.topology.task_ids("count"))
        assert restored.layout["count"] == tasks
        totals = Counter()
        for task in tasks:
            totals.update(restored.states[task])
        assert totals == ({"x": 10} if word == "x" else {"x": 10, "y": 10})
    if server is not None:
        server.stop()
