"""Kafka through faults: a Spark worker and the driver SIGKILLed, the broker SIGKILLed and started again.

Each test prints its figures (``pytest -s`` shows them; docs/connectors.md quotes them).
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from drivers import wait, whole_lines
from servers import KafkaServer, SparkStandaloneCluster

from squall import BasicBolt, TopologyBuilder
from squall.connectors.kafka import KafkaSpout, committed_offsets, create_topic, end_offsets, produce
from squall.testing import TestCluster

ROOT = Path(__file__).parent.parent
MESSAGES = 200_000
WORDS = ["cat", "dog", "emu", "fox", "gnu", "hen", "owl", "yak"]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    yield cluster
    cluster.stop()


def sentences(seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [{"id": i, "sentence": " ".join(rnd.choices(WORDS, k=rnd.randint(1, 3)))} for i in range(MESSAGES)]


def counted(out: Path) -> list[tuple[int, str]]:
    return [
        (int(msg), word)
        for path in out.glob("counted-*.log")
        for line in whole_lines(path)
        for msg, word in [line.split(" ")]
    ]


def messages_counted(out: Path) -> int:
    return len({msg for msg, _ in counted(out)})


def test_kafka_word_count_survives_a_worker_kill_and_a_driver_kill(kafka_server, standalone, tmp_path):
    """200,000 messages in a 4-partition topic, 2 spout tasks, ``squall run`` on a standalone cluster of two
    1-core workers: a Spark worker SIGKILLed mid-run, later the driver; the group's committed offsets end at each
    partition's end, and no word of any message is counted less than it occurs."""
    while standalone.alive() < 2:
        standalone.add_worker()
    seed = random.randrange(10_000)
    messages = sentences(seed)
    topic = f"crash-words-{seed}"
    create_topic(kafka_server.servers, topic, 4)
    started = time.monotonic()
    produce(kafka_server.servers, topic, messages, partitions=4)
    produced = time.monotonic() - started
    out = tmp_path / "out"
    out.mkdir()
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "tests" / "broker_word_count.py")]
    args += ["--master", standalone.url, "--idle-secs", "5", "--spark-conf", "spark.task.maxFailures=8"]
    args += ["--conf", "squall.worker.replace.timeout.secs=2"]  # no spare core: go on on the survivor at once
    for key, value in {
        "test.source": "kafka",
        "test.queue": topic,
        "test.out": out,
        "squall.kafka.bootstrap.servers": kafka_server.servers,
    }.items():
        args += ["--conf", f"{key}={value}"]
    rnd = random.Random(seed)
    worker_kill_at, driver_kill_at = rnd.randint(20_000, 60_000), rnd.randint(90_000, 140_000)

    def run_driver(index: int):
        log = open(tmp_path / f"driver-{index}.log", "w")  # noqa: SIM115 - the driver writes it
        return subprocess.Popen(args, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    driver = run_driver(1)
    try:
        wait(lambda: messages_counted(out) >= worker_kill_at, driver, "progress before the worker kill")
        victim = next(i for i, p in enumerate(standalone.workers) if p.poll() is None)
        standalone.kill_worker(victim)
        wait(lambda: messages_counted(out) >= driver_kill_at, driver, "progress after the worker kill")
        standalone.add_worker()
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        driver = run_driver(2)
        driver.wait(timeout=900)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 0, (tmp_path / "driver-2.log").read_text()[-5000:]

    assert committed_offsets(kafka_server.servers, "word-count", topic) == end_offsets(kafka_server.servers, topic)
    got: dict[int, Counter] = {}
    for msg, word in counted(out):
        got.setdefault(msg, Counter())[word] += 1
    assert len(got) == MESSAGES
    twice = 0
    for m in messages:
        exact, seen = Counter(m["sentence"].split()), got[m["id"]]
        assert set(seen) == set(exact) and all(seen[w] >= n for w, n in exact.items()), (m, seen)
        twice += seen != exact
    print(
        f"\nkafka at-least-once: seed={seed} messages={MESSAGES} partitions=4 spout_tasks=2 produce={produced:.1f}s"
        f" worker_killed_after={worker_kill_at} driver_killed_after={driver_kill_at}"
        f" messages_counted_more_than_once={twice} total={time.monotonic() - started:.0f}s"
    )


class Record(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def test_a_broker_killed_and_started_again_mid_run_loses_nothing(spark, tmp_path):
    broker = KafkaServer(tmp_path / "kafka")
    try:
        topic, group, total = "restart", "restart-group", 20_000
        create_topic(broker.servers, topic, 2)
        produce(broker.servers, topic, list(range(total)), partitions=2)
        spout = KafkaSpout(topic, broker.servers, group, fields=["n"], offset_commit_period_ms=200)
        b = TopologyBuilder()
        b.set_spout("kafka", spout)
        b.set_bolt("sink", Record(), 2).shuffle_grouping("kafka")
        conf = {"topology.max.spout.pending": 500, "squall.wave.spout.batch": 500}
        with TestCluster() as cluster:
            run = cluster.submit_for_capture("broker-restart", conf, b.build())
            stats = run.stats.of("kafka")
            while stats.acked < total // 3:
                run.step()
            acked_at_kill = stats.acked
            broker.kill()
            for _ in range(5):  # the spout polls and commits with the broker away: nothing raises, nothing is lost
                run.step()
            broker.start()
            deadline = time.monotonic() + 180
            while stats.acked < total:
                assert time.monotonic() < deadline, f"{stats.acked} of {total} acked after the broker came back"
                run.step()
            cluster.kill_topology("broker-restart")
        emitted = Counter(n for (n,) in run.captured["kafka"])
        assert set(emitted) == set(range(total))  # every record emitted, at least once
        assert (
            committed_offsets(broker.servers, group, topic)
            == end_offsets(broker.servers, topic)
            == {
                0: total // 2,
                1: total // 2,
            }
        )
        print(
            f"\nkafka broker restart: records={total} acked_at_kill={acked_at_kill}"
            f" emitted_twice={sum(1 for n in emitted.values() if n > 1)}"
        )
    finally:
        broker.stop()
