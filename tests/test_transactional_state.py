import contextlib
import math
import operator
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.transactional import OpaqueValue, SqliteKeyedState, TransactionalValue


def test_transactional_value_skips_a_replayed_txid():
    v = TransactionalValue.apply(None, 1, 5)
    assert v == TransactionalValue(5, 1)
    v = v.updated(2, 3)
    assert v == TransactionalValue(8, 2)
    assert v.updated(2, 3) == v  # txid 2 is already in the value


def test_opaque_value_applies_a_changed_replay_to_the_previous_value():
    v = OpaqueValue.apply(None, 1, 5)
    assert v == OpaqueValue(5, 0, 1)
    v = v.updated(2, 10)
    assert v == OpaqueValue(15, 5, 2)
    v = v.updated(2, 4)  # txid 2 replayed with a different batch
    assert v == OpaqueValue(9, 5, 2)
    assert v.updated(3, 1) == OpaqueValue(10, 9, 3)


@pytest.mark.parametrize("json_functions", [True, False], ids=["json_each", "chunked"])
def test_keyed_state_updates_many_keys_atomically_and_survives_reopening(tmp_path, json_functions):
    path = tmp_path / "state.sqlite"
    s = SqliteKeyedState(path, "counts")
    s._json_each = json_functions  # a SQLite built without its JSON functions reads keys 500 at a time
    many = {f"k{i}": i for i in range(1_234)}
    assert s.update(7, many) == {k: TransactionalValue(v, 7) for k, v in many.items()}
    assert s.get_many(many) == {k: TransactionalValue(v, 7) for k, v in many.items()}
    s._db.execute("DELETE FROM counts")
    s.update(1, {"cat": 2, "dog": 1, ("tuple", 1): 4})
    s.update(1, {"cat": 2, "dog": 1})  # a replay of txid 1: skipped
    s.update(2, {"cat": 1, "emu": 1})
    s.close()
    again = SqliteKeyedState(path, "counts")
    assert again.values() == {"cat": 3, "dog": 1, "emu": 1, ("tuple", 1): 4}
    items = again.items()
    assert items["cat"] == TransactionalValue(3, 2) and items["dog"] == TransactionalValue(1, 1)
    assert again.get("emu") == TransactionalValue(1, 2)


def test_keyed_state_rolls_back_a_failed_batch(tmp_path):
    s = SqliteKeyedState(tmp_path / "s.sqlite", "counts")
    s.update(1, {"a": 1})

    def broken(old, delta):
        if delta == "boom":
            raise ValueError("boom")
        return old + delta

    with contextlib.suppress(ValueError):
        s.update(2, {"a": 5, "b": "boom"}, combine=broken)
    assert s.values() == {"a": 1}


def test_opaque_keyed_state(tmp_path):
    s = SqliteKeyedState(tmp_path / "s.sqlite", "counts", opaque=True)
    s.update(1, {"a": 3})
    s.update(2, {"a": 4})
    s.update(2, {"a": 1})  # replayed, changed
    assert s.items()["a"] == OpaqueValue(4, 3, 2)


def test_opaque_replay_reverts_keys_its_earlier_attempt_wrote_and_it_does_not(tmp_path):
    s = SqliteKeyedState(tmp_path / "s.sqlite", "counts", opaque=True)
    s.update(1, {"a": 1, "b": 1}, writer="w0")
    s.update(2, {"a": 2, "b": 5}, writer="w0")  # first try of txid 2
    s.update(2, {"a": 2}, writer="w0")  # the replay lacks b's tuples: they come later
    assert s.values() == {"a": 3, "b": 1}
    s.update(3, {"b": 5}, writer="w0")
    assert s.values() == {"a": 3, "b": 6}
    s.update(3, {"b": 5}, writer="other")  # another writer's keys are not its to revert
    assert s.values() == {"a": 3, "b": 6}


@pytest.mark.parametrize("json_functions", [True, False], ids=["json_each", "chunked"])
def test_keyed_state_keeps_every_json_value_exactly(tmp_path, json_functions):
    """Values of every JSON kind, a big integer and a float's exact repr come back as written, and a value
    SQLite's JSON reader refuses (Python's NaN) is still updated."""
    s = SqliteKeyedState(tmp_path / "s.sqlite", "values")
    s._json_each = json_functions
    initial = {"big": 2**80, "float": 0.1, "list": [1, "two"], "nan": float("nan"), ("t", 1): "text", "none": None}
    s.update(1, initial, combine=lambda old, new: new)
    s.update(2, {"big": 1, "float": 0.2}, combine=operator.add)
    s.update(3, {"nan": 1.0, "list": [3]}, combine=operator.add)
    values = s.values()
    assert values["big"] == 2**80 + 1 and values["float"] == 0.1 + 0.2 and values["list"] == [1, "two", 3]
    assert values[("t", 1)] == "text" and values["none"] is None and math.isnan(values["nan"])
    again = s.update(3, {"big": 5, "float": 1.0, "nan": 1.0})  # txid 3 is in "nan" already
    assert again["big"] == TransactionalValue(2**80 + 6, 3) and again["float"] == TransactionalValue(0.1 + 0.2 + 1.0, 3)
    assert math.isnan(again["nan"].value) and again["nan"].txid == 3 and math.isnan(s.get("nan").value)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 6),  # txid: repeats are replays
            st.dictionaries(
                st.sampled_from(["a", "b", "c", ("t", 1), 7]),
                st.one_of(st.integers(-5, 5), st.integers(2**51, 2**70), st.floats(-3, 3), st.booleans()),
                max_size=4,
            ),
        ),
        max_size=8,
    )
)
def test_counts_added_in_sqlite_match_the_transactional_rule(batches):
    """Integer counts are added in SQLite itself; anything else (a float, a count too large to add exactly there, a
    stored value that is not such an integer) takes the general path. Either way the state is what
    ``TransactionalValue.updated`` says, batch after batch, replays included."""
    with tempfile.TemporaryDirectory() as where:
        state = SqliteKeyedState(f"{where}/counts.sqlite", "counts")
        expected: dict = {}
        try:
            for txid, deltas in batches:
                returned = state.update(txid, deltas)
                for key, delta in deltas.items():
                    before = expected.get(key, TransactionalValue(0, 0))
                    expected[key] = before.updated(txid, delta)
                    assert returned[key] == expected[key]
            assert state.items() == expected
        finally:
            state.close()


def test_counts_added_in_sqlite_skip_a_replayed_txid_and_read_back_exactly(tmp_path):
    state = SqliteKeyedState(tmp_path / "counts.sqlite", "counts")
    state.update(1, {"a": 2, "b": 3})
    assert state.update(1, {"a": 100, "c": 1}) == {"a": TransactionalValue(2, 1), "c": TransactionalValue(1, 1)}
    assert state.update(2, {"a": -2, "b": 2**51}) == {
        "a": TransactionalValue(0, 2),
        "b": TransactionalValue(3 + 2**51, 2),
    }
    assert state.items() == {
        "a": TransactionalValue(0, 2),
        "b": TransactionalValue(3 + 2**51, 2),
        "c": TransactionalValue(1, 1),
    }
    state.close()


def test_counts_too_large_for_sqlites_integers_are_added_exactly(tmp_path):
    state = SqliteKeyedState(tmp_path / "counts.sqlite", "counts")
    state.update(1, {"a": 2**62, "b": 2**70})
    state.update(2, {"a": 2**62, "b": 1})
    assert state.items() == {"a": TransactionalValue(2**63, 2), "b": TransactionalValue(2**70 + 1, 2)}
    state.close()
