"""squall's standalone cluster launcher signals a worker with everything it runs.

PySpark's daemon, which an executor starts, puts itself and its Python workers in a process group of their own,
so a signal to the worker's process group missed them: a worker "paused" with SIGSTOP went on running its Python
workers (found by the soak, ``benchmarks/soak.py``, whose paused worker kept acking).
"""

from __future__ import annotations

import signal
import subprocess
import sys
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
