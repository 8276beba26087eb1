"""Stateful bolts on the wave runtime: the task's KeyValueState survives a dying Python worker, each wave saves
only the keys it changed, and a value that cannot be saved stops the topology with its component and key."""

import os
from collections import Counter
from pathlib import Path

import pytest

from squall import BasicBolt, StatefulBolt, TopologyBuilder, TopologyFailed
from squall.testing import FeederSpout


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
        self.state.put(tup[0], lambda: tup)  # a function cannot be pickled
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
    feeder = FeederSpout(["word"])
    run = cluster.submit_for_capture("stateful-crash", {}, word_count(feeder, CrashOnce(str(marker))))
    words = ["a", "b", "a", "c"] * 5
    for w in words:
        feeder.feed([w])
    cluster.wait_idle()
    for w in [*words, "crash", *words]:  # this wave loses a worker; its tasks restart from the driver's state
        feeder.feed([w])
    cluster.wait_idle()
    assert marker.read_text() == "crashed" and run.stats.restarts >= 1

    acks = Counter(m for kind, m in feeder.calls if kind == "ack")
    assert len(acks) == 3 * len(words) + 1 and set(acks.values()) == {1}
    assert counted(run) == dict(Counter([*words, *words, "crash", *words]))


def test_a_wave_saves_only_the_keys_it_changed(cluster):
    feeder = FeederSpout(["word"])
    run = cluster.submit_for_capture("stateful-delta", {}, word_count(feeder, Passthrough()))
    held = [f"w{i}" for i in range(1000)]
    for w in held:
        feeder.feed([w])
    cluster.wait_idle()
    stats = run.stats.of("count")
    assert stats.state_changes == 1000  # each key saved once: after the wave that put it
    for w in ["a", "b", "a", "c", "b", "w7"] * 3:  # one wave touching 4 keys, with 1000 held
        feeder.feed([w])
    cluster.wait_idle()
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
