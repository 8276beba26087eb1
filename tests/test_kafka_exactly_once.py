"""Exactly-once with Kafka: into PostgreSQL through driver and worker SIGKILLs, and Kafka to Kafka in transactions.

Drivers are ``squall run tests/tx_kafka_*.py`` processes, SIGKILLed at random points and started again. Each test
prints its figures (``pytest -s``).
"""

import json
import random
import time
from collections import Counter

from drivers import finish_driver, kill_driver, start_driver
from tx_components import WORDS

from squall.connectors.kafka import create_topic, produce, read_all
from squall.connectors.postgres import PostgresKeyedState
from squall.transactional import SqliteCoordinatorStore

PARTITIONS = 4


def last_committed(store_path, topology: str) -> int:
    if not store_path.exists():
        return 0
    store = SqliteCoordinatorStore(store_path, topology)
    try:
        return store.get("last_committed", 0)
    finally:
        store.close()


def kill_after_txid(topology_file: str, topology: str, conf: dict, target: int, pause: float) -> int:
    driver = start_driver(topology_file, conf)
    store = conf["squall.transactional.store"]
    deadline = time.monotonic() + 400
    while last_committed(store, topology) < target:
        assert driver.poll() is None, driver.stdout.read()
        assert time.monotonic() < deadline, "the driver made too little progress"
        time.sleep(0.1)
    time.sleep(pause)
    kill_driver(driver)
    return last_committed(store, topology)


def test_opaque_kafka_into_postgres_is_exact_through_three_driver_kills_and_a_worker_kill(
    kafka_server, postgres_server, tmp_path
):
    seed = random.randrange(10_000)
    rnd = random.Random(seed)
    vocabulary = [f"{w}{n}" for w in WORDS for n in range(50)]
    words = [rnd.choice(vocabulary) for _ in range(100_000)]
    topic = f"tx-words-{seed}"
    create_topic(kafka_server.servers, topic, PARTITIONS)
    produce(kafka_server.servers, topic, [[w] for w in words], partitions=PARTITIONS)
    markers = tmp_path / "markers"
    markers.mkdir()
    conf = {
        "squall.kafka.bootstrap.servers": kafka_server.servers,
        "squall.postgresql.url": postgres_server.url,
        "squall.transactional.store": tmp_path / "coordinator.sqlite",
        "test.topic": topic,
        "test.markers": markers,
    }
    started = time.monotonic()
    kills = []
    for low, high in ((3, 10), (14, 22), (26, 34)):
        kills.append(kill_after_txid("tx_kafka_postgres.py", "kafka-postgres", conf, rnd.randint(low, high), 0.3))
    # The worker dies in a batch that still has words: txids 1 to 50 carry them (2,000 words each). A pause of
    # 1 s let a quick machine commit past the last of them before the kill, leaving no batch to die in.
    batches_with_words = len(words) // 2000
    assert kills[-1] < batches_with_words, kills
    worker_marker = tmp_path / "worker-killed"
    kill_at = min(kills[-1] + 3, batches_with_words)
    conf.update({"test.kill_worker_marker": worker_marker, "test.kill_worker_at": kill_at})
    finish_driver(start_driver("tx_kafka_postgres.py", conf, idle_secs=4))
    assert worker_marker.exists()  # a Python worker was SIGKILLed mid-batch

    counts = PostgresKeyedState(postgres_server.url, "kafka_word_counts", opaque=True)
    assert counts.values() == dict(Counter(words))
    failed = sorted(int(p.name.rsplit("-", 1)[1]) for p in markers.glob("failed-commit-*"))
    assert failed and all(t % 20 == 10 for t in failed)
    print(
        f"\nkafka->postgres opaque: seed={seed} words={len(words)} driver_killed_after_txids={kills}"
        f" worker_killed_at_txid={worker_marker.read_text().split()[0]} failed_commits={failed}"
        f" total={time.monotonic() - started:.0f}s"
    )


def test_kafka_to_kafka_in_transactions_holds_each_batch_once_through_replays_and_a_driver_kill(kafka_server, tmp_path):
    seed = random.randrange(10_000)
    rnd = random.Random(seed)
    words = [rnd.choice(WORDS) for _ in range(40_000)]
    topic, output = f"k2k-in-{seed}", f"k2k-out-{seed}"
    create_topic(kafka_server.servers, topic, PARTITIONS)
    create_topic(kafka_server.servers, output, 2)
    produce(kafka_server.servers, topic, [[w] for w in words], partitions=PARTITIONS)
    markers = tmp_path / "markers"
    markers.mkdir()
    conf = {
        "squall.kafka.bootstrap.servers": kafka_server.servers,
        "squall.transactional.store": tmp_path / "coordinator.sqlite",
        "test.topic": topic,
        "test.output": output,
        "test.markers": markers,
    }
    started = time.monotonic()
    killed_after = kill_after_txid("tx_kafka_kafka.py", "kafka-kafka", conf, rnd.randint(4, 12), rnd.uniform(0, 1))
    finish_driver(start_driver("tx_kafka_kafka.py", conf, idle_secs=4))

    committed = read_all(kafka_server.servers, output, isolation="read_committed")
    rows = [json.loads(m.value()) for m in committed]
    pairs = Counter((r["txid"], r["word"]) for r in rows)
    assert [p for p, n in pairs.items() if n > 1] == []  # no batch's result twice
    totals = Counter()
    for r in rows:
        totals[r["word"]] += r["count"]
    assert totals == Counter(words)  # and none missing
    txids = sorted({r["txid"] for r in rows})
    assert txids == list(range(1, len(txids) + 1))
    replayed = sorted({int(p.name.split("-")[1]) for p in markers.glob("failed-*")})
    assert replayed and all(t % 10 == 5 for t in replayed)
    uncommitted = len(read_all(kafka_server.servers, output, isolation="read_uncommitted")) - len(rows)
    print(
        f"\nkafka->kafka transactions: seed={seed} words={len(words)} batches={len(txids)} records={len(rows)}"
        f" driver_killed_after_txid={killed_after} replayed_after_commit={replayed}"
        f" aborted_records_hidden={uncommitted} total={time.monotonic() - started:.0f}s"
    )
