"""Real servers for tests: started on a free loopback port in a temporary directory, stopped after.

Where a server's binary is missing, the test is skipped with the reason, except
under CI (``CI`` set), where a missing server is a failure.
"""

from __future__ import annotations

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

from squall.connectors.local_redis import LocalRedisServer
from squall.spark.network_hosts import NetworkHosts as _NetworkHosts
from squall.spark.standalone import SparkStandaloneCluster, free_port, wait_for_port

__all__ = ["SparkStandaloneCluster", "free_port", "wait_for_port"]


def require(binary: str, package: str) -> str:
    """The path of ``binary`` (a command name, or a path that may hold a glob)."""
    path = shutil.which(binary) if "/" not in binary else next(iter(sorted(glob.glob(binary))), None)
    if path is None:
        message = f"{binary} is not installed (Debian package {package})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run every server test")
        pytest.skip(message)
    return path


class RedisServer(LocalRedisServer):
    """squall's ``LocalRedisServer``; ``persistent`` keeps an append-only file, so that a restart keeps the data."""

    def __init__(self, directory: Path, persistent: bool = False) -> None:
        require("redis-server", "redis-server")
        super().__init__(directory, persistent)


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


def KafkaServer(directory: Path, **options):
    """squall's ``LocalKafkaBroker``: Apache Kafka in KRaft mode on free loopback ports, its log in ``directory``
    (``options``: the broker's, as ``scram_users``). Its jars come from Maven Central once
    (``scripts/ensure-kafka.sh``, cached outside the work tree)."""
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
    return LocalKafkaBroker(directory, **options)


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


class NetworkHosts(_NetworkHosts):
    """squall's ``NetworkHosts``; where they cannot be made, the test is skipped (under CI: it fails)."""

    def __init__(self, names: list[str]) -> None:
        reason = _NetworkHosts.unavailable()
        if reason is not None:
            if os.environ.get("CI"):
                pytest.fail(f"{reason}; CI must run the multi-host test")
            pytest.skip(reason)
        super().__init__(names)


def wait_for(condition, what: str, timeout: float = 120.0, process=None) -> None:
    """Until ``condition()`` holds; fails naming ``what`` after ``timeout`` seconds, or at once when ``process``
    (a ``Popen``) has ended."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert process is None or process.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.05)


def driver_end_of_a_worker_channel(keys):
    """A listening socket that plays the driver's hub for one ``WorkerChannel``: it runs the hub's side of the link
    handshake. Returns ``(address, finish)``; ``finish()`` (once the channel is made) gives the accepted
    connection, its read stream and its session."""
    import socket
    import threading

    from squall.security.handshake import server_handshake

    server = socket.create_server(("127.0.0.1", 0))
    accepted: dict = {}

    def accept() -> None:
        connection, _ = server.accept()
        stream = connection.makefile("rb")
        accepted["end"] = (connection, stream, server_handshake(stream.read, connection.sendall, keys))

    thread = threading.Thread(target=accept)
    thread.start()

    def finish():
        thread.join(timeout=30)
        server.close()
        return accepted["end"]

    return server.getsockname(), finish
