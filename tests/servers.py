"""Real servers for tests: started on a free loopback port in a temporary directory, stopped after.

Where a server's binary is missing, the test is skipped with the reason, except
under CI (``CI`` set), where a missing server is a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require(binary: str, package: str) -> str:
    """The path of ``binary`` (a command name, or a path that may hold a glob)."""
    path = shutil.which(binary) if "/" not in binary else next(iter(sorted(glob.glob(binary))), None)
    if path is None:
        message = f"{binary} is not installed (Debian package {package})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run every server test")
        pytest.skip(message)
    return path


def wait_for_port(
    port: int, process: subprocess.Popen, what: str, timeout: float = 30.0, host: str = "127.0.0.1"
) -> None:
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


class RedisServer:
    """``persistent`` keeps an append-only file, so that a restart keeps the data."""

    def __init__(self, directory: Path, persistent: bool = False) -> None:
        self.binary = require("redis-server", "redis-server")
        self.directory, self.persistent = directory, persistent
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always"]
        args += ["--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "redis-server")

    def stop(self, kill: bool = False) -> None:
        """Stop the server: SIGTERM, or SIGKILL with ``kill``."""
        if self.process.poll() is None:
            self.process.kill() if kill else self.process.terminate()
            self.process.wait(timeout=30)


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: run its commands as the postgres user then."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PostgresServer:
    """A fresh cluster (``initdb``), trust auth, on a free loopback port, in a directory of its own
    under the system temp dir (pytest's are private to root, and the server runs as postgres then).
    ``close()`` stops it and removes the directory."""

    def __init__(self) -> None:
        initdb = require("/usr/lib/postgresql/*/bin/initdb", "postgresql")
        self.bin = Path(initdb).parent
        self.directory = Path(tempfile.mkdtemp(prefix="squall-postgres-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")
        subprocess.run(
            [*_as_postgres_user(), initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"],
            check=True,
            capture_output=True,
        )
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} -c fsync=off"
        log = str(self.directory / "postgres.log")
        subprocess.run(
            [*_as_postgres_user(), str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "start"],
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        subprocess.run(
            [*_as_postgres_user(), str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
            capture_output=True,
        )

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class ZooKeeperServer:
    """A standalone ZooKeeper (Debian's zookeeper package) with its data in ``directory``."""

    JAR = "/usr/share/java/zookeeper.jar"

    def __init__(self, directory: Path) -> None:
        require(self.JAR, "zookeeper")
        self.java = require("java", "openjdk-17-jre-headless")
        self.directory = directory
        self.port = free_port()
        self.url = f"zookeeper://127.0.0.1:{self.port}"
        self.config = directory / "zoo.cfg"
        (directory / "data").mkdir(exist_ok=True)
        self.config.write_text(
            f"dataDir={directory / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "tickTime=500\nadmin.enableServer=false\n"
        )
        self.start()

    def start(self) -> None:
        args = [self.java, "-cp", f"/etc/zookeeper/conf:{self.JAR}", "-Dzookeeper.root.logger=WARN,CONSOLE"]
        args += ["org.apache.zookeeper.server.ZooKeeperServerMain", str(self.config)]
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 - the server process holds it
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory)
        log.close()
        wait_for_port(self.port, self.process, "zookeeper")
        self._wait_serving()

    def _wait_serving(self, timeout: float = 30.0) -> None:
        """Until it serves, not just accepts: ZooKeeper drops a session handshake that comes while it starts."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    s.sendall(b"srvr")
                    if b"Mode:" in b"".join(iter(lambda: s.recv(4096), b"")):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"zookeeper on 127.0.0.1:{self.port} did not serve within {timeout}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def KafkaServer(directory: Path):
    """squall's ``LocalKafkaBroker``: Apache Kafka in KRaft mode on free loopback ports, its log in ``directory``.
    Its jars come from Maven Central once (``scripts/ensure-kafka.sh``, cached outside the work tree)."""
    from squall.connectors.kafka.local_broker import KAFKA_VERSION, LocalKafkaBroker, kafka_home

    require("java", "openjdk-17-jre-headless")
    home = kafka_home()
    if not (home / ".complete").exists() and shutil.which("mvn"):
        script = Path(__file__).parent.parent / "scripts" / "ensure-kafka.sh"
        subprocess.run(["bash", str(script)], check=True, env={**os.environ, "KAFKA_VERSION": KAFKA_VERSION})
    if not (home / ".complete").exists():
        message = f"Kafka's jars are not in {home} (scripts/ensure-kafka.sh fetches them with Maven)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run every server test")
        pytest.skip(message)
    return LocalKafkaBroker(directory)


class RabbitMQServer:
    """A RabbitMQ node of its own (name, ports, Mnesia directory, no plugins) under ``directory``.

    Its data survives ``stop``/``start``, so durable queues and persistent messages do.
    """

    def __init__(self, directory: Path) -> None:
        self.binary = require("/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server")
        self.directory = directory
        self.port, self.dist_port = free_port(), free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        (directory / "plugins").write_text("[].\n")
        (directory / "env.conf").write_text("")
        (directory / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n"
        )
        self.env = {
            **os.environ,
            "HOME": str(directory),  # its Erlang cookie
            "RABBITMQ_NODENAME": f"squall-test-{self.port}@localhost",
            "RABBITMQ_CONF_ENV_FILE": str(directory / "env.conf"),
            "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "plugins"),
            "RABBITMQ_PID_FILE": str(directory / "rabbitmq.pid"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        self.start()

    def start(self) -> None:
        log = open(self.directory / "rabbitmq.out", "ab")  # noqa: SIM115 - the server process holds it
        self.process = subprocess.Popen(
            [self.binary], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        wait_for_port(self.port, self.process, "rabbitmq-server", timeout=90)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class SparkStandaloneCluster:
    """A Spark standalone master and workers of 1 core each, from the pyspark package's own ``bin/spark-class``.

    Each worker runs in a process group of its own, with its executor and Python workers, so
    ``kill_worker`` SIGKILLs a worker together with everything it runs.
    """

    def __init__(
        self, directory: Path, workers: int = 2, worker_memory: str = "1g", hosts: NetworkHosts | None = None
    ) -> None:
        """On loopback; or, given ``hosts``, the master on host ``master`` and worker *i* on host ``worker<i>``."""
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.directory, self.worker_memory, self.hosts = directory, worker_memory, hosts
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
        for _ in range(workers):
            self.add_worker()

    def _spawn(self, name: str, args: list[str], host: str | None = None) -> subprocess.Popen:
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it until it stops
        command = [str(self.home / "bin" / "spark-class"), *args]
        ip = "127.0.0.1"
        if self.hosts is not None:
            command, ip = self.hosts.command(host, command), self.hosts.ip(host)
        return subprocess.Popen(
            command,
            env={**self.env, "SPARK_LOCAL_IP": ip},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def add_worker(self) -> int:
        """Start one more worker (1 core); its index. Returns once the master counts it alive."""
        index = len(self.workers)
        work_dir = self.directory / f"worker-{index}"
        work_dir.mkdir()
        host = f"worker{index}"
        ip = self.hosts.ip(host) if self.hosts else "127.0.0.1"
        args = ["org.apache.spark.deploy.worker.Worker", self.url, "--host", ip, "--cores", "1"]
        args += ["--memory", self.worker_memory, "--work-dir", str(work_dir), "--webui-port", "0"]  # any free port
        self.workers.append(self._spawn(f"worker-{index}", args, host))
        self.work_dirs.append(work_dir)
        self.wait_alive(self.alive() + 1)
        return index

    def state(self) -> dict:
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://{self.host}:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def alive(self) -> int:
        try:
            return sum(w["state"] == "ALIVE" for w in self.state()["workers"])
        except (OSError, ValueError):  # not serving yet, or not yet its JSON (a page while it starts)
            return 0

    def wait_alive(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.alive() < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark master has {self.alive()} alive workers, not {count}")
            time.sleep(0.2)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executor and Python workers."""
        os.killpg(self.workers[index].pid, signal.SIGKILL)
        self.workers[index].wait()

    def tasks_run_by(self, index: int) -> int:
        """Tasks the executors of worker ``index`` started, from their own logs."""
        return sum(p.read_text(errors="replace").count("Running task") for p in self.work_dirs[index].rglob("stderr"))

    def stop(self) -> None:
        for process in [*self.workers, self.master]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in [*self.workers, self.master]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class NetworkHosts:
    """Hosts made of network namespaces on this machine (``ip netns``): each with its own interface, address
    and loopback, all joined by one bridge, as machines on one switch. The bridge has an address too, so this
    process reaches every host. What crosses a host's interface is counted by its end of the veth pair."""

    def __init__(self, names: list[str]) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            message = "network namespaces need root and iproute2's ip"
            if os.environ.get("CI"):
                pytest.fail(f"{message}; CI must run the multi-host test")
            pytest.skip(message)
        self._remove_stale()
        tag = os.getpid() % 100_000
        self.subnet = f"198.18.{tag % 250}"  # RFC 2544's benchmarking range: no real network uses it
        self.bridge = f"sqb{tag}"
        self._hosts = {
            name: (f"squall-{tag}-{name}", f"sq{tag}h{i}", f"{self.subnet}.{i + 2}") for i, name in enumerate(names)
        }
        try:
            self._ip("link", "add", self.bridge, "type", "bridge")
            self._ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            self._ip("link", "set", self.bridge, "up")
            for namespace, veth, address in self._hosts.values():
                self._ip("netns", "add", namespace)
                self._ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
                self._ip("link", "set", veth, "master", self.bridge, "up")
                self._ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
                self._ip("-n", namespace, "link", "set", "eth0", "up")
                self._ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    @staticmethod
    def _remove_stale() -> None:
        """Hosts a killed test run left behind (no process in them), and their bridges, which could hold the
        subnet this run picks."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
        for namespace in (line.split()[0] for line in listed if line.startswith("squall-")):
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
            if not pids.split():
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        bridges = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True)
        for bridge in (line.split(": ")[1].split("@")[0] for line in bridges.stdout.splitlines() if ": sqb" in line):
            ports = subprocess.run(["ip", "-o", "link", "show", "master", bridge], capture_output=True, text=True)
            if not ports.stdout.strip():
                subprocess.run(["ip", "link", "del", bridge], capture_output=True)

    def ip(self, name: str) -> str:
        return self._hosts[name][2]

    def command(self, name: str, args: list[str]) -> list[str]:
        """``args`` run on host ``name``."""
        return ["ip", "netns", "exec", self._hosts[name][0], *args]

    def bytes(self, name: str) -> int:
        """Bytes that crossed host ``name``'s interface, both ways."""
        statistics = Path("/sys/class/net") / self._hosts[name][1] / "statistics"
        return sum(int((statistics / f"{way}_bytes").read_text()) for way in ("rx", "tx"))

    def pids(self, name: str) -> list[int]:
        listed = subprocess.run(["ip", "netns", "pids", self._hosts[name][0]], capture_output=True, text=True)
        return [int(pid) for pid in listed.stdout.split()]

    def kill_all(self, name: str) -> int:
        """SIGKILL every process on host ``name``, as a machine that loses power; how many there were."""
        pids = self.pids(name)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def close(self) -> None:
        for name, (namespace, _, _) in self._hosts.items():
            self.kill_all(name)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def wait_for(condition, what: str, timeout: float = 120.0, process=None) -> None:
    """Until ``condition()`` holds; fails naming ``what`` after ``timeout`` seconds, or at once when ``process``
    (a ``Popen``) has ended."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert process is None or process.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.05)
