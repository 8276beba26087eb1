"""A plain bolt's snapshot: its attributes pickled, large containers of plain values without pickle's memo (a
fifth of the time), and every reference the bolt shares between attributes kept shared on restore."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from squall import Bolt, TopologyBuilder
from squall.spark.bolt_task import BoltTask, _plain
from squall.spark.protocol import RunSettings
from squall.spark.shipping import ShippedTopology, pack
from squall.testing import FeederSpout


class Holder(Bolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.counts = {f"w{i}": i for i in range(5000)}  # large, plain, held once: pickled on its own
        self.tally = Counter({f"t{i}": 1 for i in range(1500)})  # a Counter too
        self.seen = [f"s{i}" for i in range(3000)]
        self.index = {"seen": self.seen}  # the same list, held twice
        self.pairs = {i: (i, str(i)) for i in range(2000)}  # values are tuples: pickled with the rest
        self.me = self  # the bolt itself, re-bound on restore

    def execute(self, tup):
        pass


def task() -> BoltTask:
    builder = TopologyBuilder()
    builder.set_spout("s", FeederSpout(["x"]))
    builder.set_bolt("holder", Holder()).shuffle_grouping("s")
    topology = builder.build()
    shipped = ShippedTopology(
        topology.with_objects(dict.fromkeys(topology.components)),
        {},
        {"holder": pack(topology.components["holder"].obj)},
    )
    return BoltTask(
        shipped, "holder", topology.task_ids("holder")[0], RunSettings("snap", 1, acking=False, capture=False)
    )


def test_a_restored_bolt_has_its_values_and_its_shared_references():
    first = task()
    first.bolt.counts["w1"] = -1
    first.bolt.seen.append("new")
    snapshot = first.snapshot(7)

    second = task()
    second.restore(snapshot)
    bolt = second.bolt
    assert bolt.counts == {**{f"w{i}": i for i in range(5000)}, "w1": -1}
    assert bolt.seen == [f"s{i}" for i in range(3000)] + ["new"]
    assert bolt.index["seen"] is bolt.seen  # still one list
    assert bolt.pairs[5] == (5, "5")
    assert type(bolt.tally) is Counter and bolt.tally["t7"] == 1
    assert bolt.me is bolt
    assert second.version == 7


class Word(str):
    """A str subclass: not atomic, so a container holding one is pickled with the memo."""


_ATOMS = st.one_of(
    st.text(max_size=3), st.integers(), st.floats(allow_nan=False), st.binary(max_size=2), st.booleans(), st.none()
)
_OTHERS = st.one_of(st.tuples(st.integers()), st.lists(st.integers(), max_size=1), st.builds(Word, st.text(max_size=2)))
_VALUES = st.one_of(_ATOMS, _OTHERS)
_KEYS = st.one_of(st.text(max_size=3), st.integers(), st.tuples(st.integers()), st.builds(Word, st.text(max_size=2)))


@given(
    st.one_of(
        st.dictionaries(_KEYS, _VALUES, max_size=6),
        st.dictionaries(_KEYS, st.integers(), max_size=6).map(Counter),
        st.lists(_VALUES, max_size=6),
        st.sets(_KEYS, max_size=6),
    )
)
def test_a_container_is_plain_when_every_key_and_value_is_exactly_an_atomic_type(value):
    atomic = {str, int, float, bytes, bool, type(None)}
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
    assert _plain(value) is all(type(item) in atomic for item in items)
