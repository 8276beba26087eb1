"""Batch bolts and spouts for the transactional runtime tests (imported by Spark's workers)."""

from __future__ import annotations

import itertools
import os
import random
import time
from pathlib import Path

from squall import FailedException
from squall.connectors.keyed_state import open_keyed_state
from squall.transactional import BatchBolt, Committer, OpaqueMemoryTransactionalSpout
from squall.transactional.coordinator import Commit, Emit


def _unlucky(attempt, task: int, salt: str, rate: float) -> bool:
    return random.Random(f"{attempt.attempt_id}-{task}-{salt}").random() < rate


class PartialWordCount(BatchBolt):
    """Counts words of the batch; fails at random (``fail_rate``); may kill its worker once."""

    outputs = ("id", "word", "count")

    def __init__(self, fail_rate: float = 0.0, crash_marker: str | None = None, slow_txids=(), sleep=0.0) -> None:
        self.fail_rate, self.crash_marker = fail_rate, crash_marker
        self.slow_txids, self.sleep = set(slow_txids), sleep

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id, self.task, self.counts = collector, batch_id, context.task_id, {}

    def execute(self, tup):
        if self.crash_marker and not Path(self.crash_marker).exists():
            Path(self.crash_marker).write_text(str(self.id.txid))
            os._exit(1)
        self.counts[tup[1]] = self.counts.get(tup[1], 0) + 1

    def finish_batch(self):
        if self.id.txid in self.slow_txids:
            time.sleep(self.sleep)
        if _unlucky(self.id, self.task, "process", self.fail_rate):
            raise FailedException(f"injected in processing, txid {self.id.txid}")
        for word, n in sorted(self.counts.items()):
            self.collector.emit([self.id, word, n])


class FailFirstTry(BatchBolt):
    """Fails the first attempt of ``txid`` (after a pause, so later batches are in flight)."""

    outputs = ("id", "word", "count")

    def __init__(self, txid: int, marker: str) -> None:
        self.txid, self.marker = txid, marker

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id = collector, batch_id

    def execute(self, tup):
        self.collector.emit(list(tup.values))

    def finish_batch(self):
        if self.id.txid == self.txid and not Path(self.marker).exists():
            time.sleep(1.0)
            Path(self.marker).write_text("failed once")
            raise FailedException(f"txid {self.txid} fails its first try")


class CountCommitter(BatchBolt, Committer):
    """Adds the batch's word counts to the keyed state ``table`` of the store at ``state`` (a SQLite
    path, or a redis:// or postgresql:// URL); fails at random before or after writing."""

    outputs = ("id", "word", "count")

    def __init__(
        self,
        state: str,
        fail_rate: float = 0.0,
        opaque: bool = False,
        pause: float = 0.0,
        marker_dir: str | None = None,
        table: str = "counts",
    ) -> None:
        self.state, self.fail_rate, self.opaque, self.table = str(state), fail_rate, opaque, table
        self.pause, self.marker_dir = pause, marker_dir

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id, self.task, self.counts = collector, batch_id, context.task_id, {}
        self.writer = f"{context.component_id}/{context.task_index}"

    def execute(self, tup):
        self.counts[tup[1]] = self.counts.get(tup[1], 0) + tup[2]

    def finish_batch(self):
        if _unlucky(self.id, self.task, "before", self.fail_rate):
            raise FailedException(f"injected before the commit, txid {self.id.txid}")
        if self.marker_dir:  # announce the commit, then take a while: a window to be killed in
            Path(self.marker_dir, f"committing-{self.id.txid}-{self.task}").write_text("")
            time.sleep(self.pause)
        state = open_keyed_state(self.state, self.table, opaque=self.opaque)
        try:
            state.update(self.id.txid, self.counts, writer=self.writer)
        finally:
            state.close()
        if _unlucky(self.id, self.task, "after", self.fail_rate):
            raise FailedException(f"injected after the commit, txid {self.id.txid}")


class ReplayChangingOpaqueSpout(OpaqueMemoryTransactionalSpout):
    """Partition 1 is unavailable to a replayed batch whose first try reached the commit."""

    def __init__(self, partitions, fields, take_per_batch, marker_dir: str) -> None:
        super().__init__(partitions, fields, take_per_batch)
        self.marker_dir = marker_dir

    def emit_partition_batch(self, tx, collector, partition, last_meta):
        if partition == 1 and Path(self.marker_dir, f"failed-commit-{tx.txid}").exists():
            self.unavailable = {1}
        else:
            self.unavailable = set()
        return super().emit_partition_batch(tx, collector, partition, last_meta)


class FailFirstCommitAfterWriting(CountCommitter):
    """On each txid in ``txids``, the first commit writes its counts and then fails."""

    def __init__(self, state: str, txids, marker_dir: str, opaque: bool = True, table: str = "counts") -> None:
        super().__init__(state, opaque=opaque, table=table)
        self.txids, self.failure_dir = set(txids), marker_dir

    def finish_batch(self):
        super().finish_batch()
        marker = Path(self.failure_dir, f"failed-commit-{self.id.txid}")
        if self.id.txid in self.txids and not marker.exists():
            marker.write_text("")
            raise FailedException(f"txid {self.id.txid} fails after writing")


WORDS = ["cat", "dog", "emu", "fox", "gnu", "hen", "owl", "yak"]


def word_data(partitions: int, per_partition: int, seed: int = 7) -> dict[int, list[list[str]]]:
    rnd = random.Random(seed)
    return {p: [[rnd.choice(WORDS)] for _ in range(per_partition)] for p in range(partitions)}


class ForwardingCommitter(BatchBolt, Committer):
    """Forwards its tuples; task 0's first commit of ``txid`` fails after forwarding them."""

    outputs = ("id", "word", "count")

    def __init__(self, txid: int, marker: str) -> None:
        self.txid, self.marker = txid, marker

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id, self.index = collector, batch_id, context.task_index

    def execute(self, tup):
        self.collector.emit(list(tup.values))

    def finish_batch(self):
        if self.id.txid == self.txid and self.index == 0 and not Path(self.marker).exists():
            Path(self.marker).write_text("")
            raise FailedException("a committer upstream of another fails")


# -- driving the pure coordinator in tests -------------------------------------------
def counter(start: int = 100):
    """Attempt ids start, start + 1, ..."""
    ids = itertools.count(start)
    return lambda: next(ids)


def emits(instructions):
    return [(i.attempt.txid, i.attempt.attempt_id) for i in instructions if isinstance(i, Emit)]


def commits(instructions):
    return [i.attempt for i in instructions if isinstance(i, Commit)]
