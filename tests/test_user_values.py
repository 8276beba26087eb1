"""Values of classes defined in a test module travel between tasks, as storm-starter's RollingTopWords needs.

The rankers of RollingTopWords emit ``Rankings`` objects: a class of the user's own, defined here, in a module
Spark's Python workers cannot import. They travel by value, as the components themselves do.
"""

from __future__ import annotations

from collections import Counter

from squall import BasicBolt, Bolt, Fields, StatefulBolt, TopologyBuilder
from squall.testing import FeederSpout

WORDS = ["nathan", "mike", "golda", "jackson", "bertels"]
TOP_N = 3


class Rankable:
    def __init__(self, obj: str, count: int) -> None:
        self.obj, self.count = obj, count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rankable) and (self.obj, self.count) == (other.obj, other.count)


class Rankings:
    """The top ``max_size`` objects by count, as storm-starter's ``Rankings``."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.rankings: list[Rankable] = []

    def update_with(self, other: Rankings | Rankable) -> None:
        for item in other.rankings if isinstance(other, Rankings) else [other]:
            self.rankings = [r for r in self.rankings if r.obj != item.obj] + [item]
        self.rankings.sort(key=lambda r: (-r.count, r.obj))
        del self.rankings[self.max_size :]

    def copy(self) -> Rankings:
        twin = Rankings(self.max_size)
        twin.rankings = list(self.rankings)
        return twin


class RollingCount(BasicBolt):
    """Counts each word and emits ``(obj, count)`` on every tuple (the rolling window is one unending slot)."""

    outputs = ("obj", "count")

    def prepare(self, conf, context):
        self.counts = Counter()

    def execute(self, tup, collector):
        self.counts[tup["word"]] += 1
        collector.emit([tup["word"], self.counts[tup["word"]]])


class IntermediateRankings(BasicBolt):
    outputs = ("rankings",)

    def prepare(self, conf, context):
        self.rankings = Rankings(TOP_N)

    def execute(self, tup, collector):
        self.rankings.update_with(Rankable(tup["obj"], tup["count"]))
        collector.emit([self.rankings.copy()])  # a Rankings object, as storm-starter's rankers emit


class TotalRankings(Bolt):
    outputs = ("rankings",)

    def prepare(self, conf, context, collector):
        self.collector, self.rankings = collector, Rankings(TOP_N)

    def execute(self, tup):
        received = tup["rankings"]
        assert isinstance(received, Rankings), type(received)
        self.rankings.update_with(received)
        self.collector.emit([self.rankings.copy()], anchors=tup)
        self.collector.ack(tup)


def test_rolling_top_words_emits_rankings_objects_defined_in_the_test_module(cluster):
    spout = FeederSpout(Fields("word"))
    builder = TopologyBuilder()
    builder.set_spout("word", spout)
    builder.set_bolt("counter", RollingCount(), 2).fields_grouping("word", Fields("word"))
    builder.set_bolt("intermediate-ranker", IntermediateRankings(), 2).fields_grouping("counter", Fields("obj"))
    builder.set_bolt("total-ranker", TotalRankings()).global_grouping("intermediate-ranker")
    run = cluster.submit_for_capture("rolling-top-words", {}, builder.build())

    stream = [WORDS[i % 5] for i in range(20)] + ["nathan"] * 4 + ["golda"] * 2
    ids = [spout.feed([word]) for word in stream]
    cluster.wait_idle()

    assert spout.acked == set(ids) and spout.failed == set()
    assert run.stats.of("intermediate-ranker").errors == 0
    final = run.captured["total-ranker"][-1][0]
    assert isinstance(final, Rankings)
    assert [(r.obj, r.count) for r in final.rankings] == [("nathan", 8), ("golda", 6), ("bertels", 4)]
    assert len(run.captured["total-ranker"]) == len(stream)


class RankingsByWord(StatefulBolt):
    """Keeps, per word, a ``Rankings`` of the sources that sent it: values of a test-module class in state."""

    outputs = ("word", "top")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        rankings = self.state.get(tup["obj"]) or Rankings(TOP_N)
        rankings.update_with(Rankable(tup["obj"], tup["count"]))
        self.state.put(tup["obj"], rankings)
        self.collector.emit([tup["obj"], rankings.rankings[0].count], anchors=tup)
        self.collector.ack(tup)


def test_a_stateful_bolt_keeps_values_of_a_test_module_class_in_its_state(cluster):
    spout = FeederSpout(Fields("word"))
    builder = TopologyBuilder()
    builder.set_spout("word", spout)
    builder.set_bolt("counter", RollingCount(), 2).fields_grouping("word", Fields("word"))
    builder.set_bolt("ranked", RankingsByWord(), 2).fields_grouping("counter", Fields("obj"))
    run = cluster.submit_for_capture("rankings-in-state", {}, builder.build())

    ids = [spout.feed([WORDS[i % 3]]) for i in range(9)]
    cluster.advance_time(2)  # a checkpoint releases the stateful bolt's acks

    assert spout.acked == set(ids) and spout.failed == set()
    assert run.stats.of("ranked").errors == 0
    assert sorted(run.captured["ranked"]) == sorted((word, n) for word in WORDS[:3] for n in (1, 2, 3))
