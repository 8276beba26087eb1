"""PostgresKeyedState against a real PostgreSQL: the SqliteKeyedState contract, concurrency, failures."""

import contextlib
import threading
import uuid

import psycopg
import pytest
from servers import PostgresServer, free_port

from squall.connectors.postgres import PostgresKeyedState
from squall.connectors.redis_streams import BrokerUnavailable
from squall.transactional import OpaqueValue, TransactionalValue


@contextlib.contextmanager
def _postgres():
    """A server of this test's own, to stop and start."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def table() -> str:
    """A table of this test's own: the server is shared by the whole session."""
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture
def state(postgres_server, table):
    s = PostgresKeyedState(postgres_server.url, table)
    yield s
    s.close()


@pytest.fixture
def opaque_state(postgres_server, table):
    s = PostgresKeyedState(postgres_server.url, table, opaque=True)
    yield s
    s.close()


def broken(old, delta):
    if delta == "boom":
        raise ValueError("boom")
    return old + delta


def test_transactional_state_skips_a_replayed_txid_and_survives_reopening(postgres_server, table, state):
    assert state.update(1, {"cat": 2, "dog": 1}) == {"cat": TransactionalValue(2, 1), "dog": TransactionalValue(1, 1)}
    assert state.update(1, {"cat": 2, "dog": 1}) == {"cat": TransactionalValue(2, 1), "dog": TransactionalValue(1, 1)}
    assert state.update(2, {"cat": 1, "emu": 1}) == {"cat": TransactionalValue(3, 2), "emu": TransactionalValue(1, 2)}
    state.close()
    again = PostgresKeyedState(postgres_server.url, table)
    assert again.values() == {"cat": 3, "dog": 1, "emu": 1}
    assert again.items() == {
        "cat": TransactionalValue(3, 2),
        "dog": TransactionalValue(1, 1),
        "emu": TransactionalValue(1, 2),
    }
    assert again.get("emu") == TransactionalValue(1, 2)
    assert again.get("missing") is None
    assert again.get_many(["cat", "missing", "dog"]) == {
        "cat": TransactionalValue(3, 2),
        "dog": TransactionalValue(1, 1),
    }
    again.close()


def test_initial_and_combine_and_json_values(state):
    state.update(1, {"words": ["a"]}, initial=[])
    state.update(2, {"words": ["b", "c"]}, initial=[])
    state.update(3, {"best": 4}, combine=max, initial=0)
    state.update(4, {"best": 2}, combine=max, initial=0)
    assert state.values() == {"words": ["a", "b", "c"], "best": 4}


def test_opaque_replay_applies_to_prev(opaque_state):
    assert opaque_state.update(1, {"a": 3}) == {"a": OpaqueValue(3, 0, 1)}
    assert opaque_state.update(2, {"a": 4}) == {"a": OpaqueValue(7, 3, 2)}
    assert opaque_state.update(2, {"a": 1}) == {"a": OpaqueValue(4, 3, 2)}  # replayed, changed
    assert opaque_state.items() == {"a": OpaqueValue(4, 3, 2)}
    assert opaque_state.update(3, {"a": 10}) == {"a": OpaqueValue(14, 4, 3)}
    assert opaque_state.get("a") == OpaqueValue(14, 4, 3)


def test_opaque_replay_reverts_keys_its_earlier_attempt_wrote_and_it_does_not(opaque_state):
    s = opaque_state
    s.update(1, {"a": 1, "b": 1}, writer="w0")
    s.update(2, {"a": 2, "b": 5}, writer="w0")  # first try of txid 2
    assert s.values() == {"a": 3, "b": 6}
    s.update(2, {"a": 2}, writer="w0")  # the replay lacks b's tuples: they come later
    assert s.items() == {"a": OpaqueValue(3, 1, 2), "b": OpaqueValue(1, 1, 2)}
    s.update(3, {"b": 5}, writer="w0")
    assert s.values() == {"a": 3, "b": 6}
    s.update(3, {"b": 5}, writer="other")  # another writer's keys are not its to revert
    assert s.values() == {"a": 3, "b": 6}
    s.update(4, {"c": 1}, writer="w1")
    s.update(4, {}, writer="w1")  # an empty replay reverts everything its first try wrote
    assert s.items() == {"a": OpaqueValue(3, 1, 2), "b": OpaqueValue(6, 1, 3), "c": OpaqueValue(0, 0, 4)}


def test_tuple_keys_round_trip(state):
    keys = [("tuple", 1), ("nested", ("x", 2)), ("empty",), 7, "plain"]
    state.update(1, dict.fromkeys(keys, 1))
    state.update(2, {("tuple", 1): 4})
    assert state.values() == {("tuple", 1): 5, ("nested", ("x", 2)): 1, ("empty",): 1, 7: 1, "plain": 1}
    assert state.get(("tuple", 1)) == TransactionalValue(5, 2)
    assert state.get(("nested", ("x", 2))) == TransactionalValue(1, 1)
    assert state.get_many([("tuple", 1), ("empty",)]) == {
        ("tuple", 1): TransactionalValue(5, 2),
        ("empty",): TransactionalValue(1, 1),
    }


def test_a_failed_batch_leaves_no_partial_writes(state, opaque_state):
    state.update(1, {"a": 1, "b": 2})
    before = state.items()
    # "a" and "new" are combined before "b" raises: none of it may reach the table
    with pytest.raises(ValueError, match="boom"):
        state.update(2, {"a": 5, "new": 1, "b": "boom"}, combine=broken)
    assert state.items() == before == {"a": TransactionalValue(1, 1), "b": TransactionalValue(2, 1)}
    assert state.update(2, {"a": 5}) == {"a": TransactionalValue(6, 2)}  # the connection is still usable
    assert state.values() == {"a": 6, "b": 2}


def test_a_failed_opaque_batch_does_not_revert_either(postgres_server, table):
    s = PostgresKeyedState(postgres_server.url, table, opaque=True)
    s.update(1, {"a": 1, "b": 1}, writer="w0")
    s.update(2, {"a": 2, "b": 5}, writer="w0")
    before = s.items()
    with pytest.raises(ValueError, match="boom"):
        s.update(2, {"a": 2, "c": "boom"}, combine=broken, writer="w0")  # would revert b, if it committed
    assert s.items() == before == {"a": OpaqueValue(3, 1, 2), "b": OpaqueValue(6, 1, 2)}
    s.close()


def test_concurrent_updates_of_overlapping_keys_add_up_exactly(postgres_server, table):
    threads, batches = 4, 30
    PostgresKeyedState(postgres_server.url, table).close()
    start = threading.Barrier(threads)
    errors = []

    def run(index: int) -> None:
        s = PostgresKeyedState(postgres_server.url, table)
        try:
            start.wait()
            for j in range(batches):
                txid = index * 1000 + j + 1  # distinct txids: nothing is a replay
                # shared keys, a key new to the table that every thread creates at about the same time,
                # a key of this thread's own; in a different order in each thread
                deltas = {"shared": 1, f"new{j}": index + 1, "also": 2, f"own{index}": 1}
                if index % 2:
                    deltas = dict(reversed(deltas.items()))
                s.update(txid, deltas)
        except BaseException as exc:
            errors.append(exc)
        finally:
            s.close()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    s = PostgresKeyedState(postgres_server.url, table)
    expected = {"shared": threads * batches, "also": 2 * threads * batches}
    expected |= {f"new{j}": sum(range(1, threads + 1)) for j in range(batches)}
    expected |= {f"own{i}": batches for i in range(threads)}
    assert s.values() == expected
    s.close()


def test_creating_the_table_concurrently_does_not_fail(postgres_server, table):
    threads = 8
    start = threading.Barrier(threads)
    errors, states = [], []

    def run() -> None:
        try:
            start.wait()
            states.append(PostgresKeyedState(postgres_server.url, table))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    for i, s in enumerate(states):
        s.update(i + 1, {"k": 1})
    assert states[0].values() == {"k": threads}
    for s in states:
        s.close()


def test_the_table_has_the_documented_columns(postgres_server, state, table):
    state.update(5, {("k", 1): 2}, writer="w")
    with psycopg.connect(postgres_server.url) as conn:
        rows = conn.execute(f"SELECT key, value, prev, txid, writer FROM {table}").fetchall()
        columns = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s"
            " ORDER BY ordinal_position",
            [table],
        ).fetchall()
    assert rows == [('["k", 1]', "2", "null", 5, "w")]
    assert columns == [("key", "text"), ("value", "text"), ("prev", "text"), ("txid", "bigint"), ("writer", "text")]


@pytest.mark.parametrize("bad", ["counts; DROP TABLE x", "1abc", "a-b", "", "x" * 64])
def test_a_bad_table_name_is_refused(postgres_server, bad):
    with pytest.raises(ValueError, match="table name") as info:
        PostgresKeyedState(postgres_server.url, bad)
    assert repr(bad) in str(info.value)


def test_an_unreachable_server_at_start_raises_broker_unavailable():
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(BrokerUnavailable) as info:
        PostgresKeyedState(url, "counts")
    assert str(info.value).startswith(f"cannot reach PostgreSQL at {url}: ")


def test_the_password_is_not_in_the_error():
    port = free_port()
    with pytest.raises(BrokerUnavailable) as info:
        PostgresKeyedState(f"postgresql://postgres:s3cret@127.0.0.1:{port}/postgres", "counts")
    assert str(info.value).startswith(
        f"cannot reach PostgreSQL at postgresql://postgres:***@127.0.0.1:{port}/postgres: "
    )
    assert "s3cret" not in str(info.value)


def test_reconnects_after_the_server_restarts(table):
    with _postgres() as server:
        s = PostgresKeyedState(server.url, table)
        assert s.update(1, {"a": 1, ("t", 1): 2}) == {"a": TransactionalValue(1, 1), ("t", 1): TransactionalValue(2, 1)}
        server.stop()
        server.start()
        # the old connection is dead: the update reconnects and runs the whole transaction again
        assert s.update(2, {"a": 10, "b": 3}) == {"a": TransactionalValue(11, 2), "b": TransactionalValue(3, 2)}
        assert s.update(2, {"a": 10, "b": 3}) == {"a": TransactionalValue(11, 2), "b": TransactionalValue(3, 2)}
        assert s.values() == {"a": 11, "b": 3, ("t", 1): 2}

        server.stop()  # down for longer than the retries last: the update fails, naming the URL
        with pytest.raises(BrokerUnavailable, match=f"cannot reach PostgreSQL at {server.url}: "):
            s.update(3, {"a": 100})
        server.start()
        assert s.values() == {"a": 11, "b": 3, ("t", 1): 2}  # nothing of the failed update
        assert s.update(3, {"a": 100}) == {"a": TransactionalValue(111, 3)}
        s.close()
        again = PostgresKeyedState(server.url, table)
        assert again.values() == {"a": 111, "b": 3, ("t", 1): 2}
        again.close()
