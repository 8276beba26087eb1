"""Redis Streams as a replayable partitioned log, into Redis state: exact counts."""

import time
from collections import Counter

from servers import RedisServer
from tx_components import CountCommitter, PartialWordCount, word_data

from squall.connectors.redis_log import RedisKeyedState, RedisLogOpaqueSpout, RedisLogTransactionalSpout
from squall.connectors.redis_streams import append, connect
from squall.testing import TestCluster
from squall.transactional import TransactionalTopologyBuilder, TransactionalValue, TransactionAttempt


class Recorder:
    def __init__(self):
        self.emitted = []

    def emit(self, values, stream="default"):
        self.emitted.append(tuple(values))


def run_until_committed(run, txid: int) -> None:
    while run.coordinator.last_committed < txid:
        if run.step().idle:
            time.sleep(0.01)


def test_the_same_txid_reads_the_same_entry_range(redis_server):
    append(redis_server.url, "log:0", [[f"w{i}"] for i in range(10)])
    spout = RedisLogTransactionalSpout([(redis_server.url, "log:0")], ["word"], 4)
    tx = TransactionAttempt(1, 1)
    first, again, second = Recorder(), Recorder(), Recorder()
    meta = spout.emit_partition_batch_new(tx, first, 0, None)
    spout.emit_partition_batch(tx, again, 0, meta)
    meta2 = spout.emit_partition_batch_new(TransactionAttempt(2, 2), second, 0, meta)
    assert first.emitted == again.emitted == [(tx, f"w{i}") for i in range(4)]
    assert [v[1] for v in second.emitted] == ["w4", "w5", "w6", "w7"]
    assert meta2["after"] == meta["last"] and meta2["count"] == 4


def test_exactly_once_from_a_redis_log_into_redis_state_through_failures(spark, redis_server, tmp_path):
    data = word_data(3, 80, seed=21)
    for p, rows in data.items():
        append(redis_server.url, f"words:{p}", rows[:40])
    connect(redis_server.url).xadd("words:1", {"data": "[1, 2]"})  # two values for one field: malformed
    for p, rows in data.items():
        append(redis_server.url, f"words:{p}", rows[40:])
    spout = RedisLogTransactionalSpout([(redis_server.url, f"words:{p}") for p in data], ["word"], 9)
    b = TransactionalTopologyBuilder("redis-exact", "spout", spout, 2)
    b.set_bolt("partial", PartialWordCount(fail_rate=0.1), 2).shuffle_grouping("spout")
    b.set_bolt("commit", CountCommitter(redis_server.url, fail_rate=0.1), 2).fields_grouping("partial", ["word"])
    conf = {"topology.max.spout.pending": 3, "squall.transactional.store": str(tmp_path / "coord.sqlite")}
    with TestCluster() as cluster:
        run = cluster.submit_topology("redis-exact", conf, b.build())
        cluster.wait_idle()
    expected = Counter(v[0] for rows in data.values() for v in rows)
    assert RedisKeyedState(redis_server.url, "counts").values() == dict(expected)
    assert run.stats.failed_waves >= 1
    assert run.stats.of("spout").malformed == 1  # however often its batch was replayed


def test_redis_keyed_state_reads_like_the_others(redis_server):
    state = RedisKeyedState(redis_server.url, "reads")
    state.update(3, {("a", ("b", 1)): 2, "k": 5})
    assert state.get(("a", ("b", 1))) == TransactionalValue(2, 3) and state.get("missing") is None
    assert state.get_many(["k", "missing"]) == {"k": TransactionalValue(5, 3)}
    assert state.items() == {("a", ("b", 1)): TransactionalValue(2, 3), "k": TransactionalValue(5, 3)}
    assert state.values() == {("a", ("b", 1)): 2, "k": 5}
    state.close()


def test_opaque_with_a_partition_unavailable_for_a_while(spark, redis_server, tmp_path):
    (tmp_path / "second").mkdir()
    second = RedisServer(tmp_path / "second", persistent=True)
    try:
        data = word_data(2, 60, seed=33)
        append(redis_server.url, "w:0", data[0])
        append(second.url, "w:1", data[1])
        spout = RedisLogOpaqueSpout([(redis_server.url, "w:0"), (second.url, "w:1")], ["word"], 5)
        b = TransactionalTopologyBuilder("redis-opaque", "spout", spout)
        b.set_bolt("partial", PartialWordCount(), 2).shuffle_grouping("spout")
        b.set_bolt("commit", CountCommitter(redis_server.url, opaque=True, table="ocounts"), 2).fields_grouping(
            "partial", ["word"]
        )
        conf = {"topology.max.spout.pending": 2, "squall.transactional.store": str(tmp_path / "coord.sqlite")}
        with TestCluster() as cluster:
            run = cluster.submit_topology("redis-opaque", conf, b.build())
            run_until_committed(run, 3)
            second.stop()  # partition 1 is unavailable for a while
            first_without = run.coordinator.next_txid  # the first txid emitted without it
            target = first_without + 2
            run_until_committed(run, target)
            unavailable = [n for a, n, _ in run.commits if first_without <= a.txid <= target]
            second.start()
            cluster.wait_idle()
        assert len(unavailable) == 3 and all(n <= 5 for n in unavailable)  # only partition 0 meanwhile
        expected = Counter(v[0] for rows in data.values() for v in rows)
        assert RedisKeyedState(redis_server.url, "ocounts", opaque=True).values() == dict(expected)
    finally:
        second.stop()
