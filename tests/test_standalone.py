"""squall's standalone cluster launcher signals a worker with everything it runs, and waits for a worker it adds
by that worker's own registration.

PySpark's daemon, which an executor starts, puts itself and its Python workers in a process group of their own,
so a signal to the worker's process group missed them: a worker "paused" with SIGSTOP went on running its Python
workers (found by the soak, ``benchmarks/soak.py``, whose paused worker kept acking). And a worker added while a
lost one was still counted alive was waited for by the count of workers alive, which could never reach one more
(found by the soak too: ``add_worker`` waited out its whole timeout).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from servers import require, wait_for

from squall.spark.standalone import SparkStandaloneCluster

JOB = """
import sys, time
from pyspark import SparkConf, SparkContext
conf = SparkConf().setMaster(sys.argv[1]).setAppName("paused").set("spark.ui.enabled", "false")
conf.set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
sc = SparkContext(conf=conf)
sc.parallelize([0], 1).foreach(lambda _: time.sleep(120))
"""


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_paused_worker_pauses_its_python_workers_too(tmp_path):
    require("java", "openjdk-17-jre-headless")
    cluster = SparkStandaloneCluster(tmp_path, workers=1)
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, cluster.url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: cluster.python_workers(0), "a Python worker running the job", timeout=180, process=job)
        (python,) = cluster.python_workers(0)
        cluster.signal_worker(0, signal.SIGSTOP)
        time.sleep(0.5)
        assert state(python) == "T"  # stopped, with the worker and its executor
        cluster.signal_worker(0, signal.SIGCONT)
        time.sleep(0.5)
        assert state(python) != "T"
        cluster.kill_worker(0)
        wait_for(lambda: not Path(f"/proc/{python}").exists() or state(python) == "Z", "the Python worker killed")
    finally:
        job.kill()
        job.wait()
        cluster.stop()


def test_a_worker_added_while_a_lost_one_is_still_counted_alive_is_waited_for_by_its_own_registration(
    tmp_path, monkeypatch
):
    require("java", "openjdk-17-jre-headless")
    monkeypatch.setenv("SPARK_MASTER_OPTS", "-Dspark.worker.timeout=2")  # a silent worker is lost after 2 s
    cluster = SparkStandaloneCluster(tmp_path, workers=1)
    try:
        (lost,) = [w["id"] for w in cluster.state()["workers"]]
        cluster.signal_worker(0, signal.SIGSTOP)  # silent, but the master counts it alive until its timeout
        added: dict[str, int] = {}
        adding = threading.Thread(target=lambda: added.update(index=cluster.add_worker()), daemon=True)
        adding.start()
        deadline = time.monotonic() + 30
        while len(cluster.workers) < 2:
            assert time.monotonic() < deadline, "no second worker process"
            time.sleep(0.005)
        cluster.signal_worker(1, signal.SIGSTOP)  # the new worker's JVM held before it can register...
        states = lambda: {w["id"]: w["state"] for w in cluster.state()["workers"]}  # noqa: E731
        wait_for(lambda: states().get(lost, "DEAD") != "ALIVE", "the silent worker counted out", timeout=60)
        cluster.signal_worker(1, signal.SIGCONT)  # ...until the lost one is no longer counted: one alive, as before
        adding.join(timeout=90)
        assert added == {"index": 1}
        assert [state for worker, state in states().items() if worker != lost] == ["ALIVE"]
    finally:
        cluster.signal_worker(0, signal.SIGCONT)
        cluster.stop()
