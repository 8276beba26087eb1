"""How a Trident topology is declared and planned: errors at the call that makes them, and stable bolts."""

import pytest

from squall.model.errors import InvalidTopologyError
from squall.trident import TridentTopology
from squall.trident.builtin import Count, MapGet, Sum
from squall.trident.state import CombinerAggStateUpdater
from squall.trident.testing import FixedBatchSpout, MemoryMapState, Split, StringLength

SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
]


def sentences(topology):
    return topology.new_stream("spout1", FixedBatchSpout(["sentence"], 3, *SENTENCES))


def words(topology):
    return sentences(topology).each(["sentence"], Split(), ["word"])


@pytest.mark.parametrize(
    "declare",
    [
        lambda t: sentences(t).each(["sentence1"], Split(), ["word"]),
        lambda t: words(t).group_by(["word1"]),
        lambda t: words(t).group_by(["word"]).aggregate(["word1"], Count(), ["count"]),
        lambda t: sentences(t).project(["sentence1"]),
        lambda t: sentences(t).partition_by(["sentence1"]),
        lambda t: words(t).partition_aggregate(["word1"], Count(), ["count"]),
        lambda t: words(t).group_by(["word"]).persistent_aggregate(MemoryMapState.Factory(), ["x"], Count(), ["c"]),
        lambda t: words(t).partition_persist(MemoryMapState.Factory(), ["x"], CombinerAggStateUpdater(Count()), ["c"]),
    ],
)
def test_a_declaration_naming_a_missing_field_fails_where_it_is_made(declare):
    with pytest.raises(ValueError, match=r"non-existent field '(sentence1|word1|x)'.*fields \['sentence'") as info:
        declare(TridentTopology())
    assert "word" in str(info.value) or "sentence" in str(info.value)


def test_a_function_field_that_clashes_with_the_stream_is_refused():
    with pytest.raises(ValueError, match=r"\['sentence'\] are already fields"):
        sentences(TridentTopology()).each(["sentence"], Split(), ["sentence"])


def test_bolt_ids_come_from_the_groups_and_their_names_and_do_not_change_between_builds():
    def build():
        topology = TridentTopology()
        spout = FixedBatchSpout(["sentence"], 3, *SENTENCES)
        spout.set_cycle(True)
        (
            topology.new_stream("spout", spout)
            .each(["sentence"], Split(), ["word"])
            .partition_by(["word"])
            .name("abc")
            .each(["word"], StringLength(), ["length"])
            .partition_by(["length"])
            .name("def")
            .aggregate(["length"], Count(), ["count"])
            .partition_by(["count"])
            .name("ghi")
            .aggregate(["count"], Sum(), ["sum"])
        )
        return set(topology.build().topology.bolts)

    first = build()
    assert all(build() == first for _ in range(20))
    # each aggregate is two bolts: the partial counts on the current partitions, then the batch's total
    assert first == {"b-0", "b-1-abc", "b-2-def", "b-3-def", "b-4-ghi", "b-5-ghi"}


def test_the_word_count_plans_two_bolts_with_the_spout_capped_at_one_task():
    topology = TridentTopology()
    (
        words(topology)
        .group_by(["word"])
        .persistent_aggregate(MemoryMapState.Factory(), Count(), ["count"])
        .parallelism_hint(6)
    )
    built = topology.build()
    graph = built.topology
    assert {c: graph.components[c].parallelism for c in graph.components} == {"spout-spout1": 1, "b-0": 1, "b-1": 6}
    assert built.committers == {"b-1"}
    (sub,) = graph.components["b-1"].inputs
    assert (sub.source, sub.grouping.name) == ("b-0", "fields")


def test_a_state_query_naming_a_missing_field_fails_where_it_is_made():
    topology = TridentTopology()
    counts = words(topology).group_by(["word"]).persistent_aggregate(MemoryMapState.Factory(), Count(), ["count"])
    request = topology.new_drpc_stream("words").each(["args"], Split(), ["word"]).group_by(["word"])
    with pytest.raises(ValueError, match=r"non-existent field 'word1' from a stream with fields \['args', 'word'\]"):
        request.state_query(counts, ["word1"], MapGet(), ["count"])


def test_a_drpc_stream_and_a_batch_stream_may_not_meet():
    topology = TridentTopology()
    batches = words(topology).project(["word"])
    requests = topology.new_drpc_stream("words").each(["args"], Split(), ["word"]).project(["word"])
    topology.merge(batches, requests)
    with pytest.raises(InvalidTopologyError, match="cannot mix the batches of two spouts"):
        topology.build()
