"""Transactional word count from a Redis Streams log (4 partitions) into PostgreSQL.

One txid in 20 fails its first commit, after its counts are written.
Settings: ``squall.redis.url``, ``squall.postgresql.url``, ``test.markers``.
"""

from tx_components import FailFirstCommitAfterWriting, PartialWordCount

from squall.connectors.redis_log import RedisLogTransactionalSpout
from squall.transactional import TransactionalTopologyBuilder

CONF = {"topology.max.spout.pending": 3}
PARTITIONS = 4
TAKE_PER_BATCH = 1000  # per partition: 4,000 words a batch
FAILING_TXIDS = range(10, 10_000, 20)  # 5% of batches


def build_topology(conf):
    url = conf["squall.redis.url"]
    spout = RedisLogTransactionalSpout([(url, f"words:{p}") for p in range(PARTITIONS)], ["word"], TAKE_PER_BATCH)
    b = TransactionalTopologyBuilder("redis-postgres", "spout", spout, 2)
    b.set_bolt("partial", PartialWordCount(), 2).shuffle_grouping("spout")
    committer = FailFirstCommitAfterWriting(
        conf["squall.postgresql.url"], FAILING_TXIDS, conf["test.markers"], opaque=False, table="crash_word_counts"
    )
    b.set_bolt("commit", committer, 2).fields_grouping("partial", ["word"])
    return b.build()
