"""The SparkContext squall runs on."""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile

from pyspark import SparkConf, SparkContext

log = logging.getLogger("squall")

TASK_RETRIES = 4


def effective_master(master: str) -> str:
    """Spark local mode does not retry failed tasks unless asked: ``local[N]`` becomes ``local[N,4]``.

    A retry is how a wave survives a Python worker that dies.
    """
    match = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master.strip())
    if match:
        return f"local[{match.group(1) or '1'},{TASK_RETRIES}]"
    return master


def spark_context(master: str, app_name: str = "squall") -> tuple[SparkContext, bool]:
    """The active SparkContext, or a new one on ``master``; True if this call created it."""
    active = SparkContext._active_spark_context
    if active is not None:
        return active, False
    # Workers run the driver's interpreter (its virtualenv), so they import the same squall and libraries.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = (
        SparkConf()
        .setMaster(effective_master(master))
        .setAppName(app_name)
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.driver.bindAddress", "127.0.0.1")
        .set("spark.python.worker.reuse", "true")
    )
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    sc.setCheckpointDir(tempfile.mkdtemp(prefix="squall-checkpoints-"))
    log.info("started Spark %s on %s", sc.version, sc.master)
    return sc, True
