"""Trident's map states, as Storm's StateTest checks them, and the SQLite map state's kinds."""

import pytest

from squall.trident import CombinerValueUpdater, OpaqueMap, OpaqueValue, TransactionalMap
from squall.trident.builtin import Count, Sum
from squall.trident.sqlite_state import SqliteMapState
from squall.trident.state import MemoryBackingMap, forget_memory
from squall.trident.testing import MemoryMapState


def test_opaque_value_gives_prev_to_its_own_txid_and_refuses_an_older_one():
    value = OpaqueValue(8, "v1", "v0")
    assert value.get(None) == "v1"
    assert value.get(100) == "v1"
    assert value.get(9) == "v1"
    assert value.get(8) == "v0"
    with pytest.raises(ValueError, match="behind"):
        value.get(7)
    assert value.update(8, "v2") == OpaqueValue(8, "v2", "v0")
    assert value.update(9, "v2") == OpaqueValue(9, "v2", "v1")


def _memory(name):
    forget_memory(name)
    return MemoryBackingMap(name, 0)


def _get(state, key="a"):
    return state.multi_get([[key]])[0]


def _add(state, n, key="a"):
    return state.multi_update([[key]], [CombinerValueUpdater(Count(), n)])[0]


def test_opaque_map_replays_a_txid_from_the_value_before_it():
    state = OpaqueMap.build(_memory("opaque-map"))
    state.begin_commit(1)
    assert [_get(state), _add(state, 1), _get(state), _add(state, 2), _get(state)] == [None, 1, 1, 3, 3]
    state.commit(1)
    state.begin_commit(1)  # txid 1 again: a replay, which may be another batch
    assert [_get(state), _add(state, 2)] == [None, 2]
    state.commit(1)
    state.begin_commit(2)
    assert [_get(state), _add(state, 3), _add(state, 1)] == [2, 5, 6]
    state.commit(2)


def test_transactional_map_skips_a_key_its_txid_already_wrote():
    state = TransactionalMap.build(_memory("transactional-map"))
    state.begin_commit(1)
    assert [_get(state), _add(state, 1), _add(state, 2)] == [None, 1, 3]
    state.commit(1)
    state.begin_commit(1)  # the same batch again: its update is in already
    assert [_get(state), _add(state, 1), _add(state, 2)] == [3, 3, 3]
    state.commit(1)
    state.begin_commit(2)
    assert [_get(state), _add(state, 3), _add(state, 1)] == [3, 6, 7]
    state.commit(2)


def test_memory_map_state_removes_a_key_once_the_next_txid_begins():
    state = MemoryMapState.Factory().make_state({}, None, 0, 1)
    state.begin_commit(1)
    state.multi_put([["a"], ["b"]], [1, 2])
    state.commit(1)
    state.begin_commit(2)
    state.multi_remove([["a"]])
    assert state.multi_get([["a"], ["b"]]) == [None, 2]
    state.commit(2)
    state.begin_commit(2)  # replayed: what txid 2 removed is back
    assert state.multi_get([["a"], ["b"]]) == [1, 2]
    state.multi_remove([["a"]])
    state.commit(2)
    state.begin_commit(3)
    assert state.multi_get([["a"], ["b"]]) == [None, 2]
    assert list(state.get_tuples()) == [["b", 2]]


@pytest.mark.parametrize("kind", ["opaque", "transactional", "non_transactional"])
def test_sqlite_map_state_of_each_kind_keeps_values_across_states_on_one_file(tmp_path, kind):
    factory = getattr(SqliteMapState, kind)(str(tmp_path / "s.sqlite"))
    first = factory.make_state({}, None, 0, 1)
    first.begin_commit(1)
    first.multi_update([["a"], ["b", 1]], [CombinerValueUpdater(Sum(), 5), CombinerValueUpdater(Sum(), 2)])
    first.commit(1)
    first.close()
    again = factory.make_state({}, None, 0, 1)
    again.begin_commit(2)
    assert again.multi_update([["a"]], [CombinerValueUpdater(Sum(), 1)]) == [6]
    again.commit(2)
    assert SqliteMapState.read(str(tmp_path / "s.sqlite")) == {("a",): 6, ("b", 1): 2}
    again.close()


def test_a_request_reads_what_committed_txids_left():
    from squall.trident.state import READ_COMMITTED, UncommittedRead

    opaque = OpaqueMap.build(_memory("read-committed-opaque"))
    transactional = TransactionalMap.build(_memory("read-committed-transactional"))
    for state in (opaque, transactional):
        state.begin_commit(1)
        _add(state, 5)
        state.commit(1)
        state.begin_commit(2)  # txid 2's write lands, then its update raises (its worker is lost)
        _add(state, 10)
        assert _get(state) == 15  # txid 2's own commit reads its own writes
        state.abort_commit(2)
    token = READ_COMMITTED.set(1)  # a request that began with txid 1 the last committed
    try:
        assert _get(opaque) == 5  # the value before txid 2, which had not committed
        with pytest.raises(UncommittedRead, match="txid 2"):
            _get(transactional)
    finally:
        READ_COMMITTED.reset(token)
    assert (_get(opaque), _get(transactional)) == (15, 15)  # read outside a request: what is there
