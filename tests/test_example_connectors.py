"""The examples, run against real servers: word counts from RabbitMQ, Redis Streams and Kafka, and exactly-once
counts from a Redis Streams log into PostgreSQL with ZooKeeper keeping the transactional progress."""

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from squall.connectors.keyed_state import open_keyed_state
from squall.connectors.redis_streams import connect
from squall.runner import load_module, run_file

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize("source", ["rabbitmq", "redis"])
def test_word_count_example_from_a_broker(spark, source, request, tmp_path):
    server = request.getfixturevalue("rabbitmq_server" if source == "rabbitmq" else "redis_server")
    key = "squall.amqp.url" if source == "rabbitmq" else "squall.redis.url"
    console = Console(record=True, width=200)
    conf = [f"example.dir={tmp_path}", "example.sentences=300", f"example.source={source}", f"{key}={server.url}"]
    example = EXAMPLES / "word_count.py"
    run = run_file(str(example), conf, None, f"wc-{source}", duration=None, idle_secs=2, console=console)
    sentences = load_module(example).SENTENCES
    expected = Counter(w for i in range(300) for w in sentences[i % len(sentences)].split(" "))
    with sqlite3.connect(tmp_path / "word_counts.sqlite") as db:
        assert dict(db.execute("SELECT word, count FROM word_counts")) == dict(expected)
    spout = run.stats.of("sentences")
    assert (spout.emitted, spout.acked, spout.failed, spout.malformed) == (300, 300, 0, 0)
    text = console.export_text()
    assert ("sentences: 0 left" if source == "rabbitmq" else "sentences: 0 pending") in text


def test_transactional_redis_log_example_into_postgres_with_zookeeper(
    spark, redis_server, postgres_server, zookeeper_server, tmp_path
):
    example = EXAMPLES / "transactional_redis_log.py"
    module = load_module(example)
    module.fill_once(redis_server.url, 5000)
    connect(redis_server.url).xadd("words:0", {"data": "[not json"})  # set aside and counted, never emitted
    console = Console(record=True, width=200)
    conf = [
        f"squall.redis.url={redis_server.url}",
        f"example.state={postgres_server.url}",
        f"squall.transactional.store={zookeeper_server.url}/examples",
        "example.words=5000",
    ]
    run_file(str(example), conf, None, "redis-log-words", duration=None, idle_secs=2, console=console)
    counts = open_keyed_state(postgres_server.url, "word_counts")
    assert counts.values() == dict(Counter(module.sample_words(5000)))
    counts.close()
    text = console.export_text()
    assert "malformed messages set aside: 1" in text and "words counted: 5000" in text


def test_kafka_word_count_example(spark, kafka_server, tmp_path):
    example = EXAMPLES / "kafka_word_count.py"
    console = Console(record=True, width=200)
    conf = [f"example.dir={tmp_path}", "example.sentences=500"]
    conf.append(f"squall.kafka.bootstrap.servers={kafka_server.servers}")
    run_file(str(example), conf, None, "kafka-wc", duration=None, idle_secs=3, console=console)
    module = load_module(example)
    exact = Counter(w for i in range(500) for w in module.SENTENCES[i % len(module.SENTENCES)].split(" "))
    assert module.final_counts(kafka_server.servers) == dict(exact)  # every count in Kafka, none beyond exact
    text = console.export_text()
    assert f"words counted: {sum(exact.values())}" in text
    assert "offsets committed: {0: 125, 1: 125, 2: 125, 3: 125} of {0: 125, 1: 125, 2: 125, 3: 125}" in text
