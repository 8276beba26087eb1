"""Settings that reach Spark, checkpoints where the user says, the executor check, bounded statistics, and
Storm's topology context."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from servers import free_port

from squall import BasicBolt, Fields, Spout, TopologyBuilder
from squall.cluster import is_local_path
from squall.model.errors import SquallError
from squall.model.groupings import FieldsGrouping, ShuffleGrouping
from squall.model.topology import GlobalStreamId, TopologyContext
from squall.runner import parse_spark_pairs
from squall.spark.context import spark_conf
from squall.testing import FeederSpout, TestCluster


def squall_run(tmp_path: Path, source: str, *args: str, env: dict | None = None, timeout: float = 300):
    """``squall run`` on a topology file written from ``source``, from ``tmp_path``; (exit code, stdout, stderr)."""
    path = tmp_path / "topology.py"
    path.write_text(textwrap.dedent(source))
    result = subprocess.run(
        [sys.executable, "-m", "squall.cli", "run", str(path), *args],
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result.returncode, result.stdout, result.stderr


IDLE_TOPOLOGY = """
    from squall import BasicBolt, Spout, TopologyBuilder

    class Quiet(Spout):
        outputs = ("n",)

    class Sink(BasicBolt):
        def execute(self, tup, collector):
            pass

    def build_topology(conf):
        b = TopologyBuilder()
        b.set_spout("quiet", Quiet())
        b.set_bolt("sink", Sink()).shuffle_grouping("quiet")
        return b.build()
"""


# -- Spark settings ---------------------------------------------------------------------------
def test_local_mode_binds_to_loopback_and_a_cluster_master_leaves_it_to_spark():
    local = dict(spark_conf("local[2]", "app").getAll())
    assert local["spark.driver.host"] == "127.0.0.1" and local["spark.driver.bindAddress"] == "127.0.0.1"
    assert local["spark.master"] == "local[2,4]" and local["spark.ui.enabled"] == "false"
    one_machine = dict(spark_conf("local-cluster[2,1,1024]", "app").getAll())
    assert one_machine["spark.driver.host"] == "127.0.0.1" and one_machine["spark.master"] == "local-cluster[2,1,1024]"
    remote = dict(spark_conf("spark://10.1.2.3:7077", "app").getAll())
    assert "spark.driver.host" not in remote and "spark.driver.bindAddress" not in remote
    assert remote["spark.master"] == "spark://10.1.2.3:7077"


def test_user_spark_settings_override_squalls_defaults():
    conf = dict(
        spark_conf("local[2]", "app", {"spark.driver.host": "10.0.0.5", "spark.executor.cores": 2}, True).getAll()
    )
    assert conf["spark.driver.host"] == "10.0.0.5" and conf["spark.executor.cores"] == "2"
    assert conf["spark.ui.enabled"] == "true"


def test_spark_conf_pairs_are_parsed_as_spark_submit_does():
    assert parse_spark_pairs(["spark.a=1", "spark.b=x=y"]) == {"spark.a": "1", "spark.b": "x=y"}
    with pytest.raises(SquallError, match=re.escape("--spark-conf expects key=value, got 'spark.a'")):
        parse_spark_pairs(["spark.a"])


def test_bad_spark_settings_are_refused_naming_the_key():
    from squall.model.config import check_config

    with pytest.raises(SquallError, match=re.escape("'squall.spark.conf' must be a dict of Spark config keys")):
        check_config({"squall.spark.conf": {"spark.executor.cores": [2]}})
    with pytest.raises(SquallError, match=re.escape("'squall.spark.ui' must be a bool")):
        check_config({"squall.spark.ui": "yes"})


def test_squall_run_passes_spark_conf_through_and_serves_sparks_ui_on_request(tmp_path):
    port = free_port()
    path = tmp_path / "topology.py"
    path.write_text(textwrap.dedent(IDLE_TOPOLOGY))
    args = [sys.executable, "-m", "squall.cli", "run", str(path), "--duration", "60", "--idle-secs", "0"]
    args += ["--conf", "squall.spark.ui=true", "--spark-conf", f"spark.ui.port={port}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    driver = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        announced = next((line for line in driver.stdout if line.startswith("Spark UI at ")), "")
        assert announced.strip() == f"Spark UI at http://127.0.0.1:{port}"  # the setting reached the SparkConf
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/", timeout=10) as response:
            assert "Spark Jobs" in response.read().decode()
        assert listening_addresses(port) == {"127.0.0.1"}  # loopback only, in local mode
    finally:
        driver.send_signal(signal.SIGINT)  # Ctrl-C: squall run stops cleanly
        driver.communicate(timeout=60)
    assert driver.returncode == 0


def listening_addresses(port: int) -> set[str]:
    """The addresses TCP servers listen on at ``port`` (IPv4 and IPv6), from /proc/net."""
    import ipaddress

    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) != port or state != "0A":
                continue
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
            ip = ipaddress.ip_address(raw)
            mapped = getattr(ip, "ipv4_mapped", None)
            found.add(str(mapped or ip))
    return found


# -- failures no retry can fix, as squall run shows them -----------------------------------
def test_squall_run_stops_loudly_on_a_prepare_that_always_raises(tmp_path):
    source = """
        from squall import BasicBolt, Spout, TopologyBuilder

        class Once(Spout):
            outputs = ("n",)

            def open(self, conf, context, collector):
                self.collector, self.sent = collector, False

            def next_tuple(self):
                if not self.sent:
                    self.sent = True
                    self.collector.emit([1], msg_id=1)

        class NeedsDatabase(BasicBolt):
            def prepare(self, conf, context):
                raise ConnectionRefusedError("database refused the connection")

            def execute(self, tup, collector):
                pass

        def build_topology(conf):
            b = TopologyBuilder()
            b.set_spout("once", Once())
            b.set_bolt("needs-db", NeedsDatabase()).shuffle_grouping("once")
            return b.build()
    """
    code, _, err = squall_run(tmp_path, source, "--idle-secs", "0", "--duration", "120")
    assert code == 1
    assert "topology 'topology' stopped: component 'needs-db' task 1: prepare() raised: ConnectionRefusedError" in err


# -- the executor check -------------------------------------------------------------------------
def test_executors_with_another_squall_are_refused_with_what_to_do(tmp_path):
    other = tmp_path / "elsewhere" / "squall"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text('__version__ = "0.0.0-elsewhere"\n')
    python = tmp_path / "executor-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{other.parent}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    code, _, err = squall_run(
        tmp_path, IDLE_TOPOLOGY, "--idle-secs", "1", "--spark-conf", f"spark.pyspark.python={python}"
    )
    assert code == 1
    import squall

    assert (
        f"executors import squall 0.0.0-elsewhere ({sys.executable}) but the driver runs squall {squall.__version__}"
        in err
    )
    assert "spark.archives" in err and "spark.pyspark.python" in err


# -- checkpoints ----------------------------------------------------------------------------------
class Count(BasicBolt):
    outputs = ("word", "n")

    def prepare(self, conf, context):
        self.n = 0

    def execute(self, tup, collector):
        self.n += 1
        collector.emit([tup[0], self.n])


def _count_topology(feeder):
    b = TopologyBuilder()
    b.set_spout("words", feeder)
    b.set_bolt("count", Count(), 2).shuffle_grouping("words")
    return b.build()


def test_checkpoints_go_to_the_url_the_user_gives(spark, tmp_path):
    where = tmp_path / "checkpoints"
    conf = {"squall.checkpoint.dir": where.as_uri()}
    with TestCluster(conf) as cluster:
        feeder = FeederSpout(["word"])
        run = cluster.submit_topology("ck", {}, _count_topology(feeder))
        for word in "abcd":
            feeder.feed([word])
        cluster.advance_time(5)  # past squall.snapshot.interval.ms: the tasks write their snapshots
        assert feeder.acked and not feeder.failed
        snapshots = {p.name for p in (where / run.run_id / "snapshots").rglob("task-*")}
        assert snapshots == {"task-1", "task-2"}  # each bolt task's, under the given URL
    assert where.is_dir() and not (where / run.run_id).exists()  # the run's own go with it; the directory stays


def test_local_mode_checkpoints_default_to_a_directory_the_cluster_removes(spark):
    with TestCluster() as cluster:
        owned = Path(cluster.sc.getCheckpointDir().removeprefix("file:")).parent
        assert owned.is_dir() and owned.name.startswith("squall-checkpoints-")
    assert not owned.exists()


def test_local_paths_and_urls_are_told_apart():
    assert is_local_path("/data/ck") and is_local_path("file:///data/ck") and is_local_path("ck")
    assert not is_local_path("hdfs://nn:8020/ck") and not is_local_path("s3a://bucket/ck")


# -- bounded statistics -------------------------------------------------------------------------
class Numbers(Spout):
    outputs = ("n",)

    def __init__(self, total: int) -> None:
        self.total = total

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0

    def next_tuple(self):
        if self.next < self.total:
            self.collector.emit([self.next], msg_id=self.next)
            self.next += 1


class Drop(BasicBolt):
    def execute(self, tup, collector):
        pass


def deep_size(root: object) -> int:
    """Bytes held by ``root`` and everything it references (ctypes buffers counted whole), classes excluded."""
    import ctypes
    import gc
    import types

    seen, stack, total = set(), [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj) + (ctypes.sizeof(obj) if isinstance(obj, ctypes.Array) else 0)
        stack.extend(gc.get_referents(obj))
    return total


def test_latency_statistics_stay_the_same_size_through_a_million_acked_tuples(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(1_000_000))
    b.set_bolt("drop", Drop(), 2).shuffle_grouping("numbers")
    run = cluster.submit_topology("million", {}, b.build())
    stats = run.stats.of("numbers")
    while stats.acked < 100_000:
        run.step()
    early_acked, early_count, early_bytes = stats.acked, stats.latency_count, deep_size(run.stats)
    cluster.wait_idle()
    late_bytes = deep_size(run.stats)
    assert early_count == early_acked and stats.acked == stats.latency_count == 1_000_000
    assert late_bytes - early_bytes < 1024  # ten times the tuples, the same size (a list of floats: +32 MB)
    assert stats.latency_percentile(50) is not None
    print(f"\nrun statistics: {early_bytes:,} bytes at {early_count:,} acks, {late_bytes:,} at 1,000,000")


# -- Storm's topology context --------------------------------------------------------------------
def test_topology_context_answers_storms_questions():
    b = TopologyBuilder()
    b.set_spout("gender", FeederSpout(["id", "gender"]))
    b.set_spout("age", FeederSpout(["id", "age"]))
    b.set_bolt("join", Count(), 3).fields_grouping("gender", Fields("id")).shuffle_grouping("age")
    b.set_bolt("after", Count()).shuffle_grouping("join")
    topology = b.build()
    join_tasks = topology.task_ids("join")
    context = TopologyContext(topology, "join", join_tasks[2])
    assert context.get_this_task_index() == 2
    sources = context.get_this_sources()
    assert set(sources) == {GlobalStreamId("gender", "default"), GlobalStreamId("age", "default")}
    assert isinstance(sources[GlobalStreamId("gender", "default")], FieldsGrouping)
    assert isinstance(sources[GlobalStreamId("age", "default")], ShuffleGrouping)
    targets = context.get_this_targets()
    assert set(targets) == {"default"} and set(targets["default"]) == {"after"}
    assert list(context.get_component_output_fields("gender", "default")) == ["id", "gender"]
    assert list(context.get_component_output_fields("age")) == ["id", "age"]
    with pytest.raises(KeyError, match="component 'age' declares no stream 'other'"):
        context.get_component_output_fields("age", "other")
    with pytest.raises(KeyError, match="no component 'nope'"):
        context.get_component_output_fields("nope", "default")


class ThreeWords(Spout):
    outputs = ("word",)

    def open(self, conf, context, collector):
        self.collector, self.left = collector, ["a", "b", "c"]

    def next_tuple(self):
        if self.left:
            word = self.left.pop()
            self.collector.emit([word], msg_id=word)


class Echo(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        collector.emit([tup[0]])


def _hold_cores(sc, seconds: float) -> None:
    sc.setJobGroup("hold-the-cores", "every core busy, as a killed driver's executors keep theirs for a while")
    sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).foreach(lambda _: time.sleep(seconds))


def test_a_run_whose_workers_wait_for_cores_is_not_idle(spark):
    """``squall run --idle-secs`` stops a topology that has been idle that long; a run whose workers are still
    waiting for a free core has not begun, and must not be stopped as idle."""
    from squall import LocalCluster

    b = TopologyBuilder()
    b.set_spout("words", ThreeWords())
    b.set_bolt("echo", Echo(), 2).shuffle_grouping("words")
    with LocalCluster() as cluster:
        holder = threading.Thread(target=_hold_cores, args=(spark, 6.0))
        holder.start()
        while not spark.statusTracker().getActiveStageIds():
            time.sleep(0.05)
        run = cluster.submit_topology("waiting", {}, b.build())
        samples = 0
        while holder.is_alive():
            if not run.scheduler.ready:
                samples += 1
                assert run.idle_for() == 0.0
            time.sleep(0.2)
        holder.join()
        assert samples > 0  # the workers did wait for the cores
        deadline = time.monotonic() + 60
        while run.stats.of("words").acked < 3:
            assert time.monotonic() < deadline, "the run did not start once the cores were free"
            time.sleep(0.05)


class CollectorSettings(BasicBolt):
    """Emits what the garbage collector of the worker it runs in is set to."""

    outputs = ("threshold", "frozen")

    def execute(self, tup, collector):
        import gc

        collector.emit([gc.get_threshold()[0], gc.get_freeze_count() > 0])


@pytest.mark.parametrize(
    ("setting", "seen"),
    [
        ({}, (50_000, True)),
        ({"squall.worker.gc.threshold": 20_000}, (20_000, True)),
        ({"squall.worker.gc.threshold": None}, (700, False)),
    ],
)
def test_workers_run_with_the_collector_threshold_of_the_config(cluster, setting, seen):
    feeder = FeederSpout(["n"])
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    b.set_bolt("gc", CollectorSettings()).shuffle_grouping("numbers")
    run = cluster.submit_for_capture(f"gc-{len(setting)}", setting, b.build())
    feeder.feed([1], 1)
    cluster.wait_idle()
    assert run.captured["gc"] == [seen]
    assert feeder.acked == {1}


def test_a_collector_threshold_below_one_is_refused_naming_the_key(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", FeederSpout(["n"]))
    b.set_bolt("gc", CollectorSettings()).shuffle_grouping("numbers")
    with pytest.raises(SquallError, match=re.escape("squall.worker.gc.threshold")):
        cluster.submit_topology("gc-bad", {"squall.worker.gc.threshold": 0}, b.build())
