"""SIGKILL the driver of a transactional topology (once in the middle of a commit), restart it,
and the counts are still exact."""

import random
import time
from collections import Counter
from pathlib import Path

from drivers import finish_driver, kill_driver, start_driver
from tx_components import word_data

from squall.transactional import SqliteCoordinatorStore, SqliteKeyedState


def committed(store_path: Path) -> int:
    store = SqliteCoordinatorStore(store_path, "restart")
    try:
        return store.get("last_committed", 0)
    finally:
        store.close()


def test_driver_killed_mid_commit_and_at_random_resumes_with_exact_counts(tmp_path):
    seed = random.randrange(1000)
    markers = tmp_path / "markers"
    markers.mkdir()
    conf = {
        "test.per_partition": 120,
        "test.seed": seed,
        "test.db": tmp_path / "counts.sqlite",
        "test.markers": markers,
        "squall.transactional.store": tmp_path / "coordinator.sqlite",
    }
    # 1: kill while a commit of txid >= 3 is under way
    first = start_driver("tx_restart.py", conf)
    deadline = time.monotonic() + 240
    while not any(int(p.name.split("-")[1]) >= 3 for p in markers.iterdir()):
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "no commit started"
        time.sleep(0.05)
    kill_driver(first)
    after_first = committed(conf["squall.transactional.store"])

    # 2: kill again at a random moment
    second = start_driver("tx_restart.py", conf)
    time.sleep(random.uniform(6, 12))
    kill_driver(second)

    # 3: run to the end
    third = start_driver("tx_restart.py", conf)
    finish_driver(third)

    state = SqliteKeyedState(conf["test.db"], "counts")
    expected = Counter(v[0] for rows in word_data(3, 120, seed=seed).values() for v in rows)
    assert state.values() == dict(expected)
    assert committed(conf["squall.transactional.store"]) > after_first
    print(f"seed={seed} committed_before_first_kill={after_first}")


def test_with_zookeeper_as_the_coordinator_store_a_killed_driver_resumes_at_the_next_txid(zookeeper_server, tmp_path):
    from squall.transactional.zookeeper import ZooKeeperCoordinatorStore

    seed = random.randrange(1000)
    store_url = f"{zookeeper_server.url}/squall-test/coordinators"
    first_markers, second_markers = tmp_path / "first", tmp_path / "second"
    first_markers.mkdir()
    second_markers.mkdir()
    conf = {
        "test.per_partition": 90,
        "test.seed": seed,
        "test.db": tmp_path / "counts.sqlite",
        "test.markers": first_markers,
        "squall.transactional.store": store_url,
    }
    first = start_driver("tx_restart.py", conf)
    deadline = time.monotonic() + 240
    while not any(int(p.name.split("-")[1]) >= 3 for p in first_markers.iterdir()):  # a commit under way
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "no commit started"
        time.sleep(0.05)
    kill_driver(first)
    store = ZooKeeperCoordinatorStore.from_url(store_url, "restart")
    try:
        resume_after = store.get("last_committed", 0)
    finally:
        store.close()
    assert resume_after >= 2

    finish_driver(start_driver("tx_restart.py", {**conf, "test.markers": second_markers}))
    restarted = sorted({int(p.name.split("-")[1]) for p in second_markers.iterdir()})
    assert restarted[0] == resume_after + 1  # nothing committed before the kill is committed again
    assert restarted == list(range(resume_after + 1, restarted[-1] + 1))  # then every txid, in order
    state = SqliteKeyedState(conf["test.db"], "counts")
    expected = Counter(v[0] for rows in word_data(3, 90, seed=seed).values() for v in rows)
    assert state.values() == dict(expected)
    print(f"zookeeper: seed={seed} killed_with_last_committed={resume_after} resumed_at={restarted[0]}")
