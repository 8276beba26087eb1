"""What lies on the path from one batch's commit to the next: the driver sends a commit before it begins a batch,
a worker's report to the driver waits for no batch it is sending a peer, a committer's SQLite state opens no new
connection per batch, and integer counts are added in SQLite with a stored value that is not one falling back to
the general path, exactly."""

import os
import sqlite3
import threading
from types import SimpleNamespace

import pytest

from squall.transactional import SqliteCoordinatorStore, SqliteKeyedState, TransactionalValue
from squall.transactional import state as state_module
from squall.transactional.batches import BatchTasks
from squall.transactional.coordinator import TransactionCoordinator
from squall.transactional.runtime import TransactionalRun


def test_a_step_sends_the_commit_before_it_begins_a_batch(tmp_path):
    store = SqliteCoordinatorStore(tmp_path / "coord.sqlite", "topo")
    coordinator = TransactionCoordinator(store, max_pending=2)
    a1, a2 = (instruction.attempt for instruction in coordinator.poll())
    coordinator.processed(a1)
    coordinator.poll()  # commit 1
    coordinator.processed(a2)
    coordinator.committed(a1)  # the next poll begins txid 3 and commits txid 2
    run = TransactionalRun.__new__(TransactionalRun)
    run.failure, run._tries, run._moved, run._quiet_until = None, {}, 0, 0.0
    run._emit_interval, run._last_begin, run._requests = 0.0, 0.0, []
    run.coordinator = coordinator
    run.scheduler = SimpleNamespace(ready=True, hosts=[0], serve=lambda timeout: None)
    run.ttopo = SimpleNamespace(spout=SimpleNamespace(is_ready=lambda: True))
    order = []
    run._commit = lambda attempt: order.append(("commit", attempt.txid))
    run._begin = lambda attempt: order.append(("begin", attempt.txid))
    run.step()
    assert order == [("commit", 2), ("begin", 3)]
    store.close()


def test_a_report_to_the_driver_waits_for_no_batch_being_sent_to_a_peer():
    host = BatchTasks.__new__(BatchTasks)
    host._send_lock, host._report_lock, host._closed = threading.Lock(), threading.Lock(), False
    host.index, host.placement = 0, {7: 1}
    in_send, release = threading.Event(), threading.Event()
    reports = []

    def slow_peer(worker, batch):  # a peer that is slow to read: the send blocks
        in_send.set()
        release.wait(30)

    host._to_peer, host._to_driver = slow_peer, reports.append
    sender = threading.Thread(target=host.send, args=(SimpleNamespace(target=7, wave=1),))
    sender.start()
    assert in_send.wait(10)
    reporter = threading.Thread(target=host.report, args=("committed",))
    reporter.start()
    reporter.join(10)
    finished = not reporter.is_alive()
    release.set()
    sender.join(10)
    reporter.join(10)
    assert finished and reports == ["committed"]


def test_a_closed_state_leaves_its_connection_to_the_next_state_of_the_same_file(tmp_path):
    path = tmp_path / "counts.sqlite"
    first = SqliteKeyedState(path, "counts")
    first.update(1, {"a": 1})
    connection = first._db
    first.close()
    second = SqliteKeyedState(path, "counts")
    assert second._db is connection
    second.update(2, {"a": 2})
    other_table = SqliteKeyedState(path, "others")  # the kept one is taken: a new connection, a new table
    assert other_table._db is not connection and other_table.values() == {}
    other_table.close()
    second.close()
    assert SqliteKeyedState(path, "counts").values() == {"a": 3}


def test_a_kept_connection_is_not_used_for_a_file_that_replaced_its_own(tmp_path):
    path = tmp_path / "counts.sqlite"
    first = SqliteKeyedState(path, "counts")
    first.update(1, {"a": 1})
    connection = first._db
    first.close()
    for name in os.listdir(tmp_path):
        os.remove(tmp_path / name)
    fresh = SqliteKeyedState(path, "counts")
    assert fresh._db is not connection and fresh.values() == {}
    fresh.update(1, {"b": 1})
    fresh.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT key, value FROM counts").fetchall() == [('"b"', "1")]


def test_a_kept_connection_is_not_used_by_a_forked_process(tmp_path, monkeypatch):
    path = tmp_path / "counts.sqlite"
    first = SqliteKeyedState(path, "counts")
    connection = first._db
    first.close()
    monkeypatch.setattr(state_module.os, "getpid", lambda: -1)  # as a child forked after the close sees it
    again = SqliteKeyedState(path, "counts")
    assert again._db is not connection
    assert connection.execute("SELECT 1").fetchone() == (1,)  # set aside, not closed under the parent
    again.close()


def test_a_stored_value_that_is_not_an_integer_leaves_the_batch_to_the_general_path_exactly(tmp_path):
    state = SqliteKeyedState(tmp_path / "counts.sqlite", "counts")
    state.update(1, {"a": 1.5, "b": 2, "c": 3})  # a float: the general path
    assert state.update(2, {"a": 1, "b": 3, "d": 4}) == {
        "a": TransactionalValue(2.5, 2),
        "b": TransactionalValue(5, 2),
        "d": TransactionalValue(4, 2),
    }
    assert state.update(2, {"a": 1, "b": 3, "d": 4})["b"] == TransactionalValue(5, 2)  # a replay: skipped
    assert state.items() == {
        "a": TransactionalValue(2.5, 2),
        "b": TransactionalValue(5, 2),
        "c": TransactionalValue(3, 1),
        "d": TransactionalValue(4, 2),
    }
    state.close()


def test_keys_of_any_json_text_are_added_in_sqlite(tmp_path):
    state = SqliteKeyedState(tmp_path / "counts.sqlite", "counts")
    keys = ['qu"ote', "back\\slash", "é", "\x00nul", "\U0001f600", 7, ("t", 1), "", "\\u00e9"]
    state.update(1, dict.fromkeys(keys, 1))
    assert state.update(2, dict.fromkeys(keys, 2)) == {k: TransactionalValue(3, 2) for k in keys}
    assert state.values() == dict.fromkeys(keys, 3)
    state.close()


def test_a_closed_state_cannot_be_used(tmp_path):
    state = SqliteKeyedState(tmp_path / "counts.sqlite", "counts")
    state.close()
    state.close()
    with pytest.raises(sqlite3.ProgrammingError):
        state.items()
