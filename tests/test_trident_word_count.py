"""Trident's word count, as Storm's tutorial writes it, run by LocalCluster: counts exact, in a SQLite map state."""

import time
from collections import Counter

from squall import LocalCluster
from squall.trident import TridentTopology
from squall.trident.builtin import Count
from squall.trident.sqlite_state import SqliteMapState
from squall.trident.testing import FixedBatchSpout, Split

SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
]


def test_word_count_into_an_opaque_sqlite_map_state(tmp_path):
    path = str(tmp_path / "counts.sqlite")
    topology = TridentTopology()
    spout = FixedBatchSpout(["sentence"], 3, *SENTENCES * 5)
    (
        topology.new_stream("spout1", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(SqliteMapState.opaque(path), Count(), ["count"])
        .parallelism_hint(3)
    )
    with LocalCluster() as cluster:
        run = cluster.submit_topology("trident-words", {"topology.max.spout.pending": 2}, topology.build())
        deadline = time.monotonic() + 120
        while not run.settled():  # the cluster's thread drives the run
            assert not cluster.failures, cluster.failures
            assert time.monotonic() < deadline, "the batches did not settle"
            time.sleep(0.05)
    expected = Counter(w for s in SENTENCES * 5 for w in s.split())
    assert SqliteMapState.read(path) == {(w,): n for w, n in expected.items()}
