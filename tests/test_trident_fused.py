"""A function straight into a grouped Count or Sum runs fused: the same output as the two run apart, for any
sentences (hypothesis), with no Spark: each bolt's plan run by hand on one batch."""

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from squall.model.attempt import TransactionAttempt
from squall.model.topology import TopologyContext
from squall.transactional.resources import WorkerResources
from squall.trident import BaseFunction, TridentTopology
from squall.trident.bolt import TaskPlan
from squall.trident.builtin import Count, Sum
from squall.trident.processors import FusedCount
from squall.trident.testing import FixedBatchSpout, MemoryMapState


class SplitWithLength(BaseFunction):
    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            if word:
                collector.emit([word, len(word)])


class NotFused(Count):
    """A Count the planner does not know: the general path."""


class SumNotFused(Sum):
    pass


class Emits:
    """Stands in for the try's OutputCollector: what the bolt emits, by stream."""

    def __init__(self):
        self.rows = Counter()
        self.captured = []

    def emit(self, values, stream="default"):
        self.rows[(stream, tuple(values))] += 1

    def emit_direct(self, task, values, stream="default"):
        self.rows[(stream, tuple(values))] += 1


def first_bolt_output(agg, sentences):
    topology = TridentTopology()
    words = topology.new_stream("s", FixedBatchSpout(["sentence"], 10)).each(
        ["sentence"], SplitWithLength(), ["word", "len"]
    )
    inputs = ["len"] if isinstance(agg, Sum) else ["word"]
    words.group_by(["word"]).persistent_aggregate(MemoryMapState.Factory(), inputs, agg, ["value"])
    built = topology.build()
    graph = built.topology
    bolt = graph.components["b-0"].obj
    resources = WorkerResources()
    task = TaskPlan(bolt._plan, {}, TopologyContext(graph, "b-0", graph.task_ids("b-0")[0]), resources)
    emits = Emits()
    ctx = task.start(TransactionAttempt(1, 1), emits)
    task.execute_rows(ctx, "spout-s", ["default"] * len(sentences), [(s,) for s in sentences])
    task.finish(ctx)
    fused = any(isinstance(p, FusedCount) for p in bolt._plan.processors)
    return emits.rows, fused


SENTENCES = st.lists(st.text(alphabet="ab ", max_size=12), max_size=20)


@given(SENTENCES)
def test_a_fused_count_gives_what_the_general_path_gives(sentences):
    fused, was_fused = first_bolt_output(Count(), sentences)
    general, general_fused = first_bolt_output(NotFused(), sentences)
    assert was_fused and not general_fused
    assert fused == general
    assert sum(n for (_, (word, n)) in fused) == sum(len(s.split()) for s in sentences)


@given(SENTENCES)
def test_a_fused_sum_gives_what_the_general_path_gives(sentences):
    fused, was_fused = first_bolt_output(Sum(), sentences)
    general, general_fused = first_bolt_output(SumNotFused(), sentences)
    assert was_fused and not general_fused
    assert fused == general
    assert sum(n for (_, (word, n)) in fused) == sum(len(w) for s in sentences for w in s.split())


def test_a_function_with_two_consumers_is_not_fused():
    topology = TridentTopology()
    words = topology.new_stream("s", FixedBatchSpout(["sentence"], 10)).each(
        ["sentence"], SplitWithLength(), ["word", "len"]
    )
    words.group_by(["word"]).persistent_aggregate(MemoryMapState.Factory(), Count(), ["count"])
    words.group_by(["len"]).persistent_aggregate(MemoryMapState.Factory(), ["len"], Sum(), ["sum"])
    bolt = topology.build().topology.components["b-0"].obj
    assert not any(isinstance(p, FusedCount) for p in bolt._plan.processors)
