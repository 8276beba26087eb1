"""A single-node Apache Kafka for development, benchmarks and tests: KRaft mode, one process acting as broker and
controller, on free loopback ports, with its log in a directory of its own.

Its jars are Apache Kafka's own (``org.apache.kafka:kafka_2.13`` with its runtime dependencies), fetched once from
Maven Central by ``scripts/ensure-kafka.sh`` into ``~/.cache/squall/kafka-<version>`` (or ``$SQUALL_KAFKA_HOME``).

With ``scram_users`` the broker serves SASL alone, as a secured production cluster does: its one listener is
``SASL_PLAINTEXT`` with ``SCRAM-SHA-256``, the users created when its log is formatted, and a client without
credentials gets nothing. ``client_config`` is then the librdkafka settings of its first user.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from squall.connectors.common import BrokerUnavailable
from squall.connectors.kafka.client import create_topic

KAFKA_VERSION = "4.4.0"
READY_TOPIC = "squall-broker-ready"


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    default = Path.home() / ".cache" / "squall" / f"kafka-{version}"
    return Path(os.environ.get("SQUALL_KAFKA_HOME", default))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SCRAM_MECHANISM = "SCRAM-SHA-256"
_BROKER_USER = "squall-broker"  # the broker's own SCRAM user, for its inter-broker listener


class LocalKafkaBroker:
    """``servers`` is its bootstrap address; ``client_config`` the librdkafka settings a client needs besides
    (empty unless ``scram_users``, ``{user: password}``, made it SASL/SCRAM only). ``kill`` SIGKILLs it;
    ``start`` again reuses the same log."""

    def __init__(
        self,
        directory: Path,
        version: str = KAFKA_VERSION,
        java: str = "java",
        scram_users: Mapping[str, str] | None = None,
    ) -> None:
        home = kafka_home(version)
        if not (home / ".complete").exists():
            raise FileNotFoundError(f"Kafka {version}'s jars are not in {home}: run scripts/ensure-kafka.sh")
        self.java = shutil.which(java) or java
        self.libs = f"{home / 'libs'}/*"
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = _free_port(), _free_port()
        self.servers = f"127.0.0.1:{self.port}"
        self.client_config: dict[str, str] = {}
        listener, security = "PLAINTEXT", ""
        users = dict(scram_users or {})
        if users:
            listener = "SASL_PLAINTEXT"
            broker_password = secrets.token_urlsafe(16)
            users[_BROKER_USER] = broker_password
            login = "org.apache.kafka.common.security.scram.ScramLoginModule required"
            security = (
                f"sasl.enabled.mechanisms={SCRAM_MECHANISM}\nsasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}\n"
                f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config={login}"
                f' username="{_BROKER_USER}" password="{broker_password}";\n'
            )
            user, password = next(iter(scram_users.items()))
            self.client_config = {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": user,
                "sasl.password": password,
            }
        self.config = self.directory / "server.properties"
        self.config.write_text(
            "process.roles=broker,controller\nnode.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}\n"
            f"listeners={listener}://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}\n"
            f"advertised.listeners={listener}://127.0.0.1:{self.port}\n"
            f"controller.listener.names=CONTROLLER\ninter.broker.listener.name={listener}\n"
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{listener}:{listener}\n"
            f"{security}"
            f"log.dirs={self.directory / 'log'}\n"
            "num.partitions=1\noffsets.topic.replication.factor=1\noffsets.topic.num.partitions=4\n"
            "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
            "transaction.state.log.num.partitions=4\ngroup.initial.rebalance.delay.ms=0\n"
            "auto.create.topics.enable=false\n"
        )
        storage = [self.java, "-cp", self.libs, "kafka.tools.StorageTool"]
        cluster_id = subprocess.run([*storage, "random-uuid"], capture_output=True, text=True, check=True)
        scram = [f"--add-scram={SCRAM_MECHANISM}=[name={u},password={p}]" for u, p in users.items()]
        format_log = subprocess.run(
            [*storage, "format", "-t", cluster_id.stdout.split()[-1], "-c", str(self.config), *scram],
            capture_output=True,
        )
        if format_log.returncode != 0:
            raise RuntimeError(f"formatting Kafka's log in {self.directory} failed: {format_log.stderr[-2000:]!r}")
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self, timeout: float = 90.0) -> None:
        log = open(self.directory / "kafka.log", "ab")  # noqa: SIM115 - the broker holds it
        args = [self.java, "-Xmx512m", "-XX:+UseSerialGC", "-cp", self.libs, "kafka.Kafka", str(self.config)]
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory)
        log.close()
        self._wait_serving(timeout)

    def _wait_serving(self, timeout: float) -> None:
        """Until a topic can be created and written and a group's offsets read: the broker accepts connections
        before it has a leader, and answers for groups only once it has loaded their offsets."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.process.returncode}; see {self.directory / 'kafka.log'}")
            try:
                create_topic(self.servers, READY_TOPIC, client_config=self.client_config)
                settings = {"bootstrap.servers": self.servers, **self.client_config}
                producer = Producer({**settings, "message.timeout.ms": 5000})
                producer.produce(READY_TOPIC, b"ready")
                if producer.flush(10) == 0:
                    probe = Consumer({**settings, "group.id": READY_TOPIC})
                    try:
                        probe.committed([TopicPartition(READY_TOPIC, 0)], timeout=10)
                        return
                    finally:
                        probe.close()
            except (KafkaException, BrokerUnavailable):  # not listening yet, or no leader yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kafka on {self.servers} did not serve within {timeout}s")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the broker."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LocalKafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
