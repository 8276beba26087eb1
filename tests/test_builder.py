import pytest

from squall import BasicBolt, Bolt, Fields, InvalidConfigError, InvalidTopologyError, Spout, TopologyBuilder
from squall.model import FieldsGrouping, GlobalGrouping, ShuffleGrouping


class Sentences(Spout):
    outputs = ("sentence",)

    def next_tuple(self):
        pass


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        pass


class Count(Bolt):
    outputs = ("word", "count")

    def execute(self, tup):
        pass


class TwoStreams(Bolt):
    outputs = {"default": ("a",), "errors": ("reason", "detail")}

    def execute(self, tup):
        pass


def word_count() -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("sentences", Sentences())
    b.set_bolt("split", Split(), 3).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    return b


def test_word_count_builds_with_storm_task_numbering():
    topo = word_count().build()
    assert list(topo.components) == ["sentences", "split", "count"]
    # task ids are assigned by sorted component id, from 1
    assert topo.task_ids("count") == (1, 2)
    assert topo.task_ids("sentences") == (3,)
    assert topo.task_ids("split") == (4, 5, 6)
    assert topo.component_of(5) == "split"
    assert topo.topological_order() == ["sentences", "split", "count"]
    (sub,) = topo.components["count"].inputs
    assert (sub.source, sub.stream, sub.grouping) == ("split", "default", FieldsGrouping(Fields("word")))
    assert [b for b, _ in topo.subscribers("sentences", "default")] == ["split"]
    assert topo.stream_fields("count", "default") == Fields("word", "count")


def test_named_streams_are_declared_and_subscribable():
    b = TopologyBuilder()
    b.set_spout("s", Sentences())
    b.set_bolt("t", TwoStreams()).shuffle_grouping("s")
    b.set_bolt("errs", Count()).global_grouping("t", stream="errors")
    b.set_bolt("main", Count()).fields_grouping("t", ["a"])
    topo = b.build()
    assert topo.components["t"].streams == {"default": Fields("a"), "errors": Fields("reason", "detail")}
    assert topo.components["errs"].inputs[0].grouping == GlobalGrouping()
    assert topo.components["main"].inputs[0].grouping == FieldsGrouping(Fields("a"))


def expect_error(builder, message, conf=None, error=InvalidTopologyError):
    with pytest.raises(error) as info:
        builder.build(conf)
    assert message in str(info.value)


def test_unknown_source_component():
    b = word_count()
    b.set_bolt("x", Count()).shuffle_grouping("splitt")
    expect_error(b, "bolt 'x' subscribes to unknown component 'splitt'")


def test_unknown_stream():
    b = word_count()
    b.set_bolt("x", Count()).shuffle_grouping("split", stream="words")
    expect_error(b, "bolt 'x' subscribes to stream 'words' of 'split', which 'split' does not declare")


def test_fields_grouping_on_undeclared_field():
    b = TopologyBuilder()
    b.set_spout("sentences", Sentences())
    b.set_bolt("split", Split()).shuffle_grouping("sentences")
    b.set_bolt("count", Count()).fields_grouping("split", Fields("wrd"))
    expect_error(
        b,
        "bolt 'count' groups by field 'wrd', which stream 'default' of 'split' does not declare; "
        "its fields are ['word']",
    )


def test_duplicate_ids():
    b = word_count()
    b.set_bolt("split", Count()).shuffle_grouping("sentences")
    expect_error(b, "duplicate component id 'split': declared as a bolt and as a bolt")
    b = TopologyBuilder()
    b.set_spout("a", Sentences())
    b.set_bolt("a", Count()).shuffle_grouping("a")
    expect_error(b, "duplicate component id 'a': declared as a spout and as a bolt")


@pytest.mark.parametrize("parallelism", [0, -2, 1.5, True, "3"])
def test_parallelism_must_be_positive_int(parallelism):
    b = TopologyBuilder()
    b.set_spout("s", Sentences())
    b.set_bolt("c", Count(), parallelism).shuffle_grouping("s")
    expect_error(b, f"bolt 'c': parallelism must be an int >= 1, got {parallelism!r}")


def test_spout_parallelism_checked_too():
    b = TopologyBuilder()
    b.set_spout("s", Sentences(), 0)
    expect_error(b, "spout 's': parallelism must be an int >= 1, got 0")


def test_cycle():
    b = TopologyBuilder()
    b.set_spout("s", Sentences())
    b.set_bolt("a", Count()).shuffle_grouping("s").shuffle_grouping("c")
    b.set_bolt("b", Count()).shuffle_grouping("a")
    b.set_bolt("c", Count()).shuffle_grouping("b")
    expect_error(b, "topology has a cycle: a -> b -> c -> a")


def test_self_loop_is_a_cycle():
    b = TopologyBuilder()
    b.set_spout("s", Sentences())
    b.set_bolt("a", Count()).shuffle_grouping("s").shuffle_grouping("a")
    expect_error(b, "topology has a cycle: a -> a")


def test_bolt_with_no_inputs():
    b = word_count()
    b.set_bolt("orphan", Count())
    expect_error(b, "bolt 'orphan' has no inputs")


def test_direct_and_other_groupings_cannot_share_a_stream():
    b = word_count()
    b.set_bolt("d", Count()).direct_grouping("split")
    expect_error(b, "stream 'default' of 'split' mixes direct_grouping with other groupings")


def test_component_without_execute():
    b = TopologyBuilder()
    b.set_spout("s", Sentences())
    b.set_bolt("c", object()).shuffle_grouping("s")
    expect_error(b, "bolt 'c': object has no execute() method")


def test_bad_outputs_declaration():
    class Dup(Bolt):
        outputs = ("a", "a")

        def execute(self, tup):
            pass

    b = TopologyBuilder()
    b.set_spout("s", Sentences())
    b.set_bolt("dup", Dup()).shuffle_grouping("s")
    expect_error(b, "component 'dup' declares bad outputs: duplicate field name(s) ['a']")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("topology.acker.executors", -1, "'topology.acker.executors' must be None or an int >= 0, got -1"),
        ("topology.acker.executors", "2", "'topology.acker.executors' must be None or an int >= 0, got '2'"),
        ("topology.message.timeout.secs", 0, "'topology.message.timeout.secs' must be a number > 0, got 0"),
        ("topology.max.spout.pending", 0, "'topology.max.spout.pending' must be None or an int >= 1, got 0"),
        ("topology.enable.message.timeouts", 1, "'topology.enable.message.timeouts' must be a bool"),
        ("topology.tick.tuple.freq.secs", -5, "'topology.tick.tuple.freq.secs' must be None or a number > 0"),
        ("squall.spark.master", "", "'squall.spark.master' must be a non-empty string"),
        ("squall.no.such.key", 1, "unknown squall config key 'squall.no.such.key'"),
    ],
)
def test_bad_config_values(key, value, message):
    expect_error(word_count(), message, conf={key: value}, error=InvalidConfigError)


def test_bad_component_config():
    b = TopologyBuilder()
    b.set_spout("s", Sentences())
    b.set_bolt("c", Count()).shuffle_grouping("s").add_configuration("topology.tick.tuple.freq.secs", "1")
    expect_error(b, "bolt 'c' config: 'topology.tick.tuple.freq.secs'", error=InvalidConfigError)


def test_user_keys_pass_through_and_good_config_builds():
    topo = word_count().build({"topology.message.timeout.secs": 2.5, "my.app.setting": object})
    assert topo.conf["topology.message.timeout.secs"] == 2.5


def test_shuffle_grouping_equality_and_default_stream():
    b = word_count()
    topo = b.build()
    assert topo.components["split"].inputs[0].grouping == ShuffleGrouping()
    assert topo.components["split"].inputs[0].stream == "default"
