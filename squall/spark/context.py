"""The SparkContext squall runs on, and the check that its executors can run squall."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

from pyspark import SparkConf, SparkContext

from squall.model.errors import SquallError
from squall.spark.failures import failure_cause
from squall.version import __version__

log = logging.getLogger("squall")

TASK_RETRIES = 4

ENVIRONMENT_HELP = (
    "Give the executors the driver's Python environment: the same virtualenv at the same path on every node "
    "(--spark-conf spark.pyspark.python=/path/to/venv/bin/python), or a packed one shipped with "
    "--spark-conf spark.archives=env.tar.gz#env and spark.pyspark.python=./env/bin/python (see docs/cluster.md)."
)


def is_local_master(master: str) -> bool:
    """Spark local mode (``local``, ``local[N]``, ``local[N,F]``): driver and executor in one JVM."""
    return master.strip().startswith("local") and not master.strip().startswith("local-cluster")


def runs_on_this_machine(master: str) -> bool:
    """Local mode, or ``local-cluster[N,C,M]``: everything on this machine, so bound to loopback."""
    return master.strip().startswith("local")


def effective_master(master: str) -> str:
    """Spark local mode does not retry failed tasks unless asked: ``local[N]`` becomes ``local[N,4]``.

    A retry is how a wave survives a Python worker that dies.
    """
    match = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master.strip())
    if match:
        return f"local[{match.group(1) or '1'},{TASK_RETRIES}]"
    return master


def spark_conf(master: str, app_name: str, settings: Mapping[str, Any] | None = None, ui: bool = False) -> SparkConf:
    """squall's defaults, then the user's ``settings`` (``squall.spark.conf`` / ``--spark-conf``) over them.

    The driver binds to loopback only in local mode (and ``local-cluster``); on a cluster Spark's own defaults
    (or ``spark.driver.host``) decide where executors reach it.
    """
    defaults = {
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
    }
    if runs_on_this_machine(master):
        defaults["spark.driver.host"] = "127.0.0.1"
        defaults["spark.driver.bindAddress"] = "127.0.0.1"
    conf = SparkConf(loadDefaults=False).setMaster(effective_master(master)).setAppName(app_name)
    for key, value in {**defaults, **(settings or {})}.items():
        conf.set(key, str(value).lower() if isinstance(value, bool) else str(value))
    return conf


MIN_JAVA = 17  # what Spark 4 runs on
JAVA_HELP = (
    f"install a Java {MIN_JAVA}+ runtime (Debian/Ubuntu: apt-get install openjdk-{MIN_JAVA}-jre-headless) and put "
    "its java on PATH or set JAVA_HOME to it"
)


def java_major(version_text: str) -> int | None:
    """The major version in ``java -version``'s output: 17 for ``version "17.0.15"``, 8 for ``"1.8.0_292"``."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2)) if major == 1 and found.group(2) else major


_JAVA_CHECKED: set[tuple[str, int, float]] = set()  # (path, size, mtime) of each java that passed


def check_java(environ: Mapping[str, str] | None = None) -> None:
    """The java Spark's launcher will run (``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``, as
    ``spark-class`` chooses) exists and is Java 17 or newer, or ``SquallError`` in one line saying what to
    install, instead of PySpark's ``JAVA_GATEWAY_EXITED`` traceback. A java that passed is not run again."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise SquallError(
                f"Spark needs Java {MIN_JAVA}+, and JAVA_HOME is {home} but it has no bin/java: {JAVA_HELP}"
            )
    else:
        java = shutil.which("java", path=env.get("PATH"))
        if java is None:
            raise SquallError(
                f"Spark needs Java {MIN_JAVA}+, and there is no java on PATH nor JAVA_HOME set: {JAVA_HELP}"
            )
    try:
        found = os.stat(java)
        seen = (os.path.realpath(java), found.st_size, found.st_mtime)
    except OSError:
        seen = None
    if seen in _JAVA_CHECKED:
        return
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, env=dict(env))
    except (OSError, subprocess.SubprocessError) as exc:
        raise SquallError(f"Spark needs Java {MIN_JAVA}+, and {java} does not run ({exc}): {JAVA_HELP}") from exc
    major = java_major(shown.stderr + shown.stdout)
    if major is None:
        log.warning("could not tell the version of %s; Spark needs Java %d+", java, MIN_JAVA)
    elif major < MIN_JAVA:
        raise SquallError(f"Spark needs Java {MIN_JAVA}+, and {java} is Java {major}: {JAVA_HELP}")
    if seen is not None:
        _JAVA_CHECKED.add(seen)


def spark_context(
    master: str, app_name: str = "squall", settings: Mapping[str, Any] | None = None, ui: bool = False
) -> tuple[SparkContext, bool]:
    """The active SparkContext, or a new one on ``master``; True if this call created it. Before Spark's JVM
    first starts in this process, ``check_java`` says whether it can."""
    active = SparkContext._active_spark_context
    if active is not None:
        if settings:
            log.warning(
                "a SparkContext is already running on %s; Spark settings %s are not applied",
                active.master,
                sorted(settings),
            )
        return active, False
    # PySpark takes the executors' Python from PYSPARK_PYTHON only: the setting, else the driver's interpreter.
    python = (settings or {}).get("spark.pyspark.python")
    if python:
        os.environ["PYSPARK_PYTHON"] = str(python)
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if SparkContext._gateway is None and not os.environ.get("PYSPARK_GATEWAY_PORT"):  # no JVM yet: one starts
        check_java()
    local_ip = os.environ.get("SPARK_LOCAL_IP")
    if runs_on_this_machine(master) and local_ip is None:
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark's servers, its UI too, on loopback only
    try:
        sc = SparkContext(conf=spark_conf(master, app_name, settings, ui))
    finally:
        if local_ip is None:
            os.environ.pop("SPARK_LOCAL_IP", None)  # read at launch; later contexts decide for themselves
    sc.setLogLevel("ERROR")
    log.info("started Spark %s on %s", sc.version, sc.master)
    return sc, True


_PROBE_SOURCE = """
def squall_executor_probe(_rows):
    import sys
    try:
        import squall
    except Exception as exc:
        return [("missing", type(exc).__name__ + ": " + str(exc), sys.executable)]
    return [("ok", squall.__version__, sys.executable)]
"""

_CHECKED: set[str] = set()  # application ids whose executors were checked


def _probe():
    # Defined outside any importable module, so that cloudpickle ships it by value: unpickling
    # it on an executor must not need squall, which is what it checks.
    namespace: dict[str, Any] = {"__name__": "squall_executor_probe"}
    exec(_PROBE_SOURCE, namespace)
    return namespace["squall_executor_probe"]


def check_executors(sc: SparkContext, timeout: float = 300.0, slots: int | None = None) -> None:
    """One tiny job: every executor that answers imports squall at the driver's version, or ``SquallError``.

    It has a task for each of the ``slots`` the run will use, when it is known (``squall.workers``), so that
    executors registering meanwhile start their Python daemons now, together, rather than one after the other as
    the worker job comes: what a restarted driver waits for before its first wave."""
    if sc.applicationId in _CHECKED:
        return
    slots = max(1, sc.defaultParallelism, slots or 0)
    group = f"squall-executor-check-{sc.applicationId}"
    sc.setJobGroup(group, "squall: do executors import squall?", interruptOnCancel=True)
    timer = threading.Timer(timeout, sc.cancelJobGroup, args=(group,))
    timer.daemon = True
    timer.start()
    try:
        answers = set(sc.parallelize(range(slots), slots).mapPartitions(_probe()).collect())
    except Exception as exc:
        if not timer.is_alive():
            raise SquallError(
                f"no Spark executor ran squall's executor check within {timeout:.0f}s: does the cluster have "
                "free cores and memory for this application?"
            ) from exc
        raise SquallError(
            f"Spark's executors could not run squall's executor check ({failure_cause(exc)}). {ENVIRONMENT_HELP}"
        ) from exc
    finally:
        timer.cancel()
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    for kind, detail, python in sorted(answers):
        if kind == "missing":
            raise SquallError(
                f"Spark's executors cannot import squall ({detail}; their Python is {python}). " + ENVIRONMENT_HELP
            )
        if detail != __version__:
            raise SquallError(
                f"Spark's executors import squall {detail} ({python}) but the driver runs squall "
                f"{__version__}. " + ENVIRONMENT_HELP
            )
    _CHECKED.add(sc.applicationId)
