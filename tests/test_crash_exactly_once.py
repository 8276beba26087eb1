"""Exactly-once from a Redis Streams log into PostgreSQL, through SIGKILLed drivers and failed batches.

200,000 words in 4 partitions; the driver is SIGKILLed 3 times at random points
and started again; one batch in 20 fails its first commit after writing. The
counts in PostgreSQL equal a direct count of the words, exactly.
"""

import random
import time
from collections import Counter

from drivers import finish_driver, kill_driver, start_driver
from tx_components import WORDS

from squall.connectors.postgres import PostgresKeyedState
from squall.connectors.redis_streams import append
from squall.transactional import SqliteCoordinatorStore

WORDS_TOTAL = 200_000
PARTITIONS = 4


def last_committed(store_path) -> int:
    if not store_path.exists():
        return 0
    store = SqliteCoordinatorStore(store_path, "redis-postgres")
    try:
        return store.get("last_committed", 0)
    finally:
        store.close()


def test_redis_log_into_postgres_is_exact_through_three_driver_kills(redis_server, postgres_server, tmp_path):
    seed = random.randrange(10_000)
    rnd = random.Random(seed)
    vocabulary = [f"{w}{n}" for w in WORDS for n in range(50)]
    words = {p: [rnd.choice(vocabulary) for _ in range(WORDS_TOTAL // PARTITIONS)] for p in range(PARTITIONS)}
    for p, part in words.items():
        append(redis_server.url, f"words:{p}", ([w] for w in part))
    markers = tmp_path / "markers"
    markers.mkdir()
    store = tmp_path / "coordinator.sqlite"
    conf = {
        "squall.redis.url": redis_server.url,
        "squall.postgresql.url": postgres_server.url,
        "squall.transactional.store": store,
        "test.markers": markers,
    }
    started = time.monotonic()
    batches = WORDS_TOTAL // (PARTITIONS * 1000)
    kill_points = []
    for low, high in ((3, 12), (16, 26), (30, 40)):  # a committed txid to pass, then a random pause
        target, pause = rnd.randint(low, high), rnd.uniform(0, 2)
        driver = start_driver("tx_redis_postgres.py", conf)
        deadline = time.monotonic() + 400
        while last_committed(store) < target:
            assert driver.poll() is None, driver.stdout.read()
            assert time.monotonic() < deadline, "the driver made too little progress"
            time.sleep(0.1)
        time.sleep(pause)
        kill_driver(driver)
        kill_points.append(last_committed(store))
    finish_driver(start_driver("tx_redis_postgres.py", conf, idle_secs=3))

    expected = Counter(w for part in words.values() for w in part)
    counts = PostgresKeyedState(postgres_server.url, "crash_word_counts")
    assert counts.values() == dict(expected)
    assert sum(counts.values().values()) == WORDS_TOTAL
    failed = sorted(int(p.name.rsplit("-", 1)[1]) for p in markers.glob("failed-commit-*"))
    assert [t for t in failed if t <= batches] == list(range(10, batches + 1, 20))  # the failing 5%, once each
    assert all(t % 20 == 10 for t in failed)
    print(
        f"\nredis->postgres: seed={seed} words={WORDS_TOTAL} batches={batches} driver_killed_after_txids={kill_points}"
        f" failed_commits={failed} keys={len(expected)} total={time.monotonic() - started:.0f}s"
    )
