"""Kafka to Kafka, exactly once: a word count from a 4-partition topic (``KafkaTransactionalSpout``) whose
committer (``KafkaCommitter``) writes each batch's ``{txid, word, count}`` records to an output topic in one Kafka
transaction per task. One txid in 10 fails its first commit after the transaction is committed, so it is replayed
and must not be written again.
Settings: ``squall.kafka.bootstrap.servers``, ``test.topic``, ``test.output``, ``test.markers``.
"""

from pathlib import Path

from tx_components import PartialWordCount

from squall import FailedException
from squall.connectors.kafka import KafkaCommitter, KafkaTransactionalSpout
from squall.transactional import TransactionalTopologyBuilder

CONF = {"topology.max.spout.pending": 3}
TAKE_PER_BATCH = 500
FAILING_TXIDS = range(5, 10_000, 10)


class FailsOnceAfterCommitting(KafkaCommitter):
    def __init__(self, *args, markers: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.markers = markers

    def finish_batch(self):
        super().finish_batch()
        marker = Path(self.markers, f"failed-{self._txid}-{self._id}")
        if self._txid in FAILING_TXIDS and not marker.exists():
            marker.write_text("")
            raise FailedException(f"txid {self._txid} fails after its Kafka transaction committed")


def as_record(tup):
    return tup["word"], {"txid": tup["id"].txid, "word": tup["word"], "count": tup["count"]}


def build_topology(conf):
    servers = conf["squall.kafka.bootstrap.servers"]
    spout = KafkaTransactionalSpout(conf["test.topic"], servers, TAKE_PER_BATCH, fields=["word"])
    b = TransactionalTopologyBuilder("kafka-kafka", "spout", spout, 2)
    b.set_bolt("partial", PartialWordCount(), 1).shuffle_grouping("spout")  # one record per word and batch
    committer = FailsOnceAfterCommitting(conf["test.output"], servers, mapper=as_record, markers=conf["test.markers"])
    b.set_committer_bolt("write", committer, 2).fields_grouping("partial", ["word"])
    return b.build()
