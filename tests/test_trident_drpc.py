"""Storm's Trident integration tests (TridentIntegrationTest), as users write them: a LocalCluster, a LocalDRPC,
and the exact results Storm's tests expect."""

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from squall import LocalCluster
from squall.drpc import DRPCExecutionException, LocalDRPC
from squall.trident import BaseFunction, CombinerAggregator, MapState, ReadOnlyState, StateFactory, TridentTopology
from squall.trident.builtin import Count, FilterNull, MapGet, Sum, TupleCollectionGet
from squall.trident.testing import (
    CountAsAggregator,
    FeederBatchSpout,
    MemoryMapState,
    Split,
    StringLength,
    TrueFilter,
)


def run(topology):
    """Submit to a fresh LocalCluster: its thread moves the batches and the requests."""
    cluster = LocalCluster()
    cluster.submit_topology("tester", {}, topology.build())
    return cluster


def as_multiset(text):
    return Counter(json.dumps(row) for row in json.loads(text))


def test_memory_map_get_tuples_and_the_word_count_with_drpc():
    with LocalDRPC() as drpc:
        topology = TridentTopology()
        feeder = FeederBatchSpout(["sentence"])
        word_counts = (
            topology.new_stream("tester", feeder)
            .each(["sentence"], Split(), ["word"])
            .group_by(["word"])
            .persistent_aggregate(MemoryMapState.Factory(), Count(), ["count"])
            .parallelism_hint(6)
        )
        topology.new_drpc_stream("all-tuples", drpc).broadcast().state_query(
            word_counts, ["args"], TupleCollectionGet(), ["word", "count"]
        ).project(["word", "count"])
        (
            topology.new_drpc_stream("words", drpc)
            .each(["args"], Split(), ["word"])
            .group_by(["word"])
            .state_query(word_counts, ["word"], MapGet(), ["count"])
            .aggregate(["count"], Sum(), ["sum"])
            .project(["sum"])
        )
        with run(topology) as cluster:
            feeder.feed([["hello the man said"], ["the"]])
            assert as_multiset(drpc.execute("all-tuples", "man")) == as_multiset(
                '[["hello",1],["said",1],["the",2],["man",1]]'
            )
            assert json.loads(drpc.execute("words", "the")) == [[2]]
            assert json.loads(drpc.execute("words", "hello")) == [[1]]
            feeder.feed([["the foo"]])
            assert as_multiset(drpc.execute("all-tuples", "man")) == as_multiset(
                '[["hello",1],["said",1],["the",3],["man",1],["foo",1]]'
            )
            feeder.feed([["the man on the moon"], ["where are you"]])
            assert json.loads(drpc.execute("words", "the")) == [[5]]
            assert json.loads(drpc.execute("words", "man")) == [[2]]
            assert json.loads(drpc.execute("words", "man where you the")) == [[9]]
            assert not cluster.failures, cluster.failures


def test_count_agg_split_merge_groupings_and_repartitions_over_drpc():
    with LocalDRPC() as drpc:
        topology = TridentTopology()
        (
            topology.new_drpc_stream("numwords", drpc)
            .each(["args"], Split(), ["word"])
            .aggregate(CountAsAggregator(), ["count"])
            .parallelism_hint(2)
            .project(["count"])
        )
        s = topology.new_drpc_stream("splitter", drpc)
        s1 = s.each(["args"], Split(), ["word"]).project(["word"])
        s2 = s.each(["args"], StringLength(), ["len"]).project(["len"])
        topology.merge(s1, s2)
        t = topology.new_drpc_stream("tester", drpc).each(["args"], TrueFilter())
        g1 = t.group_by(["args"]).aggregate(CountAsAggregator(), ["count"])
        g2 = t.group_by(["args"]).aggregate(CountAsAggregator(), ["count"])
        topology.merge(g1, g2)
        (
            topology.new_drpc_stream("repartitions", drpc)
            .each(["args"], Split(), ["word"])
            .local_or_shuffle()
            .shuffle()
            .aggregate(CountAsAggregator(), ["count"])
        )
        with run(topology) as cluster:
            for _ in range(100):
                assert json.loads(drpc.execute("numwords", "the")) == [[1]]
            assert json.loads(drpc.execute("numwords", "")) == [[0]]
            assert json.loads(drpc.execute("numwords", "1 2 3 4 5 6 7 8")) == [[8]]
            assert as_multiset(drpc.execute("splitter", "the man")) == as_multiset('[[7],["the"],["man"]]')
            assert as_multiset(drpc.execute("splitter", "hello")) == as_multiset('[[5],["hello"]]')
            assert as_multiset(drpc.execute("tester", "the")) == as_multiset('[["the",1],["the",1]]')
            assert as_multiset(drpc.execute("tester", "aaaaa")) == as_multiset('[["aaaaa",1],["aaaaa",1]]')
            assert json.loads(drpc.execute("repartitions", "the man")) == [[2]]
            assert json.loads(drpc.execute("repartitions", "aaa")) == [[1]]
            assert not cluster.failures, cluster.failures


class Explodes(Split):
    def execute(self, tup, collector):
        if tup[0] == "boom":
            raise RuntimeError("boom")
        super().execute(tup, collector)


def test_a_request_whose_operation_raises_fails_its_caller_and_the_next_one_is_served():
    with LocalDRPC() as drpc:
        topology = TridentTopology()
        topology.new_drpc_stream("words", drpc).each(["args"], Explodes(), ["word"]).each(["word"], FilterNull())
        with run(topology) as cluster:
            with pytest.raises(DRPCExecutionException, match="boom"):
                drpc.execute("words", "boom")
            assert sorted(json.loads(drpc.execute("words", "a b"))) == [["a b", "a"], ["a b", "b"]]
            assert not cluster.failures, cluster.failures


TWEETERS_DB = {
    "foo.com/blog/1": ["sally", "bob", "tim", "george", "nathan"],
    "engineering.twitter.com/blog/5": ["adam", "david", "sally", "nathan"],
    "tech.backtype.com/blog/123": ["tim", "mike", "john"],
}
FOLLOWERS_DB = {
    "sally": ["bob", "tim", "alice", "adam", "jim", "chris", "jai"],
    "bob": ["sally", "nathan", "jim", "mary", "david", "vivian"],
    "tim": ["alex"],
    "nathan": ["sally", "bob", "adam", "harry", "chris", "vivian", "emily", "jordan"],
    "adam": ["david", "carissa"],
    "mike": ["john", "bob"],
    "john": ["alice", "nathan", "jim", "mike", "bob"],
}


class StaticSingleKeyMapState(ReadOnlyState, MapState):
    """storm-starter's lookup table: a key's value in a dict, read only."""

    def __init__(self, db):
        self.db = db

    class Factory(StateFactory):
        def __init__(self, db):
            self.db = db

        def make_state(self, conf, metrics, partition_index, num_partitions):
            return StaticSingleKeyMapState(self.db)

    def multi_get(self, keys):
        return [self.db.get(key[0]) for key in keys]


class ExpandList(BaseFunction):
    def execute(self, tup, collector):
        for value in tup[0] or ():
            collector.emit([value])


class One(CombinerAggregator):
    def init(self, tup):
        return 1

    def combine(self, a, b):
        return 1

    def zero(self):
        return 1


def test_reach_of_a_url_from_two_static_states():
    """storm-starter's TridentReach: the distinct followers of everyone who tweeted a URL."""
    with LocalDRPC() as drpc:
        topology = TridentTopology()
        url_to_tweeters = topology.new_static_state(StaticSingleKeyMapState.Factory(TWEETERS_DB))
        tweeters_to_followers = topology.new_static_state(StaticSingleKeyMapState.Factory(FOLLOWERS_DB))
        (
            topology.new_drpc_stream("reach", drpc)
            .state_query(url_to_tweeters, ["args"], MapGet(), ["tweeters"])
            .each(["tweeters"], ExpandList(), ["tweeter"])
            .shuffle()
            .state_query(tweeters_to_followers, ["tweeter"], MapGet(), ["followers"])
            .each(["followers"], ExpandList(), ["follower"])
            .group_by(["follower"])
            .aggregate(One(), ["one"])
            .aggregate(["one"], Sum(), ["reach"])
        )
        with run(topology) as cluster:
            assert drpc.execute("reach", "foo.com/blog/1") == "[[16]]"
            assert drpc.execute("reach", "engineering.twitter.com/blog/5") == "[[14]]"
            assert drpc.execute("reach", "aaa") == "[[0]]"
            assert not cluster.failures, cluster.failures


class LosesItsFirstCommitOfTxid2(MapState):
    """Txid 2's first commit raises after its writes landed (its worker lost mid-commit); its second waits, holding
    the state, until the test creates ``release``."""

    def __init__(self, state, marks):
        self.state, self.marks = state, Path(marks)

    def begin_commit(self, txid):
        if txid == 2 and (self.marks / "lost").exists():
            (self.marks / "holding").touch()
            deadline = time.monotonic() + 60
            while not (self.marks / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        self.state.begin_commit(txid)

    def commit(self, txid):
        self.state.commit(txid)
        if txid == 2 and not (self.marks / "lost").exists():
            (self.marks / "lost").touch()
            raise RuntimeError("worker lost mid-commit")

    def multi_get(self, keys):
        return self.state.multi_get(keys)

    def multi_put(self, keys, vals):
        self.state.multi_put(keys, vals)

    def multi_update(self, keys, updaters):
        return self.state.multi_update(keys, updaters)


class Losing(StateFactory):
    def __init__(self, marks):
        self.marks, self.memory = str(marks), MemoryMapState.Factory()

    def make_state(self, conf, metrics, partition_index, num_partitions):
        return LosesItsFirstCommitOfTxid2(self.memory.make_state(conf, metrics, 0, 1), self.marks)


def test_a_query_never_answers_with_a_count_whose_batch_has_not_committed(tmp_path):
    with LocalDRPC() as drpc:
        topology = TridentTopology()
        feeder = FeederBatchSpout(["sentence"])
        counts = (
            topology.new_stream("uncommitted", feeder)
            .each(["sentence"], Split(), ["word"])
            .group_by(["word"])
            .persistent_aggregate(Losing(tmp_path), Count(), ["count"])
        )
        topology.new_drpc_stream("count", drpc).state_query(counts, ["args"], MapGet(), ["count"]).project(["count"])
        with run(topology) as cluster:
            feeder.feed([["a b"]])
            assert drpc.execute("count", "a") == "[[1]]"
            second = threading.Thread(target=feeder.feed, args=([["a a"]],))
            second.start()  # txid 2 writes a = 3, loses its commit, and runs again, held
            deadline = time.monotonic() + 60
            while not (tmp_path / "holding").exists():
                assert time.monotonic() < deadline and not cluster.failures, cluster.failures
                time.sleep(0.01)
            answers = []
            asking = threading.Thread(target=lambda: answers.append(drpc.execute("count", "a")))
            asking.start()  # begins while txid 1 is the last committed
            time.sleep(0.5)
            (tmp_path / "release").touch()
            asking.join(60)
            second.join(60)
            assert answers == ["[[1]]"]  # not txid 2's 3, written but not committed when the query began
            assert drpc.execute("count", "a") == "[[3]]"
            assert not cluster.failures, cluster.failures
