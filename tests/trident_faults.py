"""Trident's word count from a Redis log (2 partitions), queried with DRPC, for the fault tests.

``test.kind``: ``opaque`` (an opaque spout into an opaque map state in Redis) or ``transactional`` (a transactional
spout into a transactional map state in PostgreSQL). Settings: ``squall.redis.url``, ``squall.postgresql.url``,
``drpc.servers``, ``drpc.port``, ``squall.drpc.token``.
"""

from squall.connectors.redis_log import RedisLogOpaqueSpout, RedisLogTransactionalSpout
from squall.connectors.trident_state import PostgresMapState, RedisMapState
from squall.trident import TridentTopology
from squall.trident.builtin import Count, MapGet
from squall.trident.testing import Split

# 5 batches a second of up to 200 sentences a partition: the run lasts long enough to be hit mid-way
CONF = {"topology.max.spout.pending": 3, "topology.trident.batch.emit.interval.millis": 200}
PARTITIONS = 2
TAKE_PER_BATCH = 200
STATE = "trident_fault_counts"


def build_topology(conf):
    url, kind = conf["squall.redis.url"], conf["test.kind"]
    logs = [(url, f"sentences:{p}") for p in range(PARTITIONS)]
    if kind == "opaque":
        spout = RedisLogOpaqueSpout(logs, ["sentence"], TAKE_PER_BATCH)
        state = RedisMapState.opaque(url, STATE)
    else:
        spout = RedisLogTransactionalSpout(logs, ["sentence"], TAKE_PER_BATCH)
        state = PostgresMapState.transactional(conf["squall.postgresql.url"], STATE)
    topology = TridentTopology()
    counts = (
        topology.new_stream(f"faults-{kind}", spout)
        .parallelism_hint(2)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(state, Count(), ["count"])
        .parallelism_hint(2)
    )
    (
        topology.new_drpc_stream("count")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .project(["word", "count"])
    )
    return topology.build()
