"""A run never reports success over a failure: setup failures, the same error again and again, a missing Java and a
component that cannot travel to the workers each end the run visibly, with what went wrong.

Components are defined here, as users write them; ``squall run`` runs as a user runs it, in its own process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

import squall
from squall import BasicBolt, Spout, SquallError, TopologyBuilder, TopologyFailed
from squall.cluster import LocalCluster
from squall.spark.context import check_java, java_major
from squall.testing import FeederSpout, TestCluster
from squall.transactional import BatchBolt, MemoryTransactionalSpout, TransactionalTopologyBuilder

SQUALL_ROOT = Path(squall.__file__).resolve().parent.parent  # the squall under test, for python -m squall.cli


def squall_run(
    tmp_path: Path, source: str, *args: str, env: dict | None = None, timeout: float = 300, cwd: Path | None = None
):
    """``squall run`` on a topology file written from ``source``, from ``cwd`` (default ``tmp_path``); (exit code,
    stdout, stderr)."""
    path = tmp_path / "topology.py"
    path.write_text(textwrap.dedent(source))
    result = subprocess.run(
        [sys.executable, "-m", "squall.cli", "run", str(path), "--no-ui", *args],
        cwd=tmp_path if cwd is None else cwd,
        env=os.environ if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result.returncode, result.stdout, result.stderr


# -- squall run exits non-zero when the topology could not start, every time ------------------------------------
SLOW_FAILING_PREPARE = """
    import time

    from squall import BasicBolt, Spout, TopologyBuilder

    class Numbers(Spout):
        outputs = ("n",)

        def open(self, conf, context, collector):
            self.collector, self.n = collector, 0

        def next_tuple(self):
            if self.n < 3:
                self.n += 1
                self.collector.emit([self.n], msg_id=self.n)

    class NeedsDatabase(BasicBolt):
        def prepare(self, conf, context):
            time.sleep(2)  # a connection attempt that times out: longer than --idle-secs
            raise ConnectionRefusedError("database refused the connection")

        def execute(self, tup, collector):
            pass

    def build_topology(conf):
        b = TopologyBuilder()
        b.set_spout("numbers", Numbers())
        b.set_bolt("needs-db", NeedsDatabase()).shuffle_grouping("numbers")
        return b.build()
"""


def test_squall_run_exits_non_zero_every_time_a_prepare_always_raises(tmp_path):
    """The idle stop never comes before the tasks are up: a prepare() slower than --idle-secs that raises is a
    failure every time, with its traceback in the output (the run's errors, as the summary shows them)."""
    for _ in range(2):  # a race, if any, shows in one run of a few
        code, out, err = squall_run(
            tmp_path, SLOW_FAILING_PREPARE, "--idle-secs", "1", "--master", "local[1]", "--conf",
            "squall.wave.max.failures=1",
        )  # fmt: skip
        assert code == 1, (out, err)
        assert (
            "squall: topology 'topology' stopped: component 'needs-db' task 1: prepare() raised: "
            "ConnectionRefusedError: database refused the connection"
        ) in err
        assert "errors: 1; the last 1 distinct:" in out
        assert "Traceback (most recent call last):" in out
        assert 'raise ConnectionRefusedError("database refused the connection")' in out
        assert "summary" not in out  # no all-zero summary over a failure


FAILING_NEXT_TUPLE = """
    from squall import BasicBolt, Spout, TopologyBuilder

    class Gone(Spout):
        outputs = ("n",)

        def next_tuple(self):
            raise RuntimeError("the source is gone")

    class Sink(BasicBolt):
        def execute(self, tup, collector):
            pass

    def build_topology(conf):
        b = TopologyBuilder()
        b.set_spout("gone", Gone())
        b.set_bolt("sink", Sink()).shuffle_grouping("gone")
        return b.build()
"""


def test_squall_run_exits_non_zero_every_time_a_spouts_next_tuple_always_raises(tmp_path):
    """Errors are not idleness: the run goes on (longer than --idle-secs) until the same error has come
    squall.max.repeated.errors times in a row, then stops with its traceback and exit code 1."""
    for _ in range(2):  # a race, if any, shows in one run of a few
        code, out, err = squall_run(
            tmp_path, FAILING_NEXT_TUPLE, "--idle-secs", "0.5", "--master", "local[1]", "--conf",
            "squall.max.repeated.errors=20",
        )  # fmt: skip
        assert code == 1, (out, err)
        stopped = err[err.index("squall: topology 'topology' stopped: ") :]
        assert stopped.startswith(
            "squall: topology 'topology' stopped: component 'gone' task 1 raised the same error 20 times in a row "
            "with no progress in between (squall.max.repeated.errors is 20); the last one:\n"
            "Traceback (most recent call last):\n"
        )
        assert 'raise RuntimeError("the source is gone")' in stopped
        assert "\nRuntimeError: the source is gone\n" in stopped


# -- setup failures among the run's errors ---------------------------------------------------------------------
class NoDatabase(BasicBolt):
    outputs = ("word",)

    def prepare(self, conf, context):
        raise ConnectionRefusedError("database at 127.0.0.1:1 refused the connection")

    def execute(self, tup, collector):
        collector.emit([tup[0]])


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def test_a_prepare_that_raises_is_among_the_errors_rest_shows(spark):
    with TestCluster({"squall.ui.port": 0}) as cluster:
        feeder = FeederSpout(["word"])
        b = TopologyBuilder()
        b.set_spout("words", feeder)
        b.set_bolt("broken", NoDatabase()).shuffle_grouping("words")
        run = cluster.submit_topology("no-database", {"squall.wave.max.failures": 1}, b.build())
        feeder.feed(["a"])
        with pytest.raises(TopologyFailed, match="component 'broken' task 1: prepare\\(\\) raised"):
            cluster.wait_idle()
        detail = get_json(f"{cluster.ui.url}/api/v1/topology/no-database")
        (error,) = detail["errors"]
        assert (error["component"], error["task"]) == ("broken", 1)
        assert error["error"].startswith(
            "component 'broken' task 1: prepare() raised: ConnectionRefusedError: database at 127.0.0.1:1 refused "
            "the connection\nTraceback (most recent call last):\n"
        )
        assert 'raise ConnectionRefusedError("database at 127.0.0.1:1 refused the connection")' in error["error"]
        (bolt,) = [c for c in detail["bolts"] if c["id"] == "broken"]
        assert bolt["errors"] == 1
        assert run.stats.of("broken").errors == 1 and run.stats.of_task("broken", 1).errors == 1


class OpenFails(Spout):
    outputs = ("n",)

    def open(self, conf, context, collector):
        raise PermissionError("no access to the queue")

    def next_tuple(self):
        pass


class Sink(BasicBolt):
    def execute(self, tup, collector):
        pass


def test_a_spout_whose_open_raises_is_among_the_runs_errors(cluster):
    b = TopologyBuilder()
    b.set_spout("queue", OpenFails())
    b.set_bolt("sink", Sink()).shuffle_grouping("queue")
    run = cluster.submit_topology("no-queue", {}, b.build())
    opened = "component 'queue' task 1: open() raised: PermissionError: no access to the queue"
    with pytest.raises(TopologyFailed, match=re.escape(opened)):
        cluster.wait_idle()
    (error,) = run.stats.errors
    assert (error.component, error.task) == ("queue", 1)
    assert error.text.startswith(f"{opened}\nTraceback (most recent call last):\n")
    assert error.text.rstrip().endswith("PermissionError: no access to the queue")
    assert run.stats.of("queue").errors == 1


# -- one bad tuple fails that tuple; only the same error again and again stops the topology --------------------
class Picky(BasicBolt):
    """Raises on the values it is told to; passes the others on."""

    outputs = ("n",)

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad

    def execute(self, tup, collector):
        if tup[0] in self.bad:
            raise ValueError("cannot take this")
        collector.emit([tup[0]])


def _picky_topology(feeder: FeederSpout, bad: set[int]):
    b = TopologyBuilder()
    b.set_spout("numbers", feeder)
    b.set_bolt("picky", Picky(bad)).shuffle_grouping("numbers")
    return b.build()


def test_a_bolt_that_raises_on_one_tuple_of_many_fails_that_tuple_alone(cluster):
    feeder = FeederSpout(["n"])
    run = cluster.submit_for_capture("one-bad", {"squall.max.repeated.errors": 2}, _picky_topology(feeder, {7}))
    ids = {n: feeder.feed([n], msg_id=n) for n in range(20)}
    cluster.wait_idle()
    assert feeder.acked == set(ids) - {7} and feeder.failed == {7}
    assert run.stats.of("picky").errors == 1
    assert sorted(v for (v,) in run.captured["picky"]) == [n for n in range(20) if n != 7]


def test_a_bolt_that_raises_on_every_other_tuple_never_stops_the_topology(cluster):
    """Ten errors, each the same, but never two in a row: every other tuple goes through, which is progress."""
    feeder = FeederSpout(["n"])
    bad = set(range(0, 20, 2))
    run = cluster.submit_topology("every-other", {"squall.max.repeated.errors": 2}, _picky_topology(feeder, bad))
    for n in range(20):
        feeder.feed([n], msg_id=n)
    cluster.wait_idle()
    for n in range(20, 40):  # and it goes on running
        feeder.feed([n], msg_id=n)
    cluster.wait_idle()
    assert feeder.failed == bad and feeder.acked == set(range(40)) - bad
    assert run.stats.of("picky").errors == 10


def test_errors_in_a_row_up_to_one_less_than_the_limit_do_not_stop_the_topology(cluster):
    feeder = FeederSpout(["n"])
    bad = {3, 4, 5, 10, 11, 12}  # two runs of three, with progress between them
    cluster.submit_topology("under-limit", {"squall.max.repeated.errors": 4}, _picky_topology(feeder, bad))
    for n in range(20):
        feeder.feed([n], msg_id=n)
    cluster.wait_idle()
    assert feeder.failed == bad and feeder.acked == set(range(20)) - bad


# -- the same error in a row stops the topology, under TestCluster and LocalCluster ----------------------------
class Explode(BasicBolt):
    outputs = ("n",)

    def execute(self, tup, collector):
        raise ValueError("no good")


class WrongArity(BasicBolt):
    outputs = ("n",)

    def execute(self, tup, collector):
        collector.emit([tup[0], "extra"])


class Numbers(Spout):
    """Emits 0, 1, 2, ... with message ids, up to ``count``."""

    outputs = ("n",)

    def __init__(self, count: int = 20) -> None:
        self.count = count

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        if self.n < self.count:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1


class SourceGone(Spout):
    outputs = ("n",)

    def next_tuple(self):
        raise RuntimeError("the source is gone")


class EmitsALock(Spout):
    """Each call emits a value that cannot be serialized (a new lock each time: its repr differs by address)."""

    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        self.collector.emit([threading.Lock()], msg_id=1)


class Quiet(BasicBolt):
    def execute(self, tup, collector):
        pass


CASES = {
    "bolt execute raises": (Numbers(), Explode(), "bolt", "ValueError: no good"),
    "bolt emits the wrong number of fields": (
        Numbers(),
        WrongArity(),
        "bolt",
        "EmitError: component 'bolt' emitted 2 value(s) on stream 'default', which declares 1 field(s) ['n']",
    ),
    "spout next_tuple raises": (SourceGone(), Quiet(), "spout", "RuntimeError: the source is gone"),
    "spout emits a value that cannot be serialized": (
        EmitsALock(),
        Quiet(),
        "spout",
        "SerializationError: component 'spout' emitted on stream 'default' a value that cannot be serialized: "
        "field 'n' is a lock",
    ),
}
LIMIT = 4


def _case_topology(case: str):
    spout, bolt, _, _ = CASES[case]
    b = TopologyBuilder()
    b.set_spout("spout", spout)
    b.set_bolt("bolt", bolt).shuffle_grouping("spout")
    return b.build()


def _assert_stopped_by(failure: TopologyFailed, case: str, task: int) -> None:
    _, _, component, last_line = CASES[case]
    message = str(failure)
    assert message.startswith(
        f"topology 'repeated' stopped: component {component!r} task {task} raised the same error {LIMIT} times in "
        f"a row with no progress in between (squall.max.repeated.errors is {LIMIT}); the last one:\n"
        "Traceback (most recent call last):\n"
    ), message
    assert last_line in message.splitlines()[-1], message


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_error_in_a_row_stops_the_topology_under_test_cluster(cluster, case):
    run = cluster.submit_topology("repeated", {"squall.max.repeated.errors": LIMIT}, _case_topology(case))
    with pytest.raises(TopologyFailed) as failed:
        for _ in range(LIMIT):  # an in-process spout that emits nothing makes one call a wait
            cluster.wait_idle()
    _assert_stopped_by(failed.value, case, run.topology.task_ids(CASES[case][2])[0])
    assert run.stats.of(CASES[case][2]).errors >= LIMIT
    with pytest.raises(TopologyFailed):  # and it stays stopped
        cluster.wait_idle()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_error_in_a_row_stops_the_topology_under_local_cluster(spark, case):
    """The run's thread stops the topology; leaving the cluster's ``with`` block raises the failure."""
    with pytest.raises(TopologyFailed) as failed, LocalCluster({"squall.max.repeated.errors": LIMIT}) as cluster:
        run = cluster.submit_topology("repeated", {}, _case_topology(case))
        deadline = time.monotonic() + 120
        while "repeated" not in cluster.failures and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cluster.failures["repeated"] is run.failure
    _assert_stopped_by(failed.value, case, run.topology.task_ids(CASES[case][2])[0])


# -- before Spark starts: a missing Java, a component that cannot travel --------------------------------------
def test_java_versions_are_read_from_java_dash_version():
    assert java_major('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment') == 17
    assert java_major('openjdk version "21" 2023-09-19') == 21
    assert java_major('java version "1.8.0_292"\nJava(TM) SE Runtime Environment') == 8
    assert java_major('openjdk version "11.0.2" 2019-01-15') == 11
    assert java_major("no version here") is None
    check_java()  # the Java this suite runs Spark on passes


@pytest.mark.parametrize("java_home", [False, True])
def test_a_missing_java_is_one_line_that_says_what_to_install(tmp_path, java_home):
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(nowhere)
    if java_home:
        env["JAVA_HOME"] = str(nowhere)
    code, out, err = squall_run(tmp_path, FAILING_NEXT_TUPLE, env=env, cwd=SQUALL_ROOT)
    assert code == 1
    where = (
        f"JAVA_HOME is {nowhere} but it has no bin/java" if java_home else "there is no java on PATH nor JAVA_HOME set"
    )
    assert err == (
        f"squall: Spark needs Java 17+, and {where}: install a Java 17+ runtime (Debian/Ubuntu: apt-get install "
        "openjdk-17-jre-headless) and put its java on PATH or set JAVA_HOME to it\n"
    )
    assert "JAVA_GATEWAY_EXITED" not in out + err


OLD_JAVA = """#!/bin/sh
echo 'openjdk version "11.0.2" 2019-01-15' >&2
echo 'OpenJDK Runtime Environment 18.9 (build 11.0.2+9)' >&2
"""


def test_a_java_that_passed_is_not_run_again(tmp_path):
    runs = tmp_path / "runs"
    java = tmp_path / "java"
    java.write_text(f"#!/bin/sh\necho run >> {runs}\necho 'openjdk version \"21.0.1\" 2023-10-17' >&2\n")
    java.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    check_java(env)
    check_java(env)
    assert runs.read_text() == "run\n"


@pytest.mark.parametrize("java_home", [False, True])
def test_a_java_older_than_17_is_one_line_that_says_what_to_install(tmp_path, java_home):
    """A machine whose java is Java 11: refused before Spark starts, not a JVM that dies on Spark's classes."""
    bin_dir = tmp_path / "jdk-11" / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(OLD_JAVA)
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    if java_home:
        env["JAVA_HOME"] = str(bin_dir.parent)
        env["PATH"] = str(tmp_path)  # no java there: JAVA_HOME's is the one Spark would run
    else:
        env["PATH"] = str(bin_dir)
    code, out, err = squall_run(tmp_path, FAILING_NEXT_TUPLE, env=env, cwd=SQUALL_ROOT)
    assert code == 1
    assert err == (
        f"squall: Spark needs Java 17+, and {java} is Java 11: install a Java 17+ runtime (Debian/Ubuntu: apt-get "
        "install openjdk-17-jre-headless) and put its java on PATH or set JAVA_HOME to it\n"
    )
    assert "Traceback" not in out + err


UNSHIPPABLE = """
    import sqlite3

    from squall import BasicBolt, Spout, TopologyBuilder

    class Numbers(Spout):
        outputs = ("n",)

        def next_tuple(self):
            pass

    class Store(BasicBolt):
        def __init__(self):
            self.db = sqlite3.connect(":memory:")  # should be made in prepare()

        def execute(self, tup, collector):
            self.db.execute("insert into t values (?)", (tup[0],))

    def build_topology(conf):
        b = TopologyBuilder()
        b.set_spout("numbers", Numbers())
        b.set_bolt("store", Store()).shuffle_grouping("numbers")
        return b.build()
"""
UNSHIPPABLE_MESSAGE = (
    "component 'store' (Store) cannot be serialized to ship it to Spark's workers: attribute 'db' (Connection: "
    "TypeError: cannot pickle 'sqlite3.Connection' object) cannot be pickled. Create the resource in prepare(), "
    "which runs on the worker, not in __init__, which runs where the topology is declared"
)


def test_a_component_that_cannot_be_pickled_is_refused_before_spark_starts(tmp_path):
    (tmp_path / "topology.py").write_text(textwrap.dedent(UNSHIPPABLE))
    script = textwrap.dedent(
        """
        import sys
        from pyspark import SparkContext
        from squall import SquallError
        from squall.runner import run_file

        try:
            run_file(sys.argv[1], [], None, None, None, 1.0, ui=False)
        except SquallError as exc:
            print("refused:", exc)
        print("jvm started:", SparkContext._gateway is not None, SparkContext._active_spark_context is not None)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "topology.py")], capture_output=True, text=True, timeout=120
    )
    assert result.stdout.splitlines() == [f"refused: {UNSHIPPABLE_MESSAGE}", "jvm started: False False"], result
    code, out, err = squall_run(tmp_path, UNSHIPPABLE)
    assert (code, out, err) == (1, "", f"squall: {UNSHIPPABLE_MESSAGE}\n")


def test_a_component_holding_a_lock_is_refused_at_submit_with_the_hint(cluster):
    class Locked(BasicBolt):
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def execute(self, tup, collector):
            pass

    b = TopologyBuilder()
    b.set_spout("numbers", FeederSpout(["n"]))
    b.set_bolt("locked", Locked()).shuffle_grouping("numbers")
    with pytest.raises(SquallError) as refused:
        cluster.submit_topology("locked", {}, b.build())
    assert str(refused.value) == (
        "component 'locked' (Locked) cannot be serialized to ship it to Spark's workers: attribute 'lock' (lock: "
        "TypeError: cannot pickle '_thread.lock' object) cannot be pickled. Create the resource in prepare(), which "
        "runs on the worker, not in __init__, which runs where the topology is declared"
    )
    assert cluster.runs == {}


class LockedSpout(Spout):
    outputs = ("n",)

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def next_tuple(self):
        pass


def test_a_spout_holding_a_lock_is_refused_at_test_cluster_submit_with_the_hint(cluster):
    b = TopologyBuilder()
    b.set_spout("locked", LockedSpout())
    b.set_bolt("sink", FeederSinkless()).shuffle_grouping("locked")
    with pytest.raises(SquallError) as refused:
        cluster.submit_topology("locked-spout", {}, b.build())
    assert str(refused.value).startswith(
        "component 'locked' (LockedSpout) cannot be serialized to ship it to Spark's workers: attribute 'lock' (lock: "
    )
    assert str(refused.value).endswith(
        "Create the resource in open(), which runs on the worker, not in __init__, which runs where the topology "
        "is declared"
    )
    assert cluster.runs == {}


class FeederSinkless(BasicBolt):
    def execute(self, tup, collector):
        pass


# -- transactional topologies ---------------------------------------------------------------------------------
class CountsThenBreaks(BatchBolt):
    """Counts its batch's words; from ``txid`` on, every try of a batch raises the same error in execute."""

    outputs = ("id", "word", "count")

    def __init__(self, txid: int) -> None:
        self.txid = txid

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id, self.counts = collector, batch_id, Counter()

    def execute(self, tup):
        if self.id.txid >= self.txid:
            raise KeyError("the lookup table lost 'word'")
        self.counts[tup["word"]] += 1

    def finish_batch(self):
        for word, count in self.counts.items():
            self.collector.emit([self.id, word, count])


def test_batches_that_fail_with_the_same_error_try_after_try_stop_a_transactional_topology(cluster):
    data = {0: [["a"], ["b"], ["a"], ["c"]] * 3}
    builder = TransactionalTopologyBuilder(
        "breaks", "words", MemoryTransactionalSpout(data, ["word"], take_per_batch=4)
    )
    builder.set_bolt("count", CountsThenBreaks(txid=2), 1).shuffle_grouping("words")
    run = cluster.submit_topology("breaks", {"squall.max.repeated.errors": 5}, builder.build())
    with pytest.raises(TopologyFailed) as failed:
        cluster.wait_idle()
    message = str(failed.value)
    assert message.startswith(
        "topology 'breaks' stopped: the batches of topology 'breaks' failed with the same error 5 times in a row"
        " with no progress in between (squall.max.repeated.errors is 5); the last one:\n"
    ), message
    assert message.splitlines()[-1] == "KeyError: \"the lookup table lost 'word'\"", message
    assert [attempt.txid for attempt, _, _ in run.commits] == [1]  # the batch before the break committed
