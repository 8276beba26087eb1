"""Kafka's transactional and opaque spouts in Trident streams: the word count, exact, from a topic of 2 partitions,
with a batch failing on its first try."""

import os
from collections import Counter

import pytest
from test_trident_operations import SENTENCES, FailsOncePerTxid, settle

from squall import LocalCluster
from squall.connectors.kafka import KafkaOpaqueTransactionalSpout, KafkaTransactionalSpout, create_topic, produce
from squall.trident import TridentTopology
from squall.trident.builtin import Count
from squall.trident.sqlite_state import SqliteMapState


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_a_kafka_spout_feeds_a_trident_word_count_exactly(kafka_server, tmp_path, kind):
    topic = f"trident-sentences-{kind}"
    lines = SENTENCES * 6
    create_topic(kafka_server.servers, topic, 2)
    produce(kafka_server.servers, topic, [[s] for s in lines], partitions=2)
    spout_class = KafkaTransactionalSpout if kind == "transactional" else KafkaOpaqueTransactionalSpout
    spout = spout_class(topic, kafka_server.servers, 4, fields=["sentence"])
    marks = tmp_path / "marks"
    os.makedirs(marks)
    path = str(tmp_path / "counts.sqlite")
    state = SqliteMapState.transactional(path) if kind == "transactional" else SqliteMapState.opaque(path)
    topology = TridentTopology()
    (
        topology.new_stream(f"kafka-{kind}", spout)
        .parallelism_hint(2)
        .each(["sentence"], FailsOncePerTxid(marks), ["word"])
        .group_by(["word"])
        .persistent_aggregate(state, Count(), ["count"])
    )
    with LocalCluster() as cluster:
        run = cluster.submit_topology(f"kafka-{kind}", {"topology.max.spout.pending": 3}, topology.build())
        settle(cluster, run)
        assert run.stats.failed_waves > 0
    assert SqliteMapState.read(path) == {(w,): n for w, n in Counter(w for s in lines for w in s.split()).items()}
