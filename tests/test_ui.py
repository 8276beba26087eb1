"""The web UI's REST API and /metrics give exact figures; mutating requests need the token; deactivate stops
the spouts' emits and activate resumes them. Servers run on free loopback ports."""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import closing

import pytest
from components import Router, StreamRecorder
from servers import wait_for

from squall import Bolt, LocalCluster, Spout, TopologyBuilder
from squall.model.errors import SquallError
from squall.testing import TestCluster
from squall.transactional import BatchBolt, Committer, MemoryTransactionalSpout, TransactionalTopologyBuilder
from squall.ui.client import UIClient


class Numbers(Spout):
    """Emits what it is fed, msg id = the number; records acks, fails, activate and deactivate in SQLite, which
    the test reads wherever the spout runs (on a worker under ``LocalCluster``)."""

    outputs = ("n",)

    def __init__(self, count: int = 0) -> None:
        self.path = os.path.join(tempfile.mkdtemp(prefix="squall-ui-spout-"), "spout.sqlite")
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("CREATE TABLE fed (n INTEGER)")
            db.execute("CREATE TABLE calls (method TEXT, n INTEGER)")
            db.executemany("INSERT INTO fed VALUES (?)", [(n,) for n in range(count)])

    def feed(self, numbers: list[int]) -> None:
        with closing(sqlite3.connect(self.path)) as db, db:
            db.executemany("INSERT INTO fed VALUES (?)", [(n,) for n in numbers])

    def _calls(self, method: str) -> list[int]:
        with closing(sqlite3.connect(self.path)) as db:
            return [n for (n,) in db.execute("SELECT n FROM calls WHERE method = ? ORDER BY rowid", (method,))]

    @property
    def acked(self) -> set[int]:
        return set(self._calls("ack"))

    @property
    def failed(self) -> set[int]:
        return set(self._calls("fail"))

    @property
    def activations(self) -> list[str]:
        with closing(sqlite3.connect(self.path)) as db:
            rows = db.execute("SELECT method FROM calls WHERE method IN ('activate', 'deactivate') ORDER BY rowid")
            return [method for (method,) in rows]

    def open(self, conf, context, collector):
        self.collector, self.db, self.emitted = collector, sqlite3.connect(self.path), 0

    def next_tuple(self):
        row = self.db.execute("SELECT n FROM fed ORDER BY rowid LIMIT 1 OFFSET ?", (self.emitted,)).fetchone()
        if row is not None:
            self.emitted += 1
            self.collector.emit([row[0]], msg_id=row[0])

    def _record(self, method: str, n: int | None = None) -> None:
        with self.db:
            self.db.execute("INSERT INTO calls VALUES (?, ?)", (method, n))

    def ack(self, msg_id):
        self._record("ack", msg_id)

    def fail(self, msg_id):
        self._record("fail", msg_id)

    def activate(self):
        self._record("activate")

    def deactivate(self):
        self._record("deactivate")


class FailEveryThird(Bolt):
    """Fails every tuple whose number is a multiple of 3 and acks the rest; raises on 10 (failed as well)."""

    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup.is_tick:
            return
        n = tup["n"]
        if n == 10:
            raise ValueError("ten is right out")
        if n % 3 == 0:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class Holds(Bolt):
    """Never acks: every tree times out."""

    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        pass


def topology(spout: Spout, bolt: Bolt, tick: float | None = None):
    b = TopologyBuilder()
    b.set_spout("numbers", spout)
    declarer = b.set_bolt("check", bolt, 2).shuffle_grouping("numbers")
    if tick:
        declarer.add_configuration("topology.tick.tuple.freq.secs", tick)
    return b.build()


def get(url: str, token: str | None = None, method: str = "GET"):
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
        return json.loads(body) if response.headers.get_content_type() == "application/json" else body.decode()


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample of the exposition ``text``."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if found == {k: str(v) for k, v in labels.items()}:
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{labels} in the metrics")


def test_rest_api_and_metrics_give_exact_figures(spark):
    spout = Numbers(30)
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        url = cluster.ui.url
        run = cluster.submit_topology("numbers", {}, topology(spout, FailEveryThird()))
        wait_for(lambda: len(spout.acked) + len(spout.failed) == 30, "settled trees")
        assert spout.failed == {n for n in range(30) if n % 3 == 0} | {10}
        wait_for(lambda: get(f"{url}/api/v1/topology/numbers")["spouts"][0]["acked"] == 19, "acks in the API")

        (summary,) = get(f"{url}/api/v1/topology/summary")["topologies"]
        assert summary["name"] == "numbers" and summary["status"] == "ACTIVE" and summary["pendingTrees"] == 0
        assert summary["spouts"] == 1 and summary["bolts"] == 1 and summary["tasks"] == 3

        detail = get(f"{url}/api/v1/topology/numbers")
        (numbers,) = detail["spouts"]
        assert {k: numbers[k] for k in ("emitted", "acked", "failed", "timedOut", "malformed", "errors")} == {
            "emitted": 30,
            "acked": 19,
            "failed": 11,  # the multiples of 3, and 10
            "timedOut": 0,
            "malformed": 0,
            "errors": 0,
        }
        assert numbers["completeLatencyMs"]["p50"] > 0
        check, acker = detail["bolts"]  # the topology's bolt, then Storm's __acker: one task per worker (2)
        # Each of the 30 trees: one ack message merged (its one bolt acked or failed it), one settlement. The one
        # spout task's trees all go to the acker task on its own worker.
        assert (acker["id"], acker["tasks"], acker["executed"], acker["emitted"]) == ("__acker", 2, 30, 30)
        acker_tasks = get(f"{url}/api/v1/topology/numbers/component/__acker")["taskStats"]
        assert sorted((t["executed"], t["emitted"]) for t in acker_tasks) == [(0, 0), (30, 30)]
        assert {k: check[k] for k in ("executed", "emitted", "acked", "failed", "errors")} == {
            "executed": 30,
            "emitted": 0,
            "acked": 19,
            "failed": 11,
            "errors": 1,
        }
        assert check["executeLatencyMs"] > 0 and 0 < check["capacity"] <= 1
        assert detail["graph"] == [
            {"source": "numbers", "target": "check", "stream": "default", "grouping": "shuffle_grouping"}
        ]
        (error,) = detail["errors"]
        assert error["component"] == "check" and "ten is right out" in error["error"]

        component = get(f"{url}/api/v1/topology/numbers/component/check")
        assert [t["task"] for t in component["taskStats"]] == list(run.topology.task_ids("check"))
        assert sum(t["executed"] for t in component["taskStats"]) == 30
        assert sum(t["failed"] for t in component["taskStats"]) == 11
        spout_tasks = get(f"{url}/api/v1/topology/numbers/component/numbers")["taskStats"]
        rows = [(t["task"], t["emitted"], t["acked"], t["failed"]) for t in spout_tasks]
        assert rows == [(*run.topology.task_ids("numbers"), 30, 19, 11)]

        metrics = get(f"{url}/metrics")
        assert metric(metrics, "squall_tuples_emitted_total", topology="numbers", component="numbers") == 30
        assert metric(metrics, "squall_tuples_acked_total", topology="numbers", component="numbers") == 19
        assert metric(metrics, "squall_tuples_failed_total", topology="numbers", component="numbers") == 11
        assert metric(metrics, "squall_tuples_executed_total", topology="numbers", component="check") == 30
        assert metric(metrics, "squall_tuples_executed_total", topology="numbers", component="__acker") == 30
        assert metric(metrics, "squall_tuples_failed_total", topology="numbers", component="check") == 11
        assert metric(metrics, "squall_errors_total", topology="numbers", component="check") == 1
        assert metric(metrics, "squall_pending_trees", topology="numbers") == 0
        assert metric(metrics, "squall_topology_active", topology="numbers") == 1
        count = metric(metrics, "squall_complete_latency_seconds_count", topology="numbers", component="numbers")
        infinite = metric(
            metrics, "squall_complete_latency_seconds_bucket", topology="numbers", component="numbers", le="+Inf"
        )
        assert count == infinite == 19  # one latency per acked tree

        with pytest.raises(urllib.error.HTTPError) as missing:
            get(f"{url}/api/v1/topology/nothing")
        assert missing.value.code == 404

        # Storm's windows: the run is younger than 10 minutes, so every window holds all it did
        windows = ("600", "10800", "86400", "all")
        detail = get(f"{url}/api/v1/topology/numbers")
        rows = [(r["window"], r["emitted"], r["acked"], r["failed"]) for r in detail["topologyStats"]]
        assert rows == [(w, 30, 19, 11) for w in windows]
        assert [r["windowPretty"] for r in detail["topologyStats"]] == ["10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time"]
        assert all(r["completeLatencyMs"] > 0 for r in detail["topologyStats"])
        (numbers,) = detail["spouts"]
        for w in windows:
            counts = {f: numbers["windows"][w][f] for f in ("emitted", "acked", "failed", "timedOut", "errors")}
            assert counts == {"emitted": 30, "acked": 19, "failed": 11, "timedOut": 0, "errors": 0}
            assert numbers["windows"][w]["completeLatencyMs"] > 0
        check = detail["bolts"][0]
        for w in windows:
            counts = {f: check["windows"][w][f] for f in ("executed", "emitted", "acked", "failed", "errors")}
            assert counts == {"executed": 30, "emitted": 0, "acked": 19, "failed": 11, "errors": 1}
            assert check["windows"][w]["processLatencyMs"] > 0 and check["windows"][w]["executeLatencyMs"] > 0
        assert check["processLatencyMs"] > 0
        assert detail["streams"] == [
            {"source": "numbers", "stream": "default", "target": "check", "executed": dict.fromkeys(windows, 30)}
        ]
        component = get(f"{url}/api/v1/topology/numbers/component/check")
        assert component["inputs"] == detail["streams"] and component["outputs"] == []
        assert component["windows"]["600"]["executed"] == 30

        # the workers: LocalCluster's two, each with its host, pid, memory and tasks
        workers = detail["workers"]
        assert [w["worker"] for w in workers] == [0, 1]
        assert {w["host"] for w in workers} == {socket.gethostname()}
        assert len({w["pid"] for w in workers}) == 2 and os.getpid() not in {w["pid"] for w in workers}
        assert all(w["memoryBytes"] > 0 and w["uptimeSeconds"] > 0 for w in workers)
        hosted = sorted(task for w in workers for task in w["tasks"])
        expected = [f"check:{t}" for t in run.topology.task_ids("check")]
        expected += [f"numbers:{t}" for t in run.topology.task_ids("numbers")]
        expected += [f"__acker:{t}" for t in run.acker_task_ids]
        assert hosted == sorted(expected)

        # the charts' points, a second apart: the spouts' rates, complete latency and pending trees
        wait_for(lambda: len(get(f"{url}/api/v1/topology/numbers/series")["points"]) >= 2, "two chart points")
        points = get(f"{url}/api/v1/topology/numbers/series")["points"]
        assert all(
            p.keys() == {"time", "emitted", "acked", "failed", "completeLatencyMs", "pendingTrees"} for p in points
        )
        assert [p["time"] for p in points] == sorted(p["time"] for p in points)


def test_each_stream_is_counted_apart(spark):
    """A bolt that emits on two streams: what each bolt executed of each stream, in every window."""
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(10))
    b.set_bolt("router", Router(), 2).shuffle_grouping("numbers")
    b.set_bolt("both", StreamRecorder(), 2).shuffle_grouping("router", stream="even").shuffle_grouping(
        "router", stream="odd"
    )
    b.set_bolt("evens", StreamRecorder()).shuffle_grouping("router", stream="even")
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        run = cluster.submit_topology("streams", {}, b.build())
        wait_for(lambda: run.stats.of("numbers").acked == 10, "the trees acked")
        streams = get(f"{cluster.ui.url}/api/v1/topology/streams")["streams"]
        counted = [(s["source"], s["stream"], s["target"], s["executed"]) for s in streams]
        every = ("600", "10800", "86400", "all")
        assert counted == [
            ("numbers", "default", "router", dict.fromkeys(every, 10)),
            ("router", "even", "both", dict.fromkeys(every, 5)),
            ("router", "even", "evens", dict.fromkeys(every, 5)),
            ("router", "odd", "both", dict.fromkeys(every, 5)),
        ]
        router = get(f"{cluster.ui.url}/api/v1/topology/streams/component/router")
        assert [(s["stream"], s["target"]) for s in router["outputs"]] == [
            ("even", "both"),
            ("even", "evens"),
            ("odd", "both"),
        ]
        assert router["windows"]["600"]["emitted"] == 10


def test_timeouts_on_simulated_time_reach_the_api_exactly(spark):
    with TestCluster({"squall.ui.port": 0}) as cluster:
        spout = Numbers(5)
        cluster.submit_topology("held", {"topology.message.timeout.secs": 10}, topology(spout, Holds()))
        cluster.advance_time(31)  # two rotations after the emits: every tree has timed out
        assert spout.failed == set(range(5))
        (numbers,) = get(f"{cluster.ui.url}/api/v1/topology/held")["spouts"]
        assert (numbers["emitted"], numbers["acked"], numbers["failed"], numbers["timedOut"]) == (5, 0, 5, 5)
        metrics = get(f"{cluster.ui.url}/metrics")
        assert metric(metrics, "squall_tuples_timed_out_total", topology="held", component="numbers") == 5


def test_control_needs_the_token_and_deactivate_stops_emits_until_activate(spark):
    spout = Numbers()
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        url = cluster.ui.url
        run = cluster.submit_topology("numbers", {}, topology(spout, FailEveryThird(), tick=0.05))
        for token in (None, "not-the-token"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                get(f"{url}/api/v1/topology/numbers/deactivate", token, method="POST")
            assert refused.value.code == 401
        assert run.wanted_active

        client = UIClient(url)  # finds the token in the file the server wrote for this user
        assert cluster.ui.token_file.stat().st_mode & 0o777 == 0o600  # readable by its user only
        client.control("numbers", "deactivate")
        wait_for(lambda: spout.activations == ["deactivate"], "deactivation")
        assert client.topology("numbers")["status"] == "INACTIVE"
        spout.feed([1, 2, 4])
        waves = run.stats.waves
        wait_for(lambda: run.stats.waves >= waves + 5, "five more waves (ticks)")
        assert run.stats.of("numbers").emitted == 0 and spout.acked | spout.failed == set()

        client.control("numbers", "activate")
        wait_for(lambda: spout.acked == {1, 2, 4}, "the fed numbers, acked")
        assert client.topology("numbers")["status"] == "ACTIVE" and spout.activations == ["deactivate", "activate"]
        assert run.stats.of("numbers").emitted == 3


def test_kill_with_a_wait_fails_what_is_still_pending_back_to_the_spout(spark):
    spout = Numbers(5)
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        run = cluster.submit_topology("held", {}, topology(spout, Holds()))
        wait_for(lambda: run.stats.of("check").executed == 5, "the held tuples")
        UIClient(cluster.ui.url).control("held", "kill", wait=0.5)
        assert "held" not in cluster.runs
        assert spout.failed == set(range(5)) and spout.acked == set()
        assert (run.stats.of("numbers").failed, run.stats.of("numbers").timed_out) == (5, 0)


class CountBatch(BatchBolt):
    outputs = ("id", "count")

    def prepare(self, conf, context, collector, batch_id):
        self.collector, self.id, self.count = collector, batch_id, 0

    def execute(self, tup):
        self.count += 1

    def finish_batch(self):
        self.collector.emit([self.id, self.count])


class Total(BatchBolt, Committer):
    outputs = ("id", "total")

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.total = collector, attempt, 0

    def execute(self, tup):
        self.total += tup[1]

    def finish_batch(self):
        self.collector.emit([self.attempt, self.total])


def test_a_transactional_topology_shows_its_commits(spark):
    data = {0: [["a"], ["b"], ["c"], ["d"], ["e"]], 1: [["f"], ["g"], ["h"]]}
    builder = TransactionalTopologyBuilder("tx-count", "spout", MemoryTransactionalSpout(data, ["word"], 2), 2)
    builder.set_bolt("count", CountBatch(), 2).shuffle_grouping("spout")
    builder.set_bolt("total", Total()).global_grouping("count")
    with TestCluster({"squall.ui.port": 0}) as cluster:
        run = cluster.submit_topology("tx", {}, builder.build())
        cluster.wait_idle()
        detail = get(f"{cluster.ui.url}/api/v1/topology/tx")
    assert detail["kind"] == "transactional" and detail["status"] == "ACTIVE"
    tx = detail["transactional"]
    committed = [(attempt.txid, tuples) for attempt, tuples, _ in run.commits]
    assert tx["lastCommittedTxid"] == committed[-1][0] and tx["inFlight"] == []
    recent = [(c["txid"], c["tuples"]) for c in tx["recentCommits"]]
    assert recent == list(reversed(committed))[: len(recent)] and sum(n for _, n in committed) == 8
    assert all(c["seconds"] > 0 for c in tx["recentCommits"])


def test_a_port_in_use_is_an_error_unless_any_port_will_do(spark):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(SquallError, match=rf"cannot listen on 127.0.0.1:{port}: the port is in use"):
            LocalCluster({"squall.ui.port": port})
        with LocalCluster({"squall.ui.port": port}, ui_fallback=True) as cluster:
            assert cluster.ui.port != port
            assert get(f"{cluster.ui.url}/api/v1/topology/summary") == {"topologies": []}


class WaitForFile(BatchBolt):
    """Holds its batch's processing until a file exists: a batch the test can watch in flight."""

    outputs = ()

    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, conf, context, collector, batch_id):
        pass

    def execute(self, tup):
        pass

    def finish_batch(self):
        while not os.path.exists(self.path):
            time.sleep(0.01)


def test_an_attempt_in_flight_shows_its_phase_and_age(spark, tmp_path):
    release = tmp_path / "release"
    builder = TransactionalTopologyBuilder("tx-wait", "spout", MemoryTransactionalSpout({0: [["a"], ["b"]]}, ["w"], 2))
    builder.set_bolt("wait", WaitForFile(str(release))).shuffle_grouping("spout")
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        cluster.submit_topology("tx", {}, builder.build())
        url = f"{cluster.ui.url}/api/v1/topology/tx"
        try:
            in_process = lambda: [a for a in get(url)["transactional"]["inFlight"] if a["phase"] == "process"]  # noqa: E731
            wait_for(in_process, "an attempt in its process phase")
            first = in_process()[0]
            assert first["txid"] == 1 and first["ageSeconds"] >= 0
        finally:
            release.touch()  # else the batch never ends, nor does the cluster's shutdown
        wait_for(lambda: get(url)["transactional"]["lastCommittedTxid"] >= 1, "the commit")
        assert 1 in [c["txid"] for c in get(url)["transactional"]["recentCommits"]]


def test_a_trident_topology_shows_its_operations_by_name_and_its_batches(spark, tmp_path):
    from squall.trident import TridentTopology
    from squall.trident.builtin import Count
    from squall.trident.sqlite_state import SqliteMapState
    from squall.trident.testing import FixedBatchSpout, Split

    topology = TridentTopology()
    (
        topology.new_stream("named", FixedBatchSpout(["sentence"], 2, "a b", "b c", "c d"))
        .name("split")
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .name("counter")
        .persistent_aggregate(SqliteMapState.opaque(str(tmp_path / "counts.sqlite")), Count(), ["count"])
    )
    with TestCluster({"squall.ui.port": 0}) as cluster:
        run = cluster.submit_topology("trident", {}, topology.build())
        cluster.wait_idle()
        detail = get(f"{cluster.ui.url}/api/v1/topology/trident")
        metrics = get(f"{cluster.ui.url}/metrics")
    bolts = {b["id"]: b for b in detail["bolts"]}
    # b-0 splits and counts each batch's words (its nodes are named split, then counter); b-1 adds them up and
    # keeps them
    assert set(bolts) == {"b-0-split-counter", "b-1-counter"}
    assert bolts["b-0-split-counter"]["executed"] == 3  # the sentences
    assert bolts["b-1-counter"]["executed"] == 5  # each batch's partial counts: (a, b, c) then (c, d)
    assert detail["transactional"]["lastCommittedTxid"] == run.coordinator.last_committed >= 2
    assert metric(metrics, "squall_tuples_executed_total", topology="trident", component="b-1-counter") == 5
    assert metric(metrics, "squall_last_committed_txid", topology="trident") == run.coordinator.last_committed
    assert metric(metrics, "squall_batches_in_flight", topology="trident") == len(run.attempt_phases())
