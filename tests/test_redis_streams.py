"""The Redis Streams reliable spout, against a real redis-server."""

import json
import threading
import time

import pytest
import redis
from components import AckAll, FailFirstDelivery, opened
from tx_components import WORDS

from squall import TopologyBuilder
from squall.connectors.redis_streams import BrokerUnavailable, RedisStreamSpout, append, connect
from squall.testing import TestCluster


def test_every_entry_is_acked_and_failures_are_redelivered(cluster, redis_server, tmp_path):
    client = connect(redis_server.url)
    words = [WORDS[i % len(WORDS)] + str(i) for i in range(60)]
    append(redis_server.url, "words", ([w] for w in words))
    spout = RedisStreamSpout(redis_server.url, "words", fields=["word"])
    b = TopologyBuilder()
    b.set_spout("s", spout)
    b.set_bolt("flaky", FailFirstDelivery(str(tmp_path), words[::7]), 2).shuffle_grouping("s")
    b.set_bolt("sink", AckAll()).shuffle_grouping("flaky")
    run = cluster.submit_topology("redis", {}, b.build())
    cluster.wait_idle()
    cluster.wait_idle()
    stats = run.stats.of("s")
    assert stats.acked == 60 and stats.failed == len(words[::7])
    assert client.xpending("words", "squall")["pending"] == 0
    assert run.stats.of("sink").executed == 60


def test_entries_of_a_dead_consumer_are_reclaimed(redis_server):
    ids = append(redis_server.url, "jobs", range(5))
    dead = RedisStreamSpout(redis_server.url, "jobs", fields=["n"], claim_idle_ms=200)
    got = opened(dead)
    for _ in range(5):
        dead.next_tuple()
    assert [m for _, m in got.emitted] == ids  # all pending on the consumer that now "dies"

    survivor = RedisStreamSpout(redis_server.url, "jobs", fields=["n"], claim_idle_ms=200)
    seen = opened(survivor)
    survivor.next_tuple()
    assert seen.emitted == []  # not idle long enough yet
    time.sleep(0.3)
    for _ in range(5):
        survivor.next_tuple()
    assert [m for _, m in seen.emitted] == ids and [v for v, _ in seen.emitted] == [(n,) for n in range(5)]
    for _, m in seen.emitted:
        survivor.ack(m)
    assert survivor.pending() == 0


def test_malformed_entries_go_to_the_dead_letter_stream(redis_server):
    client = connect(redis_server.url)
    client.xadd("in", {"data": "{not json"})
    client.xadd("in", {"data": json.dumps([1, 2, 3])})
    client.xadd("in", {"other": "x"})
    good = client.xadd("in", {"data": json.dumps({"a": 1, "b": 2})}).decode()
    spout = RedisStreamSpout(redis_server.url, "in", fields=["a", "b"])
    got = opened(spout)
    spout.next_tuple()
    assert got.emitted == [((1, 2), good)] and len(got.malformed) == 3
    dead = client.xrange("in:dead")
    reasons = [entry[b"reason"].decode() for _, entry in dead]
    assert len(reasons) == 3 and "invalid JSON" in reasons[0] and "3 value(s) for 2 field(s)" in reasons[1]
    assert "no 'data' field" in reasons[2]
    spout.ack(good)
    assert spout.pending() == 0


def test_a_broker_that_is_down_at_start_is_named():
    from servers import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(BrokerUnavailable, match=f"cannot reach Redis at {url}"):
        opened(RedisStreamSpout(url, "x"))


def test_redis_client_is_real(redis_server):
    assert isinstance(connect(redis_server.url), redis.Redis)


def test_a_redis_server_lost_mid_run_is_retried_and_nothing_is_lost(spark, tmp_path):
    from servers import RedisServer

    server = RedisServer(tmp_path, persistent=True)
    try:
        append(server.url, "jobs", range(200))
        b = TopologyBuilder()
        b.set_spout("s", RedisStreamSpout(server.url, "jobs", fields=["n"], read_count=10))
        b.set_bolt("sink", AckAll()).shuffle_grouping("s")
        conf = {"topology.max.spout.pending": 20, "squall.wave.spout.batch": 10}
        with TestCluster() as cluster:
            run = cluster.submit_for_capture("redis-lost", conf, b.build())
            deadline = time.monotonic() + 60
            while run.stats.of("s").acked < 40:
                assert time.monotonic() < deadline
                run.step()
            server.stop(kill=True)  # abruptly: connections drop with no goodbye
            threading.Timer(1.5, server.start).start()  # back 1.5 s later, with the same data (fsynced AOF)
            run.step()  # the spout's calls retry with backoff until the server is back

            def done() -> bool:
                emitted = {v for (v,) in run.captured["s"]}  # every entry emitted, at least once
                return emitted == set(range(200)) and connect(server.url).xpending("jobs", "squall")["pending"] == 0

            deadline = time.monotonic() + 60
            while not done():  # and every one acked
                assert time.monotonic() < deadline, run.stats.of("s")
                run.step()
            cluster.wait_idle()
        assert {v for (v,) in run.captured["s"]} == set(range(200))
        assert connect(server.url).xpending("jobs", "squall")["pending"] == 0
    finally:
        server.stop()


def test_a_claim_does_not_emit_an_entry_twice(redis_server):
    ids = append(redis_server.url, "slow", range(5))
    spout = RedisStreamSpout(redis_server.url, "slow", fields=["n"], claim_idle_ms=200, read_count=5)
    got = opened(spout)
    spout.next_tuple()  # reads all 5, emits the first; 4 wait in the spout's buffer
    time.sleep(0.3)  # all 5 are now idle for longer than claim_idle_ms: a claim takes them over again
    for _ in range(10):
        spout.next_tuple()
    assert [m for _, m in got.emitted] == ids  # each once
    spout.fail(ids[0])
    spout.fail(ids[0])  # a second fail of the same entry is not a second replay
    for _ in range(3):
        spout.next_tuple()
    assert [m for _, m in got.emitted] == [*ids, ids[0]]


def test_close_closes_the_spouts_connection(redis_server):
    """A spout closed (its task moved to another worker, the run stopped) leaves no connection open behind it,
    as the other spouts do not: found by the soak (benchmarks/soak.py), where connections lingered after faults."""
    append(redis_server.url, "closing", range(2))
    spout = RedisStreamSpout(redis_server.url, "closing", fields=["n"])
    got = opened(spout)
    spout.next_tuple()
    observer = connect(redis_server.url)
    assert len(observer.client_list()) == 2
    spout.ack(got.emitted[0][1])
    spout.close()
    deadline = time.monotonic() + 10
    while len(observer.client_list()) > 1:
        assert time.monotonic() < deadline, observer.client_list()
        time.sleep(0.05)
    assert observer.xpending("closing", "squall")["pending"] == 1  # the ack went before the connection closed
