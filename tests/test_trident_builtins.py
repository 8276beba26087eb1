"""Trident's built-in operations and the less common declarations, through one topology and DRPC: a stream's one
value (ungrouped persistent_aggregate, SnapshotGet), a reducer, FirstN, Equals, Negate, min_by, max_by, map,
flat_map and peek."""

import json

from test_trident_drpc import run

from squall.drpc import LocalDRPC
from squall.trident import ReducerAggregator, TridentTopology
from squall.trident.builtin import Count, Debug, Equals, FirstN, MapGet, Negate, SnapshotGet, Sum
from squall.trident.testing import FeederBatchSpout, MemoryMapState, Split, StringLength


class Longest(ReducerAggregator):
    """The longest word so far."""

    def init(self):
        return ""

    def reduce(self, curr, tup):
        return tup[0] if len(tup[0]) > len(curr) else curr


def test_built_in_operations_answer_as_storm_s_do():
    with LocalDRPC() as drpc:
        topology = TridentTopology()
        feeder = FeederBatchSpout(["sentence"])
        words = topology.new_stream("builtins", feeder).each(["sentence"], Split(), ["word"])
        total = words.persistent_aggregate(MemoryMapState.Factory(), Count(), ["total"])
        longest = words.persistent_aggregate(MemoryMapState.Factory(), ["word"], Longest(), ["longest"])
        letters = (
            words.each(["word"], StringLength(), ["len"])
            .group_by(["word"])
            .persistent_aggregate(MemoryMapState.Factory(), ["len"], Sum(), ["letters"])
        )
        topology.new_drpc_stream("total", drpc).state_query(total, ["args"], SnapshotGet(), ["total"]).project(
            ["total"]
        )
        topology.new_drpc_stream("longest", drpc).state_query(longest, ["args"], SnapshotGet(), ["w"]).project(["w"])
        (
            topology.new_drpc_stream("letters", drpc)
            .each(["args"], Split(), ["word"])
            .group_by(["word"])
            .state_query(letters, ["word"], MapGet(), ["letters"])
            .project(["word", "letters"])
        )
        asked = topology.new_drpc_stream("words", drpc).flat_map(lambda t: [[w] for w in t[0].split()], ["word"])
        asked.each(["word"], StringLength(), ["len"]).global_().apply_assembly(FirstN(2, "len", reverse=True)).project(
            ["word"]
        )
        shortest = topology.new_drpc_stream("shortest", drpc).flat_map(lambda t: [[w] for w in t[0].split()], ["w"])
        shortest.map(lambda t: [t[0], len(t[0])], ["w", "n"]).global_().min_by("n").project(["w"])
        tallest = topology.new_drpc_stream("tallest", drpc).flat_map(lambda t: [[w] for w in t[0].split()], ["w"])
        tallest.peek(lambda t: None).map(lambda t: [t[0], len(t[0])], ["w", "n"]).global_().max_by("n").project(["w"])
        pairs = topology.new_drpc_stream("same", drpc).map(lambda t: t[0].split(), ["a", "b"])
        pairs.each(["a", "b"], Equals()).each(["a"], Debug("same")).project(["a"])
        other = topology.new_drpc_stream("different", drpc).map(lambda t: t[0].split(), ["a", "b"])
        other.each(["a", "b"], Negate(Equals())).project(["b"])
        with run(topology) as cluster:
            feeder.feed([["the quick brown fox"], ["jumps over the lazy dog"]])
            feeder.feed([["a wonderful day"]])
            assert drpc.execute("total", "") == "[[12]]"
            assert drpc.execute("longest", "") == '[["wonderful"]]'
            assert sorted(json.loads(drpc.execute("letters", "the fox nope"))) == [
                ["fox", 3],
                ["nope", None],
                ["the", 6],
            ]
            assert json.loads(drpc.execute("words", "a bbbb cc ddd")) == [["bbbb"], ["ddd"]]
            assert drpc.execute("shortest", "ccc a bb") == '[["a"]]'
            assert drpc.execute("tallest", "ccc a bb") == '[["ccc"]]'
            assert drpc.execute("same", "x x") == '[["x"]]'
            assert drpc.execute("same", "x y") == "[]"
            assert drpc.execute("different", "x y") == '[["y"]]'
            assert not cluster.failures, cluster.failures
