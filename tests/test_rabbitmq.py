"""The RabbitMQ reliable spout, against real rabbitmq-server nodes."""

import json
import socket
import time
import uuid

import pytest
from components import AckAll, FailFirstDelivery, RecordValues, opened, recorded
from servers import RabbitMQServer, free_port
from tx_components import WORDS

from squall import TopologyBuilder
from squall.connectors.common import BrokerUnavailable
from squall.connectors.rabbitmq import RabbitMQSpout, connect, publish, queue_depth
from squall.model.errors import InvalidConfigError
from squall.testing import TestCluster


@pytest.fixture
def queue():
    return f"q-{uuid.uuid4().hex[:8]}"


def run_until(run, done, timeout: float = 120.0) -> None:
    """Step waves (the broker delivers asynchronously) until ``done()`` holds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        if run.step().idle:
            time.sleep(0.02)


def test_every_message_is_acked_and_failures_are_redelivered(spark, rabbitmq_server, queue, tmp_path):
    words = [WORDS[i % len(WORDS)] + str(i) for i in range(60)]
    publish(rabbitmq_server.url, queue, [[w] for w in words])
    b = TopologyBuilder()
    b.set_spout("s", RabbitMQSpout(queue, rabbitmq_server.url, fields=["word"]))
    b.set_bolt("flaky", FailFirstDelivery(str(tmp_path), words[::7]), 2).shuffle_grouping("s")
    b.set_bolt("sink", AckAll()).shuffle_grouping("flaky")
    with TestCluster() as cluster:
        run = cluster.submit_topology("rabbit", {}, b.build())
        stats = run.stats.of("s")
        run_until(run, lambda: stats.acked == 60)
        cluster.wait_idle()
    assert stats.acked == 60 and stats.failed == len(words[::7]) and stats.emitted == 60 + len(words[::7])
    assert run.stats.of("sink").executed == 60
    assert queue_depth(rabbitmq_server.url, queue) == 0


def test_malformed_messages_go_to_the_dead_letter_exchange(spark, rabbitmq_server, queue):
    connection = connect(rabbitmq_server.url)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    bodies = [b"{not json", json.dumps([1, 2, 3]).encode(), b"\xff\xfe", b"[" * 100_000]
    bodies.append(json.dumps({"a": 1, "b": 2}).encode())
    for body in bodies:
        channel.basic_publish("", queue, body)
    b = TopologyBuilder()
    b.set_spout("s", RabbitMQSpout(queue, rabbitmq_server.url, fields=["a", "b"]))
    b.set_bolt("sink", AckAll()).shuffle_grouping("s")
    with TestCluster() as cluster:
        run = cluster.submit_for_capture("rabbit-dead", {}, b.build())
        stats = run.stats.of("s")
        run_until(run, lambda: stats.acked == 1 and stats.malformed == 4)
    assert run.captured["s"] == [(1, 2)] and stats.emitted == 1
    dead = []
    for _ in range(4):
        _, properties, body = channel.basic_get(f"{queue}.dead", auto_ack=True)
        dead.append((body, properties.headers["x-squall-reason"]))
    assert [body for body, _ in dead] == bodies[:4]
    assert "invalid JSON" in dead[0][1] and "3 value(s) for 2 field(s)" in dead[1][1] and "utf-8" in dead[2][1]
    assert "RecursionError" in dead[3][1]
    assert queue_depth(rabbitmq_server.url, queue) == 0
    connection.close()


def test_prefetch_follows_max_spout_pending(rabbitmq_server, queue):
    publish(rabbitmq_server.url, queue, list(range(20)))
    spout = RabbitMQSpout(queue, rabbitmq_server.url, fields=["n"])
    got = opened(spout, {"topology.max.spout.pending": 5})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # ask for far more than 5: the broker sends 5
        spout.next_tuple()
    assert [v for v, _ in got.emitted] == [(n,) for n in range(5)]
    spout.ack(got.emitted[0][1])
    spout.fail(got.emitted[1][1])  # back on the queue
    deadline = time.monotonic() + 5
    while len(got.emitted) < 7 and time.monotonic() < deadline:
        spout.next_tuple()
    assert len(got.emitted) == 7 and {v for v, _ in got.emitted[5:]} <= {(1,), (5,), (6,)}
    spout.close()


def test_a_long_wave_does_not_cost_the_connection(rabbitmq_server, queue):
    """Heartbeats every 2 s; the spout is left alone for 8 s, as during a long Spark wave; its acks still count."""
    publish(rabbitmq_server.url, queue, list(range(5)))
    spout = RabbitMQSpout(queue, rabbitmq_server.url + "?heartbeat=2", fields=["n"])
    got = opened(spout)
    deadline = time.monotonic() + 10
    while len(got.emitted) < 5:
        assert time.monotonic() < deadline
        spout.next_tuple()
    time.sleep(8)  # without heartbeats the broker would have closed the connection by now
    for _, msg_id in got.emitted:
        spout.ack(msg_id)
    spout.next_tuple()
    assert spout._generation == 1  # the same connection throughout
    spout.close()
    assert queue_depth(rabbitmq_server.url, queue) == 0  # every ack took effect


def test_messages_a_dead_consumer_left_unacked_are_redelivered(rabbitmq_server, queue):
    publish(rabbitmq_server.url, queue, list(range(5)))
    first = RabbitMQSpout(queue, rabbitmq_server.url, fields=["n"])
    seen_first = opened(first)
    deadline = time.monotonic() + 10
    while len(seen_first.emitted) < 5:
        assert time.monotonic() < deadline
        first.next_tuple()
    first.ack(seen_first.emitted[0][1])
    first._channel.queue_declare(queue, passive=True)  # a round trip on the channel: the broker has the ack
    first._connection._impl._transport._sock.shutdown(socket.SHUT_RDWR)  # the consumer dies without a goodbye
    second = RabbitMQSpout(queue, rabbitmq_server.url, fields=["n"])
    seen = opened(second)
    deadline = time.monotonic() + 30
    while len(seen.emitted) < 4 and time.monotonic() < deadline:
        second.next_tuple()
    assert sorted(v for v, _ in seen.emitted) == [(1,), (2,), (3,), (4,)]
    for _, msg_id in seen.emitted:
        second.ack(msg_id)
    second.close()
    first.close()
    assert queue_depth(rabbitmq_server.url, queue) == 0


def test_a_broker_that_is_down_at_start_is_named_without_its_password():
    url = f"amqp://guest:secret@127.0.0.1:{free_port()}/%2F"
    with pytest.raises(BrokerUnavailable, match=r"cannot reach RabbitMQ at amqp://guest:\*\*\*@127\.0\.0\.1") as err:
        opened(RabbitMQSpout("q", url))
    assert "secret" not in str(err.value)


def test_the_url_comes_from_config_or_the_error_names_the_key(rabbitmq_server, queue):
    with pytest.raises(InvalidConfigError, match=r"spout s: no URL given, and config .squall\.amqp\.url. is not set"):
        opened(RabbitMQSpout(queue))
    publish(rabbitmq_server.url, queue, ["x"])
    spout = RabbitMQSpout(queue)
    got = opened(spout, {"squall.amqp.url": rabbitmq_server.url})
    deadline = time.monotonic() + 5
    while not got.emitted and time.monotonic() < deadline:
        spout.next_tuple()
    assert [v for v, _ in got.emitted] == [("x",)]
    spout.close()


def test_a_missing_queue_is_named_when_not_declared(rabbitmq_server, queue):
    with pytest.raises(InvalidConfigError, match=f"spout s: cannot consume queue '{queue}'"):
        opened(RabbitMQSpout(queue, rabbitmq_server.url, declare=False))


def test_a_broker_lost_mid_run_is_retried_and_nothing_is_lost(spark, tmp_path, queue):
    (tmp_path / "broker").mkdir()
    broker = RabbitMQServer(tmp_path / "broker")
    db = tmp_path / "seen.sqlite"
    try:
        publish(broker.url, queue, list(range(300)))
        b = TopologyBuilder()
        b.set_spout("s", RabbitMQSpout(queue, broker.url, fields=["n"]))
        b.set_bolt("record", RecordValues(db)).shuffle_grouping("s")
        conf = {"topology.max.spout.pending": 40, "squall.wave.spout.batch": 20}
        with TestCluster() as cluster:
            run = cluster.submit_topology("rabbit-lost", conf, b.build())
            stats = run.stats.of("s")
            run_until(run, lambda: stats.acked >= 60)
            broker.stop()
            for _ in range(5):  # waves while the broker is gone: nothing to read, acks cannot go out
                run.step()
            broker.start()
            run_until(run, lambda: len(set(recorded(db))) == 300 and run.stats.pending == 0, timeout=180)
            cluster.wait_idle()
        seen = recorded(db)
        assert set(seen) == set(range(300))  # every message processed at least once
        assert queue_depth(broker.url, queue) == 0  # and acked: the spout has closed, nothing went back
        print(f"processed {len(seen)} for 300 messages ({len(seen) - 300} again after the broker came back)")
    finally:
        broker.stop()
