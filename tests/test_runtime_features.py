"""Groupings, streams, ticks, BasicBolt, errors and task state, on Spark local mode."""

import logging
import time
from collections import Counter

import pytest
from components import (
    AckAll,
    DirectEmitter,
    FailOnWord,
    Identity,
    PrepareCounter,
    Router,
    StreamRecorder,
    TaskRecorder,
    TickCounter,
    Unserializable,
    WordCount,
)

from squall import Bolt, LocalCluster, Spout, TopologyBuilder
from squall.model.hashing import stable_hash
from squall.spark import EmitError, SerializationError
from squall.spark.hub import Hub
from squall.spark.protocol import Batch, WaveInput
from squall.testing import FeederSpout, complete_topology

WORDS = ["cat", "dog", "chicken", "apple", "banana", "cat", "dog", "emu", "fox", "gnu", "cat", "hen"]


def test_every_grouping_reaches_the_exact_tasks(spark):
    b = TopologyBuilder()
    b.set_spout("words", FeederSpout(["word"]))
    b.set_bolt("fields", TaskRecorder(), 4).fields_grouping("words", ["word"])
    b.set_bolt("global", TaskRecorder(), 3).global_grouping("words")
    b.set_bolt("all", TaskRecorder(), 3).all_grouping("words")
    b.set_bolt("shuffle", TaskRecorder(), 4).shuffle_grouping("words")
    b.set_bolt("none", TaskRecorder(), 3).none_grouping("words")
    b.set_bolt("local", TaskRecorder(), 3).local_or_shuffle_grouping("words")
    topo = b.build()
    out = complete_topology(topo, {"words": [[w] for w in WORDS]})
    tasks = {c: topo.task_ids(c) for c in topo.components}

    assert sorted(out["fields"]) == sorted((tasks["fields"][stable_hash([w]) % 4], w) for w in WORDS)
    assert sorted(out["global"]) == sorted((min(tasks["global"]), w) for w in WORDS)
    assert sorted(out["all"]) == sorted((t, w) for t in tasks["all"] for w in WORDS)
    for comp, n in (("shuffle", 4), ("none", 3), ("local", 3)):
        assert sorted(w for _, w in out[comp]) == sorted(WORDS)
        per_task = Counter(t for t, _ in out[comp])
        assert set(per_task) == set(tasks[comp]) and len(per_task) == n
        assert max(per_task.values()) - min(per_task.values()) <= 1, per_task


def test_direct_grouping_goes_to_the_named_task(spark):
    b = TopologyBuilder()
    b.set_spout("s", FeederSpout(["v", "target"]))
    b.set_bolt("emitter", DirectEmitter()).shuffle_grouping("s")
    b.set_bolt("rec", TaskRecorder(), 3).direct_grouping("emitter", stream="direct")
    topo = b.build()
    rec_tasks = topo.task_ids("rec")
    inputs = [[f"x{i}", rec_tasks[i % 3]] for i in range(7)] + [[f"y{i}", rec_tasks[2]] for i in range(2)]
    out = complete_topology(topo, {"s": inputs})
    assert sorted(out["rec"]) == sorted((t, v) for v, t in inputs)


def test_emit_direct_to_a_task_that_is_not_a_subscriber_fails_the_tuple(cluster, caplog):
    feeder = FeederSpout(["v", "target"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("emitter", DirectEmitter()).shuffle_grouping("s")
    b.set_bolt("rec", TaskRecorder(), 2).direct_grouping("emitter", stream="direct")
    topo = b.build()
    cluster.submit_topology("direct-bad", {}, topo)
    feeder.feed(["x", topo.task_ids("emitter")[0]], "wrong-task")
    feeder.feed(["y", topo.task_ids("rec")[1]], "right-task")
    with caplog.at_level(logging.ERROR, logger="squall"):
        cluster.wait_idle()
    assert feeder.failed == {"wrong-task"} and feeder.acked == {"right-task"}
    assert "called emit_direct to task" in caplog.text and "stream 'direct'" in caplog.text


def test_named_streams(spark):
    b = TopologyBuilder()
    b.set_spout("nums", FeederSpout(["n"]))
    b.set_bolt("router", Router(), 2).shuffle_grouping("nums")
    b.set_bolt("evens", StreamRecorder()).shuffle_grouping("router", stream="even")
    b.set_bolt("odds", StreamRecorder()).shuffle_grouping("router", stream="odd")
    out = complete_topology(b.build(), {"nums": [[n] for n in range(6)]})
    assert sorted(out["evens"]) == [("even", (0,)), ("even", (2,)), ("even", (4,))]
    assert sorted(out["odds"]) == [("odd", (1, 0)), ("odd", (3, 1)), ("odd", (5, 2))]
    assert out["router"] == []  # nothing on the default stream


def test_tick_tuples_reach_every_task_on_schedule(cluster):
    b = TopologyBuilder()
    b.set_spout("s", FeederSpout(["v"]))
    b.set_bolt("ticker", TickCounter(), 2).shuffle_grouping("s")
    run = cluster.submit_topology("ticks", {"topology.tick.tuple.freq.secs": 5}, b.build())
    cluster.advance_time(4)
    assert run.stats.of("ticker").executed == 0
    cluster.advance_time(11)  # t = 15: ticks at 5, 10, 15 on each of 2 tasks
    assert run.stats.of("ticker").executed == 6 and run.stats.of("ticker").emitted == 6


class Silent(Spout):
    outputs = ("v",)

    def next_tuple(self):
        pass


def test_under_local_cluster_the_workers_make_the_tick_tuples_and_the_driver_sends_none(spark, monkeypatch):
    """The driver keeps the tick clock and says which ticks are due; the tick tuples are made where their task
    runs, as Storm's executor makes its own: nothing the driver's hub sends is a tuple."""
    sent = []
    hub_send = Hub.send

    def recording(hub, messages):
        sent.extend(message for _, message in messages)
        hub_send(hub, messages)

    monkeypatch.setattr(Hub, "send", recording)
    b = TopologyBuilder()
    b.set_spout("s", Silent())
    b.set_bolt("ticker", TickCounter(), 2).shuffle_grouping("s")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("worker-ticks", {"topology.tick.tuple.freq.secs": 1}, b.build())
        deadline = time.monotonic() + 120
        while run.stats.of("ticker").executed < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.kill_topology("worker-ticks")
    executed = run.stats.of("ticker").executed
    assert executed >= 4 and run.stats.of("ticker").emitted == executed  # TickCounter emits once per tick
    waves = [message for message in sent if isinstance(message, WaveInput)]
    assert waves and not any(isinstance(part, Batch) for wave in waves for part in wave.markers)  # no tuples
    due = [tick for wave in waves for tick in wave.ticks]
    assert {tick.task for tick in due} == set(run.topology.task_ids("ticker"))
    assert {tick.freq_secs for tick in due} == {1.0} and sum(tick.count for tick in due) >= executed


def test_basic_bolt_failed_exception_and_errors_fail_the_tuple_and_keep_running(cluster, caplog):
    feeder = FeederSpout(["word"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("f", FailOnWord(), 2).shuffle_grouping("s")
    b.set_bolt("sink", AckAll()).shuffle_grouping("f")
    cluster.submit_topology("errors", {}, b.build())
    for word in ["ok", "bad", "boom", "fine"]:
        feeder.feed([word], word)
    with caplog.at_level(logging.ERROR, logger="squall"):
        cluster.wait_idle()
    assert feeder.acked == {"ok", "fine"} and feeder.failed == {"bad", "boom"}
    errors = [r.getMessage() for r in caplog.records if "bolt error" in r.getMessage()]
    assert len(errors) == 1  # FailedException is a plain fail, not an error
    assert "f task" in errors[0] and "ZeroDivisionError: boom" in errors[0] and "Traceback" in errors[0]
    feeder.feed(["later"], "later")
    cluster.wait_idle()
    assert "later" in feeder.acked
    assert cluster.stats("errors").of("f").errors == 1


def test_bad_emits_name_the_component_and_stream(cluster, caplog):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("u", Unserializable()).shuffle_grouping("s")
    b.set_bolt("sink", AckAll()).shuffle_grouping("u")
    cluster.submit_topology("bad-emits", {}, b.build())
    for v in ["lock", "wrong-arity", "undeclared", "fine"]:
        feeder.feed([v], v)
    with caplog.at_level(logging.ERROR, logger="squall"):
        cluster.wait_idle()
    assert feeder.failed == {"lock", "wrong-arity", "undeclared"} and feeder.acked == {"fine"}
    text = caplog.text
    assert "SerializationError: component 'u' emitted on stream 'default' a value that cannot be serialized" in text
    assert "field 'v' is a lock" in text
    assert "component 'u' emitted 2 value(s) on stream 'default', which declares 1 field(s) ['v']" in text
    assert "component 'u' emitted on undeclared stream 'nope'" in text


def test_spout_emit_errors_are_raised_to_the_spout():
    from squall.spark.records import check_emit

    b = TopologyBuilder()
    b.set_spout("s", FeederSpout(["v"]))
    b.set_bolt("sink", AckAll()).shuffle_grouping("s")
    topo = b.build()
    with pytest.raises(SerializationError, match="component 's' emitted on stream 'default'"):
        check_emit(topo, "s", "default", [object.__new__(type("Local", (), {"__reduce__": None}))])
    with pytest.raises(EmitError, match="values must be a list or tuple"):
        check_emit(topo, "s", "default", "word")


def test_task_state_survives_waves_and_prepare_runs_once_per_instance(cluster):
    feeder = FeederSpout(["word"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("count", WordCount(), 2).fields_grouping("s", ["word"])
    b.set_bolt("prep", PrepareCounter(), 2).shuffle_grouping("s")
    run = cluster.submit_for_capture("state", {}, b.build())
    for _ in range(5):
        for word in ["a", "b", "a"]:
            feeder.feed([word])
        cluster.wait_idle()
    counts = {}
    for word, count in run.captured["count"]:
        counts[word] = max(counts.get(word, 0), count)
    assert counts == {"a": 10, "b": 5}
    seen = {}
    for task, prepares, n in run.captured["prep"]:
        assert prepares >= 1
        seen[task] = max(seen.get(task, 0), n)
    assert sum(seen.values()) == 15  # each instance's count survived every wave
    assert len(feeder.acked) == 15


class ExplodingSpout(Spout):
    outputs = ("v",)

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.n += 1
        if self.n == 1:
            raise RuntimeError("spout trouble")
        if self.n < 5:
            self.collector.emit([self.n], msg_id=self.n)


def test_a_raising_spout_is_logged_and_called_again(cluster, caplog):
    b = TopologyBuilder()
    b.set_spout("s", ExplodingSpout())
    b.set_bolt("id", Identity()).shuffle_grouping("s")
    with caplog.at_level(logging.ERROR, logger="squall"):
        run = cluster.submit_topology("spout-errors", {}, b.build())
        cluster.wait_idle()
    assert "spout s task 2 raised in next_tuple" in caplog.text and "spout trouble" in caplog.text
    stats = run.stats.of("s")
    assert stats.errors == 1  # counted once, and the topology went on: the next wave called the spout again
    assert (stats.emitted, stats.acked, stats.failed) == (3, 3, 0)


def test_a_bolt_reading_two_streams_of_one_bolt_gets_each_tuple_once(cluster):
    feeder = FeederSpout(["n"])
    b = TopologyBuilder()
    b.set_spout("nums", feeder)
    b.set_bolt("router", Router(), 2).shuffle_grouping("nums")
    b.set_bolt("both", StreamRecorder(), 2).shuffle_grouping("router", stream="even").shuffle_grouping(
        "router", stream="odd"
    )
    run = cluster.submit_for_capture("two-streams", {}, b.build())
    for n in range(6):
        feeder.feed([n], n)
    cluster.wait_idle()
    assert sorted(run.captured["both"]) == sorted(
        [("even", (0,)), ("even", (2,)), ("even", (4,)), ("odd", (1, 0)), ("odd", (3, 1)), ("odd", (5, 2))]
    )
    assert feeder.acked == set(range(6)) and feeder.failed == set()


class FedWords(Spout):
    """Emits the words fed to it through a file, one a line, msg id = the word; it reads the file where it runs
    (on a worker)."""

    outputs = ("word",)

    def __init__(self, path: str) -> None:
        self.path = path
        open(path, "w").close()

    def feed(self, word: str) -> None:
        with open(self.path, "a") as fed:
            fed.write(word + "\n")

    def open(self, conf, context, collector):
        self.collector, self.partial = collector, ""
        self.file = open(self.path)  # noqa: SIM115 -- read until close()

    def next_tuple(self):
        line = self.partial + self.file.readline()
        if not line.endswith("\n"):
            self.partial = line
            return
        self.partial = ""
        self.collector.emit([line[:-1]], msg_id=line[:-1])

    def close(self):
        self.file.close()


class SlowFlush(Bolt):
    """Holds every tuple; on each tick takes 2 s to store what it holds (a slow database), then acks it all."""

    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector, self.held = collector, []

    def execute(self, tup):
        if not tup.is_tick:
            self.held.append(tup)
            return
        if self.held:
            time.sleep(2)
        for held in self.held:
            self.collector.ack(held)
        self.held = []


def test_a_tree_settled_after_a_long_wave_does_not_count_as_idle_time(spark, tmp_path):
    """``squall run --idle-secs`` asks ``idle_for`` from its own thread. A wave that ran long (the bolt's 2 s
    flush) and settled every pending tree must not look like idle time the instant its ack is known: idleness
    counts from the end of the step that left nothing pending, not from before the long wave."""
    spout = FedWords(str(tmp_path / "fed.txt"))
    b = TopologyBuilder()
    b.set_spout("s", spout)
    b.set_bolt("store", SlowFlush(), 1).shuffle_grouping("s").add_configuration("topology.tick.tuple.freq.secs", 1)
    with LocalCluster() as cluster:
        run = cluster.submit_topology("slow-flush", {}, b.build())
        spout.feed("held")
        deadline = time.monotonic() + 120
        while run.stats.of("s").emitted == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        while run.stats.of("s").acked == 0 and time.monotonic() < deadline:
            assert run.idle_for() == 0  # a tree is pending
            time.sleep(0.005)
        idle_when_acked = run.idle_for()
        assert run.stats.of("s").acked == 1 and idle_when_acked < 1.0  # not counted from before the 2 s wave
        while run.idle_for() == 0 and time.monotonic() < deadline:  # and then the topology does go idle
            time.sleep(0.01)
        assert run.idle_for() > 0 and run.pending_count == 0
