"""Exactly-once word count from a 4-partition Kafka topic (``KafkaOpaqueTransactionalSpout``) into PostgreSQL.

One txid in 20 fails its first commit, after its counts are written. With ``test.kill_worker_at``, a partial
count task SIGKILLs its own Python worker once, on the first batch at or past that txid.
Settings: ``squall.kafka.bootstrap.servers``, ``squall.postgresql.url``, ``test.topic``, ``test.markers``.
"""

import os
import signal
from pathlib import Path

from tx_components import FailFirstCommitAfterWriting, PartialWordCount

from squall.connectors.kafka import KafkaOpaqueTransactionalSpout
from squall.transactional import TransactionalTopologyBuilder

CONF = {"topology.max.spout.pending": 3}
TAKE_PER_BATCH = 500  # per partition: 2,000 words a batch
FAILING_TXIDS = range(10, 10_000, 20)  # 5% of batches


class KillsItsWorkerOnce(PartialWordCount):
    def __init__(self, marker: str | None, at_txid: int) -> None:
        super().__init__()
        self.marker, self.at_txid = marker, at_txid

    def execute(self, tup):
        if self.marker and self.id.txid >= self.at_txid and not Path(self.marker).exists():
            Path(self.marker).write_text(f"{self.id.txid} {os.getpid()}")
            os.kill(os.getpid(), signal.SIGKILL)
        super().execute(tup)


def build_topology(conf):
    spout = KafkaOpaqueTransactionalSpout(
        conf["test.topic"], conf["squall.kafka.bootstrap.servers"], TAKE_PER_BATCH, fields=["word"]
    )
    b = TransactionalTopologyBuilder("kafka-postgres", "spout", spout, 2)
    marker = conf.get("test.kill_worker_marker")
    b.set_bolt("partial", KillsItsWorkerOnce(marker, int(conf.get("test.kill_worker_at", 0))), 2).shuffle_grouping(
        "spout"
    )
    committer = FailFirstCommitAfterWriting(
        conf["squall.postgresql.url"], FAILING_TXIDS, conf["test.markers"], opaque=True, table="kafka_word_counts"
    )
    b.set_bolt("commit", committer, 2).fields_grouping("partial", ["word"])
    return b.build()
