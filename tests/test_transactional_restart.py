"""SIGKILL the driver of a transactional topology (once in the middle of a commit), restart it,
and the counts are still exact."""

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tx_components import word_data

from squall.transactional import SqliteCoordinatorStore, SqliteKeyedState

HERE = Path(__file__).parent


def start(conf: dict) -> subprocess.Popen:
    args = [sys.executable, "-m", "squall.cli", "run", str(HERE / "topologies" / "tx_restart.py"), "--idle-secs", "2"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return subprocess.Popen(
        args,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


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
    first = start(conf)
    deadline = time.monotonic() + 240
    while not any(int(p.name.split("-")[1]) >= 3 for p in markers.iterdir()):
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "no commit started"
        time.sleep(0.05)
    kill(first)
    after_first = committed(conf["squall.transactional.store"])

    # 2: kill again at a random moment
    second = start(conf)
    time.sleep(random.uniform(6, 12))
    kill(second)

    # 3: run to the end
    third = start(conf)
    output, _ = third.communicate(timeout=600)
    assert third.returncode == 0, output

    state = SqliteKeyedState(conf["test.db"], "counts")
    expected = Counter(v[0] for rows in word_data(3, 120, seed=seed).values() for v in rows)
    assert state.values() == dict(expected)
    assert committed(conf["squall.transactional.store"]) > after_first
    print(f"seed={seed} committed_before_first_kill={after_first}")
