"""Kafka with SASL/SCRAM authentication: every client squall makes logs in with the user's credentials (the
spout's consumer and its dead-letter producer, the bolt's producer, the committer's transactional producer and its
txid guard), a dead-letter copy is acked only once Kafka confirms it, and a client without the credentials fails
loudly. Against a real broker whose only listener is SASL_PLAINTEXT with SCRAM-SHA-256."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from servers import KafkaServer

from squall import BasicBolt, FailedException, LocalCluster, TopologyBuilder
from squall.connectors.common import BrokerUnavailable
from squall.connectors.kafka import (
    KafkaBolt,
    KafkaCommitter,
    KafkaSpout,
    KafkaTransactionalSpout,
    committed_offsets,
    create_topic,
    end_offsets,
    produce,
    read_all,
)
from squall.model import TopologyBuilder as ModelBuilder
from squall.model.topology import TopologyContext
from squall.testing import TestCluster
from squall.transactional import BatchBolt, TransactionalTopologyBuilder, TransactionAttempt

USER, PASSWORD = "squall", "kafka-scram-secret"
CREDENTIALS = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-256",
    "sasl.username": USER,
    "sasl.password": PASSWORD,
}


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = KafkaServer(tmp_path_factory.mktemp("kafka-sasl"), scram_users={USER: PASSWORD})
    yield server
    server.stop()


class Recorder:
    """A spout's collector outside a topology."""

    def __init__(self):
        self.emitted, self.malformed, self.errors = [], [], []

    def emit(self, values, stream="default", msg_id=None):
        self.emitted.append((tuple(values), msg_id))

    def report_malformed(self, what):
        self.malformed.append(what)

    def report_error(self, error):
        self.errors.append(str(error))


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def open_alone(spout, conf=None):
    """Open ``spout`` as the only task of a one-spout topology, outside a run."""
    b = ModelBuilder()
    b.set_spout("kafka", spout)
    b.set_bolt("sink", Sink()).shuffle_grouping("kafka")
    topology = b.build()
    recorder = Recorder()
    spout.open(conf or {}, TopologyContext(topology, "kafka", topology.task_ids("kafka")[0]), recorder)
    return recorder


def test_the_spout_reads_and_dead_letters_and_the_bolt_writes_with_sasl(broker):
    source, dead, out, group = unique("in"), unique("dead"), unique("out"), unique("g")
    for topic in (source, dead, out):
        create_topic(broker.servers, topic, 1, client_config=CREDENTIALS)
    writer = Producer({"bootstrap.servers": broker.servers, **CREDENTIALS})
    for value in (b'["a"]', b"{not json", b'["b"]', b'["c", "d"]', b'["e"]'):
        writer.produce(source, value)
    assert writer.flush(30) == 0

    spout = KafkaSpout(source, broker.servers, group, fields=["v"], dead_letter_topic=dead, consumer_config=CREDENTIALS)
    b = TopologyBuilder()
    b.set_spout("kafka", spout)
    b.set_bolt("write", KafkaBolt(out, broker.servers, producer_config=CREDENTIALS)).shuffle_grouping("kafka")
    with LocalCluster({"squall.spark.master": "local[2]"}) as cluster:
        run = cluster.submit_topology("sasl-words", {}, b.build())
        stats, deadline = run.stats.of("kafka"), time.monotonic() + 120
        while (stats.acked, stats.malformed) != (3, 2):
            assert time.monotonic() < deadline, (stats.acked, stats.malformed, list(run.stats.errors))
            time.sleep(0.1)
        cluster.kill_topology("sasl-words")  # closes the spout: its last commit
    assert list(run.stats.errors) == []
    written = read_all(broker.servers, out, client_config=CREDENTIALS)
    assert sorted(json.loads(m.value())["v"] for m in written) == ["a", "b", "e"]
    copies = read_all(broker.servers, dead, client_config=CREDENTIALS)
    assert [m.value() for m in copies] == [b"{not json", b'["c", "d"]']
    assert [dict(m.headers())["squall.source"] for m in copies] == [
        f"topic {source} partition 0 offset 1".encode(),
        f"topic {source} partition 0 offset 3".encode(),
    ]
    # every offset is committed, the malformed ones too: their copies were confirmed
    assert committed_offsets(broker.servers, group, source, client_config=CREDENTIALS) == {0: 5}


def test_a_dead_letter_copy_that_fails_holds_its_offset_until_it_is_delivered(broker):
    source, dead, group = unique("in"), unique("dead-later"), unique("g")
    create_topic(broker.servers, source, 1, client_config=CREDENTIALS)
    produce(broker.servers, source, [["ok"], ["two", "values"], ["fine"]], client_config=CREDENTIALS)
    spout = KafkaSpout(
        source,
        broker.servers,
        group,
        fields=["v"],
        dead_letter_topic=dead,  # not created yet: the broker does not create topics on demand
        consumer_config=CREDENTIALS,
        dead_letter_config={"message.timeout.ms": 1500},
        offset_commit_period_ms=100,
    )
    recorder = open_alone(spout)

    def spin_until(condition, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"{what}; errors: {recorder.errors[-1:]}"
            spout.next_tuple()
            time.sleep(0.01)

    spin_until(lambda: len(recorder.emitted) == 2, "the two good records")
    assert [v for v, _ in recorder.emitted] == [("ok",), ("fine",)]
    for _, msg_id in recorder.emitted:
        spout.ack(msg_id)
    spin_until(lambda: recorder.errors, "a delivery report for the dead-letter copy")
    assert f": the copy of topic {source} partition 0 offset 1 to {dead} failed: " in recorder.errors[0]
    assert recorder.errors[0].endswith("; not acked, sent again after its backoff")

    def committed():
        return committed_offsets(broker.servers, group, source, client_config=CREDENTIALS)

    spin_until(lambda: committed() == {0: 1}, "offset 0 committed")
    spin_until(lambda: len(recorder.errors) >= 2, "the copy sent again, and refused again")
    assert committed() == {0: 1}  # the malformed record holds the partition's commit back

    create_topic(broker.servers, dead, 1, client_config=CREDENTIALS)
    spin_until(lambda: committed() == {0: 3}, "the copy delivered and every offset committed")
    spout.close()
    assert [m.value() for m in read_all(broker.servers, dead, client_config=CREDENTIALS)] == [b'["two", "values"]']


class Double(BatchBolt):
    outputs = ("id", "n")

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.batch_id = collector, batch_id

    def execute(self, tup):
        self.collector.emit([self.batch_id, tup["n"] * 2])

    def finish_batch(self):
        pass


class FailsOnceAfterCommitting(KafkaCommitter):
    """Fails txid 2's first commit after its Kafka transaction is committed: the replay must not write it again."""

    def __init__(self, *args, marker: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.marker = marker

    def finish_batch(self):
        super().finish_batch()
        if self._txid == 2 and not Path(self.marker).exists():
            Path(self.marker).write_text("")
            raise FailedException("txid 2 fails after its Kafka transaction committed")


def test_the_committer_writes_each_batch_once_with_sasl_credentials_from_the_environment(broker, tmp_path, monkeypatch):
    source, out = unique("numbers"), unique("doubled")
    for topic in (source, out):
        create_topic(broker.servers, topic, 1, client_config=CREDENTIALS)
    produce(broker.servers, source, [[n] for n in range(30)], client_config=CREDENTIALS)
    monkeypatch.setenv("SQUALL_TEST_KAFKA_PASSWORD", PASSWORD)
    conf = {
        "topology.max.spout.pending": 2,
        "squall.transactional.store": str(tmp_path / "coordinator.sqlite"),
        # the committer's credentials: the topology's Kafka client config, the password from the environment
        "squall.kafka.client.config": {**CREDENTIALS, "sasl.password": "${SQUALL_TEST_KAFKA_PASSWORD}"},
    }
    spout = KafkaTransactionalSpout(source, broker.servers, 10, fields=["n"], consumer_config=CREDENTIALS)
    b = TransactionalTopologyBuilder("sasl-doubles", "spout", spout)
    b.set_bolt("double", Double()).shuffle_grouping("spout")
    committer = FailsOnceAfterCommitting(
        out, broker.servers, mapper=lambda tup: (None, {"n": tup["n"]}), marker=str(tmp_path / "failed-once")
    )
    b.set_committer_bolt("write", committer).global_grouping("double")
    with TestCluster() as cluster:
        run = cluster.submit_topology("sasl-doubles", conf, b.build())
        deadline = time.monotonic() + 120
        while run.coordinator.last_committed < 3:
            assert time.monotonic() < deadline, list(run.stats.errors)
            cluster.wait_idle()
        cluster.kill_topology("sasl-doubles")
    assert (tmp_path / "failed-once").exists()  # txid 2 was replayed after its transaction had committed
    written = [json.loads(m.value())["n"] for m in read_all(broker.servers, out, client_config=CREDENTIALS)]
    assert sorted(written) == [2 * n for n in range(30)]  # once each, the replayed batch too


def test_without_the_credentials_every_client_fails_loudly(broker):
    topic = unique("locked")
    create_topic(broker.servers, topic, 1, client_config=CREDENTIALS)
    with pytest.raises(BrokerUnavailable) as no_credentials:
        open_alone(KafkaSpout(topic, broker.servers, unique("g"), fields=["v"]))
    assert f"cannot reach Kafka at {broker.servers}" in str(no_credentials.value)

    wrong = {**CREDENTIALS, "sasl.password": "not-the-password"}
    with pytest.raises(BrokerUnavailable) as refused:
        open_alone(KafkaSpout(topic, broker.servers, unique("g"), fields=["v"], consumer_config=wrong))
    assert "SASL authentication error: Authentication failed" in str(refused.value)
    assert "not-the-password" not in str(refused.value)

    b = TransactionalTopologyBuilder("locked", "spout", KafkaTransactionalSpout(topic, broker.servers, 10, ["n"]))
    b.set_committer_bolt("write", KafkaCommitter(topic, broker.servers)).global_grouping("spout")
    topology = b.build().topology
    task = topology.task_ids("write")[0]
    committer = KafkaCommitter(topic, broker.servers)
    context = TopologyContext(topology, "write", task)
    committer.prepare({"topology.name": "locked"}, context, None, TransactionAttempt(1, 1))
    with pytest.raises(BrokerUnavailable) as committing:
        committer.finish_batch()
    assert f"committer locked-write-{task}: cannot reach Kafka at {broker.servers}" in str(committing.value)
    assert end_offsets(broker.servers, topic, client_config=CREDENTIALS) == {0: 0}
