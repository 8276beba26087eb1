"""Storm-starter's TransactionalGlobalCount: an exactly-once global count.

    spout (MemoryTransactionalSpout, 3 emitters) --shuffle--> partial-count (5)
          --global--> sum (committer: updates the count in SQLite, in txid order)

The count is stored as a ``TransactionalValue``: a replayed batch finds its own
txid next to the count and skips the update.

    squall run examples/transactional_global_count.py
"""

from __future__ import annotations

from pathlib import Path

from squall.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    SqliteKeyedState,
    TransactionalTopologyBuilder,
)

NAME = "global-count"
# Up to 3 batches are processed at once; their commits stay in txid order. Storm's page takes 3 tuples a
# partition a batch so that its three batches show; a real source takes thousands.
CONF = {"example.dir": ".squall-data/global-count", "topology.max.spout.pending": 3}
PARTITION_TAKE_PER_BATCH = 3
DATA = {
    0: [["cat"], ["dog"], ["chicken"], ["cat"], ["dog"], ["apple"]],
    1: [["cat"], ["dog"], ["apple"], ["banana"]],
    2: [["cat"], ["cat"], ["cat"], ["cat"], ["cat"], ["dog"], ["dog"], ["dog"], ["dog"]],
}
GLOBAL_COUNT_KEY = "GLOBAL-COUNT"


class BatchCount(BatchBolt):
    outputs = ("id", "count")

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id, self.count = collector, batch_id, 0

    def execute(self, tup):
        self.count += 1

    def finish_batch(self):
        self.collector.emit([self.id, self.count])


class UpdateGlobalCount(BatchBolt, Committer):
    outputs = ("id", "sum")

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.sum = collector, attempt, 0

    def execute(self, tup):
        self.sum += tup[1]

    def finish_batch(self):
        database = SqliteKeyedState(self.db_path, "global_count")
        new = database.update(self.attempt.txid, {GLOBAL_COUNT_KEY: self.sum})
        database.close()
        self.collector.emit([self.attempt, new[GLOBAL_COUNT_KEY].value])


def db_path(conf) -> str:
    base = Path(conf["example.dir"])
    base.mkdir(parents=True, exist_ok=True)
    return str((base / "counts.sqlite").resolve())


def build_topology(conf):
    conf.setdefault("squall.transactional.store", str(Path(conf["example.dir"]) / "coordinator.sqlite"))
    spout = MemoryTransactionalSpout(DATA, ["word"], PARTITION_TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder("global-count", "spout", spout, 3)
    builder.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount(db_path(conf))).global_grouping("partial-count")
    return builder.build()


def on_commit(attempt, tuples, captured, console):
    if not tuples:
        return  # the source is drained; empty batches change nothing
    for _, total in captured.get("sum", []):
        console.print(f"txid {attempt.txid}: global count {total}")


def summary(conf, console):
    database = SqliteKeyedState(db_path(conf), "global_count")
    console.print(f"global count: {database.values().get(GLOBAL_COUNT_KEY, 0)}")
    database.close()
