"""The transaction coordinator as a pure state machine, on its real SQLite store."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tx_components import commits, counter, emits

from squall.transactional import SqliteCoordinatorStore, TransactionCoordinator
from squall.transactional.coordinator import Phase


@pytest.fixture
def store(tmp_path):
    s = SqliteCoordinatorStore(tmp_path / "coord.sqlite", "topo")
    yield s
    s.close()


def test_emits_up_to_max_pending_and_txids_start_at_1(store):
    c = TransactionCoordinator(store, max_pending=3, new_attempt_id=counter())
    assert emits(c.poll()) == [(1, 100), (2, 101), (3, 102)]
    assert c.poll() == []
    assert TransactionCoordinator(store, 1).max_pending == 1


def test_commits_strictly_in_txid_order(store):
    c = TransactionCoordinator(store, max_pending=3, new_attempt_id=counter())
    a1, a2, a3 = (e.attempt for e in c.poll())
    assert c.processed(a3) and c.processed(a2)
    assert commits(c.poll()) == []  # 1 is not processed yet
    c.processed(a1)
    assert commits(c.poll()) == [a1]
    assert commits(c.poll()) == []  # one commit at a time
    assert c.committed(a1)
    out = c.poll()
    assert commits(out) == [a2] and emits(out) == [(4, 103)]
    assert c.committed(a2)
    assert commits(c.poll()) == [a3]
    assert c.last_committed == 2 and store.get("last_committed") == 2


def test_a_processing_failure_replays_that_txid_and_every_later_one(store):
    c = TransactionCoordinator(store, max_pending=3, new_attempt_id=counter())
    a1, a2, a3 = (e.attempt for e in c.poll())
    c.processed(a1)
    c.processed(a3)
    assert c.failed(a2)
    out = c.poll()
    assert emits(out) == [(2, 103), (3, 104)] and commits(out) == [a1]  # 1 is untouched and may commit
    assert c.phase_of(1) is Phase.COMMITTING and c.phase_of(3) is Phase.PROCESSING


def test_a_commit_failure_replays_that_txid_and_every_later_one(store):
    c = TransactionCoordinator(store, max_pending=2, new_attempt_id=counter())
    a1, a2 = (e.attempt for e in c.poll())
    c.processed(a1)
    c.processed(a2)
    assert commits(c.poll()) == [a1]
    assert c.failed(a1)
    assert emits(c.poll()) == [(1, 102), (2, 103)]
    assert c.last_committed == 0


def test_stale_attempts_are_ignored(store):
    c = TransactionCoordinator(store, max_pending=2, new_attempt_id=counter())
    a1, a2 = (e.attempt for e in c.poll())
    c.failed(a1)
    b1, _b2 = (e.attempt for e in c.poll())
    assert not c.processed(a1) and not c.failed(a2) and not c.committed(a1)
    assert not c.record_metadata(a1, {"stale": True})
    c.processed(b1)
    assert commits(c.poll()) == [b1]
    assert not c.committed(a1) and c.committed(b1)
    assert not c.failed(b1)  # already committed


def test_metadata_is_kept_for_replays_and_cleaned_up_once_committed(store):
    c = TransactionCoordinator(store, max_pending=2, new_attempt_id=counter())
    a1, a2 = (e.attempt for e in c.poll())
    c.record_metadata(a1, {"p": {"0": {"index": 0, "amount": 3}}})
    c.record_metadata(a2, {"p": {"0": {"index": 3, "amount": 3}}})
    c.failed(a1)
    b1, b2 = (e.attempt for e in c.poll())
    assert c.metadata(1) == {"p": {"0": {"index": 0, "amount": 3}}}  # the replay reuses it
    c.processed(b1)
    c.poll()
    c.committed(b1)
    c.processed(b2)
    c.poll()
    c.committed(b2)
    c.poll()
    assert store.keys("meta/") == ["meta/2"]  # 1 is cleaned up; 2 is where batch 3 starts from


def test_restart_resumes_in_flight_txids_without_committing_twice(tmp_path):
    path = tmp_path / "coord.sqlite"
    first = TransactionCoordinator(SqliteCoordinatorStore(path, "t"), max_pending=3, new_attempt_id=counter())
    a1, a2, _a3 = (e.attempt for e in first.poll())
    first.record_metadata(a2, {"m": 2})
    first.processed(a1)
    first.poll()
    first.committed(a1)
    first.processed(a2)
    first.poll()  # 2 is committing when the process dies

    again = TransactionCoordinator(SqliteCoordinatorStore(path, "t"), max_pending=3, new_attempt_id=counter())
    assert again.last_committed == 1
    assert [t for t, _ in emits(again.poll())] == [2, 3, 4]
    assert again.metadata(2) == {"m": 2}
    other = TransactionCoordinator(SqliteCoordinatorStore(path, "another-topology"), 1)
    assert other.last_committed == 0


events = st.lists(st.tuples(st.sampled_from(["processed", "failed", "committed"]), st.integers(1, 12), st.booleans()))


@settings(max_examples=200, deadline=None)
@given(max_pending=st.integers(1, 4), script=events)
def test_commits_are_gapless_once_each_and_in_order(tmp_path_factory, max_pending, script):
    store = SqliteCoordinatorStore(tmp_path_factory.mktemp("c") / "c.sqlite", "t")
    c = TransactionCoordinator(store, max_pending, new_attempt_id=counter())
    seen = {}  # txid -> every attempt ever emitted for it
    committed = []
    for kind, txid, stale in script:
        for i in c.poll():
            seen.setdefault(i.attempt.txid, []).append(i.attempt)
        assert len(c.active) <= max_pending
        if txid not in seen:
            continue
        attempt = seen[txid][0] if stale else seen[txid][-1]
        if getattr(c, kind)(attempt) and kind == "committed":
            committed.append(txid)
    assert committed == list(range(1, len(committed) + 1))
    assert c.last_committed == len(committed)


def test_commit_phase_holds_committers_and_everything_downstream_of_them():
    """The seed's bolts A-D: only A finishes in the processing phase."""
    from squall.transactional import BatchBolt, MemoryTransactionalSpout, TransactionalTopologyBuilder

    class Plain(BatchBolt):
        outputs = ("id", "v")

    b = TransactionalTopologyBuilder("abcd", "spout", MemoryTransactionalSpout({0: [[1]]}, ["v"], 1))
    b.set_bolt("A", Plain()).shuffle_grouping("spout")
    b.set_committer_bolt("B", Plain()).shuffle_grouping("A")
    b.set_bolt("C", Plain()).shuffle_grouping("A").shuffle_grouping("B")
    b.set_committer_bolt("D", Plain()).shuffle_grouping("C")
    t = b.build()
    assert t.committers == frozenset({"B", "D"})
    assert t.processing_phase_bolts == ["A"]
    assert t.commit_phase_bolts == ["B", "C", "D"]
    assert t.topology.stream_fields("spout", "default") == ("tx", "v")
