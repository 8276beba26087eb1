import atexit
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Shared machines are noisy: judge hypothesis examples by their outcome, not their speed.
settings.register_profile("squall", deadline=None)
settings.load_profile("squall")

# The Spark JVMs the tests start (drivers, and a standalone cluster's master, workers and executors) only schedule
# work and carry control messages: with C1 alone and the serial collector each starts a second or two sooner, which
# the suite's many driver (re)starts add up. What squall does is the same either way.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", QUICK_JVM)
if "SPARK_CONF_DIR" not in os.environ:  # a standalone cluster's executors take theirs from the driver's defaults
    _conf_dir = Path(tempfile.mkdtemp(prefix="squall-tests-spark-conf-"))
    atexit.register(shutil.rmtree, _conf_dir, ignore_errors=True)
    (_conf_dir / "spark-defaults.conf").write_text(f"spark.executor.extraJavaOptions {QUICK_JVM}\n")
    os.environ["SPARK_CONF_DIR"] = str(_conf_dir)


def pytest_sessionstart(session):
    """A compiled per-tuple module older than its source would run the old code: refuse, and say how to fix."""
    import squall

    root = Path(squall.__file__).parent
    stale = [
        str(so.relative_to(root.parent))
        for so in root.rglob("*.so")
        for suffix in (".py", ".pyx", ".pxd")
        if (source := so.with_name(so.name.split(".", 1)[0] + suffix)).exists()
        and source.stat().st_mtime > so.stat().st_mtime
    ]
    if stale:
        raise pytest.UsageError(f"compiled modules older than their sources: {stale}; run `make setup` to rebuild")


@pytest.fixture(scope="session")
def spark():
    """One SparkContext (local mode, 2 cores) shared by every runtime test."""
    from squall.spark.context import spark_context

    sc, _ = spark_context("local[2]", app_name="squall-tests")
    yield sc
    sc.stop()


@pytest.fixture
def cluster(spark):
    from squall.testing import TestCluster

    with TestCluster() as c:
        yield c


@pytest.fixture(autouse=True)
def _quiet_py4j():
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def redis_server(tmp_path_factory):
    from servers import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rabbitmq_server(tmp_path_factory):
    """One RabbitMQ node for the session; each test uses queues of its own."""
    from servers import RabbitMQServer

    server = RabbitMQServer(tmp_path_factory.mktemp("rabbitmq"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL cluster for the session; each test uses tables of its own."""
    from servers import PostgresServer

    server = PostgresServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory):
    """One Kafka broker for the session; each test uses topics and groups of its own."""
    from servers import KafkaServer

    server = KafkaServer(tmp_path_factory.mktemp("kafka"))
    yield server
    server.stop()


@pytest.fixture
def zookeeper_server(tmp_path_factory):
    from servers import ZooKeeperServer

    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    yield server
    server.stop()
