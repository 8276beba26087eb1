"""Trident's tutorial, in Python: an exactly-once word count, queried while it runs with DRPC.

    sentences --each(Split)--> group_by(word) --persistent_aggregate(Count)--> word counts (SQLite, opaque)
    DRPC "words": args --each(Split)--> group_by(word) --state_query(MapGet)--> [word, count] for each word

Run a DRPC server, then the topology (until interrupted), then ask it:

    squall drpc &
    squall run examples/trident_word_count.py --idle-secs 0 &
    python -c "from squall.drpc import DRPCClient; print(DRPCClient('127.0.0.1', 3772).execute('words', 'cat dog'))"

The counts are kept in ``.squall-data/trident-word-count/counts.sqlite`` as opaque values: a batch that fails and
runs again counts once, and a topology run again goes on from its last committed batch.
"""

from __future__ import annotations

from pathlib import Path

from squall.trident import TridentTopology
from squall.trident.builtin import Count, FilterNull, MapGet
from squall.trident.sqlite_state import SqliteMapState
from squall.trident.testing import FixedBatchSpout, Split

NAME = "trident-word-count"
CONF = {
    "example.dir": ".squall-data/trident-word-count",
    "topology.max.spout.pending": 20,  # batches in flight; each commits in txid order
    "drpc.servers": ["127.0.0.1"],  # where squall drpc runs
    "drpc.port": 3772,
}
SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
]


def build_topology(conf: dict):
    directory = Path(conf.get("example.dir", CONF["example.dir"]))
    directory.mkdir(parents=True, exist_ok=True)
    topology = TridentTopology()
    spout = FixedBatchSpout(["sentence"], 3, *SENTENCES * 20)  # 100 sentences, 3 a batch
    word_counts = (
        topology.new_stream("spout1", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(SqliteMapState.opaque(str(directory / "counts.sqlite")), Count(), ["count"])
        .parallelism_hint(2)
    )
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(word_counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .project(["word", "count"])
    )
    return topology.build()


def summary(conf: dict, console) -> None:
    path = Path(conf.get("example.dir", CONF["example.dir"])) / "counts.sqlite"
    counts = SqliteMapState.read(str(path))
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
    console.print("most counted: " + ", ".join(f"{word} {n}" for (word,), n in top))
