"""Every exactly-once pair of Storm's table, on every backend: counts stay exact when batches fail in processing
and again in the middle of their commit, after some of their writes landed."""

import os
from collections import Counter
from pathlib import Path

from test_trident_operations import SENTENCES, FailsOncePerTxid, settle

from squall import LocalCluster
from squall.connectors.trident_state import PostgresMapState, RedisMapState
from squall.transactional import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from squall.trident import MapState, StateFactory, TridentTopology
from squall.trident.builtin import Count
from squall.trident.sqlite_state import SqliteMapState


class FailsMidCommit(MapState):
    """A map state whose commit raises once for txid 2 on each partition, after the batch's writes landed."""

    def __init__(self, state, marks, name, partition):
        self.state, self.mark = state, Path(marks) / f"{name}-{partition}"

    def begin_commit(self, txid):
        self.state.begin_commit(txid)

    def commit(self, txid):
        self.state.commit(txid)
        if txid == 2 and not self.mark.exists():
            self.mark.touch()
            raise RuntimeError("lost mid-commit")

    def multi_get(self, keys):
        return self.state.multi_get(keys)

    def multi_put(self, keys, vals):
        self.state.multi_put(keys, vals)

    def multi_update(self, keys, updaters):
        return self.state.multi_update(keys, updaters)


class FailingMidCommit(StateFactory):
    def __init__(self, factory, marks, name):
        self.factory, self.marks, self.name = factory, str(marks), name

    def make_state(self, conf, metrics, partition_index, num_partitions):
        state = self.factory.make_state(conf, metrics, partition_index, num_partitions)
        return FailsMidCommit(state, self.marks, self.name, partition_index)


def word_count(txid, spout, states, marks):
    topology = TridentTopology()
    words = topology.new_stream(txid, spout).parallelism_hint(2).each(["sentence"], FailsOncePerTxid(marks), ["word"])
    for name, factory in states.items():
        words.group_by(["word"]).persistent_aggregate(FailingMidCommit(factory, marks, name), Count(), ["count"])
    return topology.build()


def test_each_exactly_once_pair_counts_once_through_failures(tmp_path, redis_server, postgres_server):
    lines = [[s] for s in SENTENCES * 4]
    partitions = {0: lines[:10], 1: lines[10:]}
    sqlite = str(tmp_path / "counts.sqlite")
    redis_url, pg_url = redis_server.url, postgres_server.url
    backends = {
        "sqlite": (SqliteMapState, lambda kind, name: getattr(SqliteMapState, kind)(sqlite, name)),
        "redis": (RedisMapState, lambda kind, name: getattr(RedisMapState, kind)(redis_url, name)),
        "postgres": (PostgresMapState, lambda kind, name: getattr(PostgresMapState, kind)(pg_url, name)),
    }
    pairs = {  # Storm's table: which spout with which state is exactly once
        "transactional": ["transactional", "opaque"],
        "opaque": ["opaque"],
    }
    runs, reads = [], {}
    with LocalCluster() as cluster:
        for spout_kind, state_kinds in pairs.items():
            marks = tmp_path / f"marks-{spout_kind}"
            os.makedirs(marks)
            states = {}
            for backend, (_, make) in backends.items():
                for state_kind in state_kinds:
                    name = f"{spout_kind}_spout_{state_kind}_{backend}"
                    states[name] = make(state_kind, name)
                    reads[name] = backend
            kind = MemoryTransactionalSpout if spout_kind == "transactional" else OpaqueMemoryTransactionalSpout
            topology = word_count(f"eo-{spout_kind}", kind(partitions, ["sentence"], 3), states, marks)
            conf = {"topology.max.spout.pending": 3, "squall.workers": 1}  # two topologies, two cores
            runs.append(cluster.submit_topology(f"eo-{spout_kind}", conf, topology))
        for run in runs:
            settle(cluster, run, timeout=240)
            assert run.stats.failed_waves > 0
    expected = {(w,): n for w, n in Counter(w for (s,) in lines for w in s.split()).items()}
    counted = {}
    for name, backend in reads.items():
        where = {"sqlite": sqlite, "redis": redis_url, "postgres": pg_url}[backend]
        counted[name] = backends[backend][0].read(where, name)
    assert counted == {name: expected for name in reads}
    for spout_kind in pairs:  # every state did fail in the middle of a commit
        failed = {p.name.rsplit("-", 1)[0] for p in (tmp_path / f"marks-{spout_kind}").glob("*_*-*")}
        assert failed == {name for name in reads if name.startswith(f"{spout_kind}_spout")}
