"""User code as users write it: components defined right here, in the test module, run on Spark's workers.

Nothing puts this module on the workers' path: squall ships it.
"""

import dataclasses
import logging
import os
import threading
from pathlib import Path

import pytest
from components import RequeueingFeeder

import squall.time
from squall import BasicBolt, Bolt, Fields, SquallError, TopologyBuilder, TopologyFailed
from squall.testing import FeederSpout
from squall.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalTopologyBuilder,
)


class Shout(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        collector.emit([shout(tup["word"])])


def shout(word: str) -> str:  # a module-level helper the bolt calls on the worker
    return word.upper() + "!"


class Tally(Bolt):
    """Counts per word on ``self``; the counts survive from wave to wave."""

    outputs = ("word", "count")

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts = {}

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)


def test_bolts_defined_in_a_test_module_run_on_spark_workers(cluster):
    feeder = FeederSpout(["word"])
    b = TopologyBuilder()
    b.set_spout("words", feeder)
    b.set_bolt("shout", Shout(), 2).shuffle_grouping("words")
    b.set_bolt("tally", Tally(), 2).fields_grouping("shout", ["word"])
    run = cluster.submit_for_capture("test-module", {}, b.build())
    ids = [feeder.feed([w]) for w in ["a", "b", "a"]]
    cluster.wait_idle()
    ids += [feeder.feed([w]) for w in ["a", "c"]]
    cluster.wait_idle()
    assert feeder.acked == set(ids) and feeder.failed == set()
    assert sorted(run.captured["tally"]) == [("A!", 1), ("A!", 2), ("A!", 3), ("B!", 1), ("C!", 1)]


# -- failures no retry can fix --------------------------------------------------------------
def _rebuild_only_in(pid: int):
    if os.getpid() != pid:
        raise ImportError("No module named 'only_on_the_driver'")
    return DriverOnly()


class DriverOnly(BasicBolt):
    """Unpickles in the process that pickled it, and nowhere else (as a module missing on the workers)."""

    outputs = ("word",)

    def __reduce__(self):
        return (_rebuild_only_in, (os.getpid(),))

    def execute(self, tup, collector):
        collector.emit([tup[0]])


class NoDatabase(BasicBolt):
    outputs = ("word",)

    def prepare(self, conf, context):
        raise ConnectionRefusedError("database at 127.0.0.1:1 refused the connection")

    def execute(self, tup, collector):
        collector.emit([tup[0]])


class FlakyPrepare(BasicBolt):
    """``prepare`` raises the first time only (a marker file remembers), as a database that was restarting."""

    outputs = ("word",)

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def prepare(self, conf, context):
        if not Path(self.marker).exists():
            Path(self.marker).write_text("raised")
            raise ConnectionRefusedError("not up yet")

    def execute(self, tup, collector):
        collector.emit([tup[0]])


def _one_bolt(feeder, bolt, parallelism=2):
    b = TopologyBuilder()
    b.set_spout("words", feeder)
    b.set_bolt("broken", bolt, parallelism).shuffle_grouping("words")
    return b.build()


def test_a_component_that_cannot_be_unpickled_on_a_worker_stops_the_topology(cluster):
    feeder = FeederSpout(["word"])
    run = cluster.submit_topology("unpicklable", {}, _one_bolt(feeder, DriverOnly(), parallelism=1))
    feeder.feed(["a"])
    with pytest.raises(TopologyFailed) as failed:
        cluster.wait_idle()
    message = str(failed.value)
    task = run.topology.task_ids("broken")[0]
    assert f"component 'broken' task {task}: cannot be unpickled on a Spark worker" in message
    assert "ImportError: No module named 'only_on_the_driver'" in message
    assert run.stats.waves == 0 and run.stats.restarts == 4  # stopped after Spark's 4 attempts, not replayed
    with pytest.raises(TopologyFailed):  # and it stays stopped
        cluster.wait_idle()


def test_a_prepare_that_raises_on_every_attempt_stops_the_topology(cluster):
    feeder = FeederSpout(["word"])
    run = cluster.submit_topology("no-database", {}, _one_bolt(feeder, NoDatabase(), parallelism=1))
    feeder.feed(["a"])
    with pytest.raises(TopologyFailed) as failed:
        cluster.advance_time(60)
    task = run.topology.task_ids("broken")[0]
    assert (
        f"component 'broken' task {task}: prepare() raised: ConnectionRefusedError: "
        "database at 127.0.0.1:1 refused the connection"
    ) in str(failed.value)
    assert run.stats.restarts == 4 and feeder.acked == set()  # Spark's 4 attempts


def test_a_prepare_that_raises_once_is_retried_by_spark(cluster, tmp_path):
    feeder = RequeueingFeeder(["word"])  # what went out to the task that did not start fails back, and comes again
    cluster.submit_topology("flaky", {}, _one_bolt(feeder, FlakyPrepare(str(tmp_path / "raised")), parallelism=1))
    ids = {feeder.feed([w]) for w in "abc"}
    cluster.wait_idle()
    assert (tmp_path / "raised").exists()
    assert feeder.acked == ids and feeder.failed <= ids


class CommitToNowhere(BatchBolt, Committer):
    outputs = ("count",)

    def prepare(self, conf, context, collector, attempt):
        raise ConnectionRefusedError("no database for the commit")

    def execute(self, tup):
        pass

    def finish_batch(self):
        pass


class CountBatch(BatchBolt):
    outputs = ("count",)

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.count = collector, 0

    def execute(self, tup):
        self.count += 1

    def finish_batch(self):
        self.collector.emit([self.count])


def test_a_committer_whose_prepare_always_raises_stops_a_transactional_topology(cluster):
    spout = MemoryTransactionalSpout({0: [["a"], ["b"]]}, ["word"], 1)
    builder = TransactionalTopologyBuilder("nowhere", "spout", spout)
    builder.set_bolt("count", CountBatch()).shuffle_grouping("spout")
    builder.set_bolt("commit", CommitToNowhere()).global_grouping("count")
    run = cluster.submit_topology("tx-nowhere", {}, builder.build())
    with pytest.raises(TopologyFailed) as failed:
        cluster.wait_idle()
    assert "component 'commit' task" in str(failed.value)
    assert "prepare() raised: ConnectionRefusedError: no database for the commit" in str(failed.value)
    assert run.coordinator.last_committed == 0


# -- snapshots keep what a bolt holds -------------------------------------------------------
class TimeCacheMap:
    """storm-starter's TimeCacheMap: entries expire after ``num_buckets`` rotations, into a callback."""

    def __init__(self, num_buckets: int, on_expire) -> None:
        self.buckets = [{} for _ in range(num_buckets)]
        self.on_expire = on_expire

    def put(self, key, value) -> None:
        for bucket in self.buckets[1:]:
            bucket.pop(key, None)
        self.buckets[0][key] = value

    def get(self, key):
        return next((b[key] for b in self.buckets if key in b), None)

    def remove(self, key):
        return next((b.pop(key) for b in self.buckets if key in b), None)

    def rotate(self) -> None:
        dead = self.buckets.pop()
        self.buckets.insert(0, {})
        for key, value in dead.items():
            self.on_expire(key, value)


class SingleJoinBolt(Bolt):
    """storm-starter's SingleJoinBolt: joins two streams on their common fields; unmatched tuples expire and fail.

    Its pending map holds the tuples it joins and an expire callback bound to the bolt. The map rotates on
    each tick. An input whose id is ``crash`` kills the Python worker once (a marker file remembers).
    """

    def __init__(self, out_fields, marker: str) -> None:
        self.outputs = tuple(out_fields)
        self.marker = marker

    def prepare(self, conf, context, collector):
        self._collector = collector
        self._pending = TimeCacheMap(2, self._expire)
        sources = context.get_this_sources()
        self._num_sources = len(sources)
        field_sets = [set(context.get_component_output_fields(s.component_id, s.stream_id)) for s in sources]
        self._id_fields = sorted(set.intersection(*field_sets))
        self._field_locations = {}
        for source in sources:
            fields = context.get_component_output_fields(source.component_id, source.stream_id)
            for name in self.outputs:
                if name in fields:
                    self._field_locations[name] = source
        self._lock = threading.Lock()  # truly unpicklable: left to prepare()

    def execute(self, tup):
        if tup.is_tick:
            self._pending.rotate()
            return
        key = tuple(tup[f] for f in self._id_fields)
        if key == ("crash",) and not Path(self.marker).exists():
            Path(self.marker).write_text("crashed")
            os._exit(1)
        parts = self._pending.get(key)
        if parts is None:
            parts = {}
            self._pending.put(key, parts)
        source = (tup.source_component, tup.source_stream)
        if source in parts:
            raise RuntimeError(f"received tuples from {source} with the same id {key}")
        parts[source] = tup
        if len(parts) == self._num_sources:
            self._pending.remove(key)
            values = [parts[self._field_locations[name]].__getitem__(name) for name in self.outputs]
            self._collector.emit(values, anchors=list(parts.values()))
            for part in parts.values():
                self._collector.ack(part)

    def _expire(self, key, parts):
        for tup in parts.values():
            self._collector.fail(tup)


def test_a_join_bolt_keeps_what_it_holds_when_its_task_moves_to_another_worker(cluster, tmp_path, caplog):
    marker = tmp_path / "crashed"
    genders, ages = FeederSpout(["id", "gender"]), RequeueingFeeder(["id", "age"])
    b = TopologyBuilder()
    b.set_spout("gender", genders)
    b.set_spout("age", ages)
    b.set_bolt("join", SingleJoinBolt(["id", "gender", "age"], str(marker)), 2).fields_grouping(
        "gender", Fields("id")
    ).fields_grouping("age", Fields("id")).add_configuration("topology.tick.tuple.freq.secs", 5)
    conf = {"topology.message.timeout.secs": 30}
    run = cluster.submit_for_capture("join", conf, b.build())

    for i in range(10):
        genders.feed([i, "male" if i % 2 else "female"], msg_id=f"g{i}")
    for i in range(5):
        ages.feed([i, 20 + i], msg_id=f"a{i}")
    cluster.wait_idle()
    assert genders.acked == {f"g{i}" for i in range(5)} and ages.acked == {f"a{i}" for i in range(5)}

    ages.feed(["crash", 0], msg_id="a-crash")  # this wave kills the worker a join task runs in; it runs again
    for i in range(5, 8):
        ages.feed([i, 20 + i], msg_id=f"a{i}")
    cluster.wait_idle()
    assert marker.read_text() == "crashed"
    assert genders.acked == {f"g{i}" for i in range(8)}  # g5..g7 were held through the move, then joined
    assert ages.acked == {f"a{i}" for i in range(8)}
    assert sorted(run.captured["join"]) == [(i, "male" if i % 2 else "female", 20 + i) for i in range(8)]
    assert genders.failed == set() and ages.failed == set()  # the wave in flight ran again and completed them

    cluster.advance_time(10)  # two ticks: the pending map expires what never matched, through the bound callback
    assert genders.failed == {"g8", "g9"} and ages.failed == {"a-crash"}
    assert [m for kind, m in ages.calls if kind == "fail"].count("a-crash") == 1  # by the bolt
    assert run.stats.of("gender").timed_out == 0 and run.stats.of("age").timed_out == 0  # failed by the bolt
    # prepare() makes the lock wherever a task is rebuilt: leaving it out of the snapshots loses nothing
    assert not [r for r in caplog.records if r.levelno == logging.WARNING and "attributes" in r.message]


class LocksOnFirstTuple(BasicBolt):
    """Makes an unpicklable attribute in execute(), not in prepare(): a task rebuilt from a snapshot lacks it."""

    outputs = ("word",)

    def execute(self, tup, collector):
        if not hasattr(self, "lock"):
            self.lock = threading.Lock()
        collector.emit([tup[0]])


def test_an_unpicklable_attribute_not_made_by_prepare_is_warned_of_once_per_component(cluster, caplog):
    feeder = FeederSpout(["word"])
    run = cluster.submit_for_capture("lazy", {}, _one_bolt(feeder, LocksOnFirstTuple(), parallelism=2))
    for i in range(6):
        feeder.feed([f"w{i}"], msg_id=i)
        cluster.wait_idle()
        cluster.advance_time(2)  # past the snapshot interval: the next wave saves the tasks' attributes
    assert feeder.acked == set(range(6)) and sorted(run.captured["broken"]) == [(f"w{i}",) for i in range(6)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "attributes" in r.message]
    assert warnings == [
        "bolt broken: attributes ['lock'] cannot be pickled and are not made by prepare(); they are left out of its"
        " task snapshots, so a task rebuilt after a lost worker starts without them"
    ]


class Clocked(BasicBolt):
    outputs = ("word", "at")

    def execute(self, tup, collector):
        collector.emit([tup[0], squall.time.now()])


def test_squall_time_follows_simulated_time_in_bolts(cluster):
    feeder = FeederSpout(["word"])
    b = TopologyBuilder()
    b.set_spout("words", feeder)
    b.set_bolt("clocked", Clocked(), 2).shuffle_grouping("words")
    run = cluster.submit_for_capture("clocked", {}, b.build())
    feeder.feed(["early"])
    cluster.wait_idle()
    cluster.advance_time(42.5)
    feeder.feed(["late"])
    cluster.wait_idle()
    assert run.captured["clocked"] == [("early", 0.0), ("late", 42.5)]


def test_squall_time_is_the_wall_clock_outside_simulated_time():
    import time

    before = time.time()
    assert before <= squall.time.now() <= time.time()


def test_two_local_clusters_with_the_same_transactional_id_and_no_store_each_count_everything(spark, tmp_path):
    """storm-starter's TransactionalGlobalCount, run twice in fresh clusters, as its main() would."""
    from squall import LocalCluster

    data = {0: [["cat"], ["dog"], ["chicken"]], 1: [["cat"], ["apple"]], 2: [["cat"], ["cat"], ["dog"], ["dog"]]}
    for attempt in range(2):
        spout = MemoryTransactionalSpout(data, ["word"], 2)
        builder = TransactionalTopologyBuilder("global-count", "spout", spout, 3)
        builder.set_bolt("partial-count", CountBatch(), 3).shuffle_grouping("spout")
        builder.set_bolt("sum", SumCommitter(), 1).global_grouping("partial-count")
        with LocalCluster() as cluster:
            run = cluster.submit_topology("global-count", {"topology.max.spout.pending": 3}, builder.build())
            deadline = 120
            while not run.settled() and deadline > 0:
                threading.Event().wait(0.1)
                deadline -= 0.1
            assert run.settled(), f"run {attempt} did not settle"
            total = committed_sum(run)
            assert total == 9, f"run {attempt} counted {total}"
            assert run.commits[0][0].txid == 1  # each run starts at txid 1


def committed_sum(run) -> int:
    """What the ``sum`` committer emitted over every commit of ``run``."""
    return sum(count for _, _, captured in run.commits for (count,) in captured.get("sum", []))


class SumCommitter(BatchBolt, Committer):
    outputs = ("count",)

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.total = collector, 0

    def execute(self, tup):
        self.total += tup[0]

    def finish_batch(self):
        if self.total:
            self.collector.emit([self.total])


class Countdown(PartitionedTransactionalSpout):
    """A partitioned transactional spout written in the test module: each partition emits ``per_partition``
    numbers, ``take`` per batch."""

    def __init__(self, partitions: int, per_partition: int, take: int) -> None:
        self.partitions, self.per_partition, self.take = partitions, per_partition, take
        self.fields = Fields("tx", "n")

    def num_partitions(self) -> int:
        return self.partitions

    def emit_partition_batch_new(self, tx, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": min(start + self.take, self.per_partition)}
        self.emit_partition_batch(tx, collector, partition, meta)
        return meta

    def emit_partition_batch(self, tx, collector, partition, meta):
        for n in range(meta["start"], meta["end"]):
            collector.emit([tx, partition * 1000 + n])


def test_a_transactional_spout_defined_in_a_test_module_emits_on_workers(cluster):
    builder = TransactionalTopologyBuilder("countdown", "spout", Countdown(3, 20, 6), 2)
    builder.set_bolt("count", CountBatch(), 2).shuffle_grouping("spout")
    builder.set_bolt("sum", SumCommitter()).global_grouping("count")
    run = cluster.submit_topology("countdown", {}, builder.build())
    cluster.wait_idle()
    assert committed_sum(run) == 60
    assert [attempt.txid for attempt, _, _ in run.commits][:4] == [1, 2, 3, 4]


def test_complete_topology_raises_a_failure_no_retry_can_fix(spark):
    from squall.testing import complete_topology

    b = TopologyBuilder()
    b.set_spout("words", FeederSpout(["word"]))
    b.set_bolt("broken", NoDatabase()).shuffle_grouping("words")
    with pytest.raises(TopologyFailed, match="component 'broken' task 1: prepare"):
        complete_topology(b.build(), {"words": [["a"], ["b"]]})


SCRIPT = """
import sys
from helpers import tag
from mypkg.bolts import Upper

from squall import BasicBolt, TopologyBuilder
from squall.testing import FeederSpout, TestCluster


class Tag(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        collector.emit([tag(tup[0])])


if __name__ == "__main__":
    feeder = FeederSpout(["word"])
    b = TopologyBuilder()
    b.set_spout("words", feeder)
    b.set_bolt("upper", Upper(), 2).shuffle_grouping("words")
    b.set_bolt("tag", Tag(), 2).shuffle_grouping("upper")
    with TestCluster({"squall.spark.master": "local[2]"}) as cluster:
        run = cluster.submit_for_capture("script", {}, b.build())
        ids = {feeder.feed([w]) for w in ["storm", "spark"]}
        cluster.wait_idle()
        print(sorted(run.captured["tag"]), feeder.acked == ids)
"""


def test_a_script_with_a_helper_module_and_a_package_beside_it_runs_with_python(tmp_path):
    """``python script.py``: ``__main__``, ``helpers.py`` and ``mypkg/`` are importable on the driver only."""
    import subprocess
    import sys

    code = tmp_path / "code"
    (code / "mypkg").mkdir(parents=True)
    (code / "mypkg" / "__init__.py").write_text("")
    (code / "mypkg" / "bolts.py").write_text(
        "from squall import BasicBolt\n\n\nclass Upper(BasicBolt):\n    outputs = ('word',)\n\n"
        "    def execute(self, tup, collector):\n        collector.emit([tup[0].upper()])\n"
    )
    (code / "helpers.py").write_text("def tag(word):\n    return f'<{word}>'\n")
    (code / "script.py").write_text(SCRIPT)
    elsewhere = tmp_path / "cwd"  # the workers' working directory: neither module is importable from there
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(code / "script.py")], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[('<SPARK>',), ('<STORM>',)] True"


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


class Norm(BasicBolt):
    outputs = ("norm",)

    def execute(self, tup, collector):
        point = tup["point"]
        collector.emit([abs(point.x) + abs(point.y)])


def test_values_of_classes_defined_in_a_test_module_travel_from_spouts_to_bolts(cluster):
    feeder = FeederSpout(["point"])
    b = TopologyBuilder()
    b.set_spout("points", feeder)
    b.set_bolt("norm", Norm(), 2).shuffle_grouping("points")
    run = cluster.submit_for_capture("points", {}, b.build())
    ids = {feeder.feed([Point(3, -4)]), feeder.feed([Point(1, 1)])}
    cluster.wait_idle()
    assert feeder.acked == ids and sorted(run.captured["norm"]) == [(2,), (7,)]


class Unshippable(Countdown):
    def __init__(self) -> None:
        super().__init__(1, 3, 3)
        self.lock = threading.Lock()


def test_a_transactional_spout_that_cannot_be_shipped_is_refused_at_submit(cluster):
    builder = TransactionalTopologyBuilder("unshippable", "spout", Unshippable())
    builder.set_bolt("count", CountBatch()).shuffle_grouping("spout")
    with pytest.raises(SquallError, match="component 'spout' \\(Unshippable\\) cannot be serialized"):
        cluster.submit_topology("unshippable", {}, builder.build())


def test_a_store_named_in_the_topologys_own_config_is_used(cluster, tmp_path):
    store = tmp_path / "own-store.sqlite"
    builder = TransactionalTopologyBuilder("own-store", "spout", Countdown(1, 4, 2))
    builder.set_bolt("count", CountBatch()).shuffle_grouping("spout")
    builder.set_bolt("sum", SumCommitter()).global_grouping("count")
    run = cluster.submit_topology("own-store", {}, builder.build({"squall.transactional.store": str(store)}))
    cluster.wait_idle()
    assert committed_sum(run) == 4
    assert store.exists()
