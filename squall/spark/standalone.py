"""A Spark standalone cluster on this machine, for development, benchmarks and tests: a master and workers of one
core each, started from the pyspark package's own ``bin/spark-class`` on free ports, their logs and work
directories in a directory of the caller's.

Each worker runs in a process group of its own, with its executor and Python workers, so ``kill_worker``
SIGKILLs a worker together with everything it runs, and ``signal_worker`` can pause or resume all of it. Given
``NetworkHosts`` (``squall/spark/network_hosts.py``), the master and each worker run on hosts of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from squall.spark.network_hosts import NetworkHosts


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, on ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(
    port: int, process: subprocess.Popen, what: str, timeout: float = 30.0, host: str = "127.0.0.1"
) -> None:
    """Until ``host:port`` accepts a connection; an error naming ``what`` if ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout}s")


def _processes() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, process group)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def process_tree(group: int) -> list[int]:
    """The processes of process group ``group`` and all their descendants, in groups of their own or not
    (PySpark's daemon, which an executor starts, makes a group of its own for itself and its Python workers)."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [pid for pid, (_, pgid) in table.items() if pgid == group]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.append(pid)
            stack.extend(children.get(pid, []))
    return found


def _python(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().startswith("python")
    except OSError:
        return False


class SparkStandaloneCluster:
    """A Spark standalone master and workers of 1 core each; ``url`` is the master's ``spark://`` URL."""

    def __init__(
        self, directory: Path, workers: int = 2, worker_memory: str = "1g", hosts: NetworkHosts | None = None
    ) -> None:
        """On loopback; or, given ``hosts``, the master on host ``master`` and worker *i* on host ``worker<i>``."""
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.directory, self.worker_memory, self.hosts = Path(directory), worker_memory, hosts
        self.host = hosts.ip("master") if hosts else "127.0.0.1"
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://{self.host}:{self.port}"
        self.env = {**os.environ, "SPARK_HOME": str(self.home)}
        self.env.pop("SPARK_CONF_DIR", None)
        master = ["org.apache.spark.deploy.master.Master", "--host", self.host, "--port", str(self.port)]
        self.master = self._spawn("master", [*master, "--webui-port", str(self.ui_port)], "master")
        wait_for_port(self.port, self.master, "Spark master", timeout=60, host=self.host)
        # Its web UI too, before any worker starts: a port only picked, not yet bound, could go to another.
        wait_for_port(self.ui_port, self.master, "Spark master's web UI", timeout=60, host=self.host)
        self.workers: list[subprocess.Popen] = []
        self.work_dirs: list[Path] = []
        self.worker_hosts: list[str] = []  # the host each worker runs on (``worker<i>`` without NetworkHosts)
        for _ in range(workers):
            self.add_worker()

    def _spawn(self, name: str, args: list[str], host: str | None = None) -> subprocess.Popen:
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it until it stops
        command = [str(self.home / "bin" / "spark-class"), *args]
        ip = "127.0.0.1"
        if self.hosts is not None:
            command, ip = self.hosts.command(host, command), self.hosts.ip(host)
        process = subprocess.Popen(
            command,
            env={**self.env, "SPARK_LOCAL_IP": ip},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return process

    def add_worker(self, host: str | None = None) -> int:
        """Start one more worker (1 core), on ``host`` (default ``worker<index>``); its index. Returns once the
        master counts it alive."""
        index = len(self.workers)
        host = host or f"worker{index}"
        work_dir = self.directory / f"worker-{index}"
        work_dir.mkdir()
        ip = self.hosts.ip(host) if self.hosts else "127.0.0.1"
        args = ["org.apache.spark.deploy.worker.Worker", self.url, "--host", ip, "--cores", "1"]
        args += ["--memory", self.worker_memory, "--work-dir", str(work_dir), "--webui-port", "0"]  # any free port
        known = self._alive_ids()  # a worker just killed may still be among them for a moment
        process = self._spawn(f"worker-{index}", args, host)
        self.workers.append(process)
        self.work_dirs.append(work_dir)
        self.worker_hosts.append(host)
        deadline = time.monotonic() + 60
        while not self._alive_ids() - known:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Spark worker {index} on {ip} did not register with the master: {work_dir}")
            time.sleep(0.2)
        return index

    def _alive_ids(self) -> set[str]:
        try:
            return {w["id"] for w in self.state()["workers"] if w["state"] == "ALIVE"}
        except (OSError, ValueError):
            return set()

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://{self.host}:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def alive(self) -> int:
        try:
            return sum(w["state"] == "ALIVE" for w in self.state()["workers"])
        except (OSError, ValueError):  # not serving yet, or not yet its JSON (a page while it starts)
            return 0

    def running(self) -> list[int]:
        """The indexes of the workers whose process is still running."""
        return [i for i, process in enumerate(self.workers) if process.poll() is None]

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executor and Python workers."""
        self.signal_worker(index, signal.SIGKILL)
        self.workers[index].wait()

    def signal_worker(self, index: int, signum: int) -> None:
        """Send ``signum`` to worker ``index``, its executor and its Python workers (SIGSTOP pauses them all)."""
        for pid in process_tree(self.workers[index].pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def python_workers(self, index: int) -> list[int]:
        """The Python worker processes of worker ``index``'s executor: those PySpark's daemon forked."""
        table = _processes()
        tree = process_tree(self.workers[index].pid)
        return sorted(pid for pid in tree if _python(pid) and _python(table.get(pid, (0, 0))[0]))

    def tasks_run_by(self, index: int) -> int:
        """Tasks the executors of worker ``index`` started, from their own logs."""
        return sum(p.read_text(errors="replace").count("Running task") for p in self.work_dirs[index].rglob("stderr"))

    def stop(self) -> None:
        for index, process in enumerate(self.workers):
            if process.poll() is None:
                self.signal_worker(index, signal.SIGCONT)  # a paused worker stops too
        for process in [*self.workers, self.master]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in [*self.workers, self.master]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
