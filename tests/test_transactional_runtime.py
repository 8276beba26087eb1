"""Transactional topologies on Spark local mode: exact counts through failures."""

from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from tx_components import (
    CountCommitter,
    FailFirstCommitAfterWriting,
    FailFirstTry,
    PartialWordCount,
    ReplayChangingOpaqueSpout,
    word_data,
)

from squall.runner import run_file
from squall.testing import TestCluster
from squall.transactional import MemoryTransactionalSpout, SqliteKeyedState, TransactionalTopologyBuilder

EXAMPLES = Path(__file__).parent.parent / "examples"
make_data = word_data


def direct_count(data) -> dict[str, int]:
    return dict(Counter(values[0] for rows in data.values() for values in rows))


def stored(db: Path, opaque: bool = False) -> dict[str, int]:
    state = SqliteKeyedState(db, "counts", opaque=opaque)
    try:
        return state.values()
    finally:
        state.close()


def run_to_the_end(spark, ttopo, conf):
    with TestCluster() as cluster:
        run = cluster.submit_topology("tx", conf, ttopo)
        cluster.wait_idle()
        return run


def example_output(name: str, tmp_path: Path, prefixes: tuple[str, ...]) -> list[str]:
    """The lines starting with ``prefixes`` that ``squall run examples/<name>`` prints."""
    console = Console(record=True, width=200)
    run_file(str(EXAMPLES / name), [f"example.dir={tmp_path}"], None, None, None, idle_secs=1.0, console=console)
    return [line for line in console.export_text().splitlines() if line.startswith(prefixes)]


def test_global_count_example_prints_its_counts(spark, tmp_path):
    lines = example_output("transactional_global_count.py", tmp_path, ("txid", "global count"))
    assert lines == ["txid 1: global count 9", "txid 2: global count 16", "txid 3: global count 19", "global count: 19"]


def test_transactional_words_example_prints_its_counts(spark, tmp_path):
    lines = example_output("transactional_words.py", tmp_path, ("txid", "word", "words"))
    assert lines == [
        "txid 1: counts apple=1, cat=5, chicken=1, dog=2; buckets 0=4",
        "txid 2: counts apple=2, banana=1, cat=8, dog=4; buckets 0=5",
        "txid 3: counts dog=7; buckets -",
        "word counts: apple=2, banana=1, cat=8, chicken=1, dog=7",
        "words per bucket: 0=5",
    ]


def test_random_failures_in_both_phases_and_a_dying_worker_leave_exact_counts(spark, tmp_path):
    data = make_data(3, 60)
    db = tmp_path / "counts.sqlite"
    b = TransactionalTopologyBuilder("faults", "spout", MemoryTransactionalSpout(data, ["word"], 7), 2)
    b.set_bolt("partial", PartialWordCount(fail_rate=0.15, crash_marker=str(tmp_path / "crashed")), 3).fields_grouping(
        "spout", ["word"]
    )
    b.set_bolt("commit", CountCommitter(str(db), fail_rate=0.15), 2).fields_grouping("partial", ["word"])
    conf = {"topology.max.spout.pending": 3, "squall.transactional.store": str(tmp_path / "coord.sqlite")}
    run = run_to_the_end(spark, b.build(), conf)
    assert stored(db) == direct_count(data)
    assert (tmp_path / "crashed").exists()  # a Python worker did die
    assert run.stats.failed_waves >= 3  # failures were injected, and survived
    txids = [a.txid for a, _, _ in run.commits]
    assert txids == list(range(1, len(txids) + 1))  # every txid committed once, in order


def test_a_failure_while_later_batches_are_in_flight_leaves_no_gap(spark, tmp_path):
    data = make_data(2, 40, seed=3)
    db = tmp_path / "counts.sqlite"
    b = TransactionalTopologyBuilder("in-flight", "spout", MemoryTransactionalSpout(data, ["word"], 4))
    b.set_bolt("partial", PartialWordCount(), 2).fields_grouping("spout", ["word"])
    b.set_bolt("flaky", FailFirstTry(2, str(tmp_path / "failed")), 2).shuffle_grouping("partial")
    b.set_bolt("commit", CountCommitter(str(db))).global_grouping("flaky")
    conf = {"topology.max.spout.pending": 4, "squall.transactional.store": str(tmp_path / "coord.sqlite")}
    run = run_to_the_end(spark, b.build(), conf)
    assert (tmp_path / "failed").exists()
    assert stored(db) == direct_count(data)
    txids = [a.txid for a, _, _ in run.commits]
    assert txids == list(range(1, len(txids) + 1))
    first_tries = {a.txid: a.attempt_id for a, _, _ in run.commits}
    assert len(set(first_tries.values())) == len(first_tries)


def test_opaque_replays_that_change_still_count_exactly(spark, tmp_path):
    data = make_data(3, 30, seed=11)
    db, markers = tmp_path / "counts.sqlite", tmp_path / "markers"
    markers.mkdir()
    spout = ReplayChangingOpaqueSpout(data, ["word"], 4, str(markers))
    b = TransactionalTopologyBuilder("opaque", "spout", spout, 2)
    b.set_bolt("partial", PartialWordCount(), 2).fields_grouping("spout", ["word"])
    b.set_bolt("commit", FailFirstCommitAfterWriting(str(db), {2, 4}, str(markers)), 2).fields_grouping(
        "partial", ["word"]
    )
    conf = {"topology.max.spout.pending": 2, "squall.transactional.store": str(tmp_path / "coord.sqlite")}
    run = run_to_the_end(spark, b.build(), conf)
    assert sorted(p.name for p in markers.iterdir()) == ["failed-commit-2", "failed-commit-4"]
    assert stored(db, opaque=True) == direct_count(data)
    # the replays of 2 and 4 read nothing from partition 1, so their batches changed
    changed = {a.txid: n for a, n, _ in run.commits if a.txid in (2, 4)}
    assert all(n <= 8 for n in changed.values()), changed


def test_partitions_added_while_running_are_read(spark, tmp_path):
    data = make_data(2, 10, seed=5)
    db = tmp_path / "counts.sqlite"
    spout = MemoryTransactionalSpout(data, ["word"], 5)
    b = TransactionalTopologyBuilder("growing", "spout", spout)
    b.set_bolt("partial", PartialWordCount()).shuffle_grouping("spout")
    b.set_bolt("commit", CountCommitter(str(db))).global_grouping("partial")
    conf = {"squall.transactional.store": str(tmp_path / "coord.sqlite")}
    with TestCluster() as cluster:
        cluster.submit_topology("grow", conf, b.build())
        cluster.wait_idle()
        assert stored(db) == direct_count(data)
        data[2] = [["new"], ["new"], ["cat"]]
        data[0].append(["late"])
        cluster.wait_idle()
    assert stored(db) == direct_count(data)


def test_the_spout_must_be_transactional():
    from squall.model.errors import InvalidTopologyError

    with pytest.raises(InvalidTopologyError, match="spout 'spout' must be a PartitionedTransactionalSpout"):
        TransactionalTopologyBuilder("bad", "spout", object())


def test_a_committer_downstream_of_a_failed_task_does_not_commit_partial_input(spark, tmp_path):
    from tx_components import ForwardingCommitter

    data = make_data(2, 30, seed=9)
    db = tmp_path / "counts.sqlite"
    b = TransactionalTopologyBuilder("chain", "spout", MemoryTransactionalSpout(data, ["word"], 6))
    b.set_bolt("partial", PartialWordCount(), 2).shuffle_grouping("spout")  # a word's count comes in parts
    b.set_bolt("first", ForwardingCommitter(2, str(tmp_path / "failed")), 2).shuffle_grouping("partial")
    b.set_bolt("second", CountCommitter(str(db)), 2).fields_grouping("first", ["word"])
    run = run_to_the_end(spark, b.build(), {"squall.transactional.store": str(tmp_path / "coord.sqlite")})
    assert (tmp_path / "failed").exists() and run.stats.failed_waves >= 1
    assert stored(db) == direct_count(data)
