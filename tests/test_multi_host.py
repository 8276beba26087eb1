"""squall across hosts: five network namespaces on this machine, joined by a bridge, stand for five machines.

The driver (``squall run``) runs on one host, a Spark standalone master on another, and three 1-core Spark
workers on three more. Spout tasks, acker tasks and bolt tasks run on the workers and send tuples and acks to
each other; the driver's host sees only Spark's and squall's control traffic. Each host's interface counts the
bytes that cross it. Mid-run, every process on one worker host is SIGKILLed, as a machine that loses power.
The test prints its figures (``pytest -s`` shows them; docs/cluster.md quotes them).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from servers import NetworkHosts, SparkStandaloneCluster, wait_for

from squall.connectors import ReliableQueue

ROOT = Path(__file__).parent.parent
SENTENCES = 150_000
TEXT = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]
WORKER_HOSTS = ["worker0", "worker1", "worker2"]
DRIVER_SHARE_LIMIT = 0.02  # the driver's host carries at most 2% of the bytes the worker hosts do


def queue_counts(path: Path) -> dict[str, int]:
    queue = ReliableQueue(path, "sentences")
    try:
        return queue.counts()
    finally:
        queue.close()


def test_word_count_on_five_hosts_keeps_tuples_off_the_driver_and_survives_losing_a_worker_host(tmp_path):
    hosts = NetworkHosts(["driver", "master", *WORKER_HOSTS])
    spark = None
    driver = None
    try:
        (tmp_path / "spark").mkdir()
        spark = SparkStandaloneCluster(tmp_path / "spark", workers=3, hosts=hosts)
        queue_path, counts_path = tmp_path / "sentences.sqlite", tmp_path / "counts.sqlite"
        sentences = [TEXT[i % len(TEXT)] for i in range(SENTENCES)]
        producer = ReliableQueue(queue_path, "sentences")
        producer.put_many([s] for s in sentences)
        producer.close()

        args = [sys.executable, "-m", "squall.cli", "-v", "run", str(ROOT / "tests" / "multi_host_word_count.py")]
        args += ["--master", spark.url, "--idle-secs", "5", "--no-ui", "--spark-conf", "spark.task.maxFailures=8"]
        args += ["--conf", f"test.queue={queue_path}", "--conf", f"test.counts={counts_path}"]
        args += ["--conf", f"squall.checkpoint.dir={tmp_path / 'checkpoints'}"]
        args += ["--conf", "squall.worker.replace.timeout.secs=5"]
        host_of_address = {hosts.ip(name): name for name in ["driver", "master", *WORKER_HOSTS]}
        before = {name: hosts.bytes(name) for name in ["driver", *WORKER_HOSTS]}
        started = time.monotonic()
        log = tmp_path / "driver.log"
        with open(log, "w") as out:
            driver = subprocess.Popen(
                hosts.command("driver", args),
                cwd=tmp_path,
                env={**os.environ, "SPARK_LOCAL_IP": hosts.ip("driver")},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def acked() -> int:
            return SENTENCES - sum(queue_counts(queue_path).values())

        wait_for(lambda: acked() > 0, "the first sentence acked", timeout=300, process=driver)
        first_acked = {name: hosts.bytes(name) for name in before}  # the topology runs from here
        running_from = time.monotonic()
        wait_for(lambda: acked() >= SENTENCES // 4, "a quarter of the sentences acked", timeout=300, process=driver)
        acked_at_kill = acked()
        killed = hosts.kill_all("worker1")  # the Spark worker, its executor and its Python workers
        killed_at, killed_wall = time.monotonic(), time.time()
        wait_for(lambda: acked() == SENTENCES, "every sentence acked", timeout=600, process=driver)
        last_acked = {name: hosts.bytes(name) for name in before}
        running_until = time.monotonic()
        driver.wait(timeout=600)
        finished = time.monotonic()
        whole = {name: hosts.bytes(name) - before[name] for name in before}
        running = {name: last_acked[name] - first_acked[name] for name in before}
    finally:
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        if spark is not None:
            spark.stop()
        hosts.close()
    output = log.read_text()
    assert driver.returncode == 0, output[-5000:]
    assert "running on 2 worker(s)" in output  # the lost host's tasks went to the other two
    assert killed > 0

    # The spout's three tasks opened on the three worker hosts, one each; after the loss, on the two left.
    with sqlite3.connect(counts_path) as db:
        opens = db.execute("SELECT task_index, host, opened_at FROM spout_opens ORDER BY opened_at").fetchall()
    first_opens: dict[int, str] = {}
    for index, host, at in opens:
        if at < killed_wall:
            first_opens.setdefault(index, host_of_address.get(host, host))
    assert sorted(first_opens) == [0, 1, 2] and sorted(first_opens.values()) == WORKER_HOSTS
    reopened = {index: host_of_address.get(host, host) for index, host, at in opens if at >= killed_wall}
    assert sorted(reopened) == [0, 1, 2] and set(reopened.values()) <= {"worker0", "worker2"}

    assert queue_counts(queue_path) == {"ready": 0, "pending": 0, "dead": 0}  # every sentence acked
    exact = Counter(word for sentence in sentences for word in sentence.split(" "))
    with sqlite3.connect(counts_path) as db:
        counted = dict(db.execute("SELECT word, count FROM word_counts").fetchall())
    assert set(counted) == set(exact)
    assert {w: (counted[w], n) for w, n in exact.items() if counted[w] < n} == {}  # no count below the exact one

    def share(moved: dict[str, int]) -> tuple[int, int, float]:
        workers = sum(moved[name] for name in WORKER_HOSTS)
        return moved["driver"], workers, moved["driver"] / workers

    driver_bytes, worker_bytes, running_share = share(running)
    whole_driver, whole_workers, whole_share = share(whole)
    print(
        f"\nmulti-host: hosts=5 sentences={SENTENCES} words={sum(exact.values())} spout_tasks=3"
        f" running_secs={running_until - running_from:.0f} driver_host_bytes={driver_bytes}"
        f" worker_hosts_bytes={worker_bytes} driver_share={running_share:.2%}"
        f" spout_hosts_before={sorted(set(first_opens.values()))} spout_hosts_after={sorted(set(reopened.values()))}"
        f" whole_run_secs={finished - started:.0f} whole_run_driver_host_bytes={whole_driver}"
        f" whole_run_worker_hosts_bytes={whole_workers} whole_run_driver_share={whole_share:.2%}"
        f" acked_at_kill={acked_at_kill} processes_killed={killed} killed_after={killed_at - started:.0f}s"
        f" duplicate_words={sum(counted.values()) - sum(exact.values())}"
    )
    # While the topology runs (first ack to last, the worker host's loss and the recovery included), the driver's
    # host carries control only. The whole run adds Spark's own start: executors registering and fetching the job.
    assert running_share <= DRIVER_SHARE_LIMIT
    assert whole_share <= DRIVER_SHARE_LIMIT
