"""KeyValueState against a plain dict: any puts and deletes over waves, restored from a base plus the waves'
deltas at any point, or from the deltas folded into one, give the same map."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from squall.model.state import dump_delta
from squall.state import KeyValueState, StateDelta, UnpicklableState

keys = st.one_of(st.integers(0, 8), st.sampled_from(["a", "b", ("t", 1)]))
ops = st.lists(st.tuples(st.sampled_from(["put", "delete"]), keys, st.integers()), max_size=12)
waves = st.lists(ops, max_size=8)


def run(state: KeyValueState, model: dict, wave) -> StateDelta:
    for op, key, value in wave:
        if op == "put":
            state.put(key, value)
            model[key] = value
        else:
            state.delete(key)
            model.pop(key, None)
    return state.take_changes()


@given(waves, st.integers(0, 8))
def test_base_plus_deltas_is_the_map_at_every_wave(waves, base_at):
    state, model = KeyValueState("count"), {}
    deltas, base = [], {}
    for i, wave in enumerate(waves):
        if i == base_at:  # a compacted base: the map as of this point; later deltas chain onto it
            base, deltas = dict(model), []
        deltas.append(run(state, model, wave))
        assert dict(state.items()) == model and len(state) == len(model)
        assert set(state) == set(model) and all(k in state for k in model)
        assert all(state.get(k) == v for k, v in model.items()) and state.get("missing", 7) == 7

        restored = dict(base)
        for delta in deltas:
            delta.apply(restored)
        assert restored == model

        folded = StateDelta()
        for delta in deltas:
            folded.absorb(delta)
        restored = dict(base)
        folded.apply(restored)
        assert restored == model


@given(ops)
def test_a_delta_holds_exactly_the_keys_the_wave_changed(wave):
    state = KeyValueState("count", {k: 0 for k in range(100)})  # keys held but not touched
    delta = state.take_changes()
    assert len(delta) == 0
    model = {k: 0 for k in range(100)}
    changed = set()
    for op, key, _ in wave:
        if op == "put" or key in model:
            changed.add(key)
        if op == "put":
            model[key] = 0
        else:
            model.pop(key, None)
    model = {k: 0 for k in range(100)}
    delta = run(state, model, wave)
    assert set(delta.puts) == {k for k in changed if k in model}
    assert set(delta.deletes) == {k for k in changed if k not in model}
    assert state.take_changes().puts == {}  # taken: the next wave starts over


def test_an_unpicklable_value_is_named_with_its_component_and_key():
    state = KeyValueState("joiner")
    state.put("fine", 1)
    state.put("lock", lambda: None)
    with pytest.raises(UnpicklableState, match=r"bolt 'joiner': state key 'lock'"):
        dump_delta("joiner", state.take_changes())
