"""Trident under faults on a standalone cluster with squall run: a Spark worker SIGKILLed, then the driver, mid-run.

Every count ends exact, and DRPC queries made all along answer with an error or with counts some committed batch
left: never above the final count, and never lower than an earlier answer."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from drivers import wait
from servers import SparkStandaloneCluster

from squall.connectors.redis_streams import append
from squall.connectors.trident_state import PostgresMapState, RedisMapState
from squall.drpc import DRPCClient, DRPCExecutionException

ROOT = Path(__file__).parent.parent
SENTENCES = 20_000
VOCABULARY = [f"w{i}" for i in range(40)]
ASKED = ["w0", "w1", "w2"]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    yield cluster
    cluster.stop()


class Asking(threading.Thread):
    """Asks the topology for the counts of ``ASKED`` again and again, keeping each answer (or error) in order."""

    def __init__(self, port: int, token: str) -> None:
        super().__init__(daemon=True)
        self.client = DRPCClient("127.0.0.1", port, timeout=30, token=token)
        self.answers: list[dict[str, int] | str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.answers.append(dict(json.loads(self.client.execute("count", " ".join(ASKED)))))
            except DRPCExecutionException as exc:
                self.answers.append(str(exc))
            time.sleep(0.05)


@pytest.mark.parametrize("kind", ["opaque", "transactional"])
def test_trident_is_exact_and_answers_only_committed_counts_through_a_worker_and_a_driver_kill(
    kind, standalone, redis_server, postgres_server, tmp_path
):
    while standalone.alive() < 2:
        standalone.add_worker()
    seed = random.randrange(10_000)
    rnd = random.Random(seed)
    sentences = [" ".join(rnd.choice(VOCABULARY) for _ in range(8)) for _ in range(SENTENCES)]
    for p in range(2):
        append(redis_server.url, f"sentences:{p}", ([s] for s in sentences[p::2]))
    exact = {(w,): n for w, n in Counter(w for s in sentences for w in s.split()).items()}

    env = {**os.environ, "HOME": str(tmp_path)}
    server = subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "drpc", "--port", "0", "--timeout-secs", "5"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    port = int(re.search(r":(\d+);", server.stderr.readline()).group(1))
    token = (tmp_path / ".squall" / "drpc" / f"127.0.0.1_{port}.token").read_text()
    conf = {
        "test.kind": kind,
        "squall.redis.url": redis_server.url,
        "squall.postgresql.url": postgres_server.url,
        "drpc.servers": '["127.0.0.1"]',
        "drpc.port": port,  # the driver reads the server's token from its file, under this HOME
    }
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "tests" / "trident_faults.py"), "--no-ui"]
    args += ["--master", standalone.url, "--idle-secs", "3", "--spark-conf", "spark.task.maxFailures=8"]
    args += ["--conf", "squall.worker.replace.timeout.secs=2"]  # no spare core: go on on the survivor at once
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]

    def counted() -> dict:
        if kind == "opaque":
            return RedisMapState.read(redis_server.url, "trident_fault_counts")
        try:
            return PostgresMapState.read(postgres_server.url, "trident_fault_counts")
        except Exception:  # the table is not there yet
            return {}

    def progress() -> float:
        return sum(counted().values()) / (8 * SENTENCES)

    def run_driver(index: int):
        log = open(tmp_path / f"driver-{index}.log", "w")  # noqa: SIM115 - the driver writes it
        return subprocess.Popen(
            args, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )

    asking = Asking(port, token)
    driver = run_driver(1)
    try:
        asking.start()
        wait(lambda: progress() >= 0.25, driver, "progress before the worker kill")
        answered_before_faults = sum(isinstance(a, dict) for a in asking.answers)
        victim = next(i for i, p in enumerate(standalone.workers) if p.poll() is None)
        standalone.kill_worker(victim)
        wait(lambda: progress() >= 0.55, driver, "progress after the worker kill")
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        standalone.add_worker()
        killed_at = len(asking.answers)
        driver = run_driver(2)
        wait(lambda: counted() == exact, driver, "the exact counts")
        # The answer in flight now may have been asked before the last commit; the one after it may not.
        exact_at = len(asking.answers) + 1
        wait(lambda: any(isinstance(a, dict) for a in asking.answers[exact_at:]), driver, "an answer after the end")
        asking.stop.set()
        asking.join(60)
        driver.wait(timeout=300)
    finally:
        asking.stop.set()
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        server.terminate()
        server.wait(30)
    assert driver.returncode == 0, (tmp_path / "driver-2.log").read_text()[-5000:]
    assert counted() == exact

    answers = [a for a in asking.answers if isinstance(a, dict)]
    assert answered_before_faults > 0 and any(isinstance(a, dict) for a in asking.answers[killed_at:])
    for word in ASKED:
        seen = [a[word] or 0 for a in answers]
        assert all(n <= exact[(word,)] for n in seen), f"{word}: a count above the final one"
        assert seen == sorted(seen), f"{word}: a count lower than one answered before it"
    final = [a for a in asking.answers[exact_at:] if isinstance(a, dict)]
    assert final and all(a == {w: exact[(w,)] for w in ASKED} for a in final), final
    errors = [a for a in asking.answers if isinstance(a, str)]
    print(
        f"\ntrident faults ({kind}): seed={seed} answers={len(answers)} errors={len(errors)}"
        f" first_error={errors[0][:80] if errors else None}"
    )
