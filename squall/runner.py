"""``squall run``: load a topology file, run it on Spark, show progress and a summary.

A topology file defines ``build_topology(conf)`` returning a built topology (or a
module-level ``topology``), and may define ``CONF`` (defaults, overridden by
``--conf``), ``NAME``, ``summary(conf, console)`` to report results at the end and,
for a transactional topology, ``on_commit(attempt, tuples, captured, console)``,
called after each commit with what each commit-phase bolt emitted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

from pyspark import cloudpickle
from rich.console import Console
from rich.live import Live
from rich.table import Table

from squall.model import config as cfg
from squall.model.components import StatefulBolt
from squall.model.errors import SquallError
from squall.model.topology import Topology
from squall.spark.driver import TopologyRun
from squall.spark.stats import RunStats

DEFAULT_CHECKPOINT_DIR = ".squall-state/checkpoints"  # squall run's, under the working directory


def split_pairs(pairs: list[str], option: str) -> list[tuple[str, str]]:
    """``key=value`` strings as ``(key, value)``; an error naming ``option`` for one without ``=``."""
    split = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SquallError(f"{option} expects key=value, got {pair!r}")
        split.append((key, value))
    return split


def parse_conf_pairs(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are read as JSON where they parse (numbers, true, null), else strings."""
    conf = {}
    for key, raw in split_pairs(pairs, "--conf"):
        try:
            conf[key] = json.loads(raw)
        except json.JSONDecodeError:
            conf[key] = raw
    return conf


def load_module(path: str | Path) -> ModuleType:
    """Load a topology file as ``python FILE`` would: its own directory first on ``sys.path``."""
    path = Path(path).resolve()
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # helper modules next to the file import as they would under python
    name = f"squall_topology_{path.stem}_{zlib.crc32(str(path).encode()):08x}"  # two files may share a stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SquallError(f"cannot load a topology from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)  # Spark's workers cannot import it by name
    return module


def parse_spark_pairs(pairs: list[str]) -> dict[str, str]:
    """``--spark-conf key=value`` pairs, kept as strings, as ``spark-submit --conf`` does."""
    return dict(split_pairs(pairs, "--spark-conf"))


def topology_of(module: ModuleType, conf: dict[str, Any]) -> Topology:
    if hasattr(module, "build_topology"):
        topology = module.build_topology(conf)
    elif hasattr(module, "topology"):
        topology = module.topology
    else:
        raise SquallError(f"{module.__file__} defines neither build_topology(conf) nor topology")
    from squall.transactional.builder import TransactionalTopology

    if not isinstance(topology, (Topology, TransactionalTopology)):
        raise SquallError(f"{module.__file__}: expected a built Topology (call builder.build()), got {topology!r}")
    return topology


def stats_table(stats: RunStats, topology: Topology) -> Table:
    table = Table("component", "kind", "emitted", "executed", "acked", "failed", "timed out", "malformed", "errors")
    for cid, spec in topology.components.items():
        c = stats.of(cid)
        table.add_row(
            cid,
            spec.kind,
            str(c.emitted),
            str(c.executed) if spec.kind == "bolt" else "",
            str(c.acked),
            str(c.failed),
            str(c.timed_out) if spec.kind == "spout" else "",
            str(c.malformed) if spec.kind == "spout" else "",
            str(c.errors),
        )
    table.caption = (
        f"waves {stats.waves} (failed {stats.failed_waves}, worker restarts {stats.restarts})"
        f" · pending trees {stats.pending}"
    )
    return table


def summary_table(run: TopologyRun) -> Table:
    total = run.stats.spout_totals(list(run.topology.spouts))
    p50, p99 = total.latency_percentile(50), total.latency_percentile(99)
    table = Table(
        "tuples emitted",
        "acked",
        "failed",
        "timed out",
        "malformed",
        "complete latency p50",
        "p99",
        title="summary (spout tuples)",
    )
    table.add_row(
        str(total.emitted),
        str(total.acked),
        str(total.failed),
        str(total.timed_out),
        str(total.malformed),
        f"{p50:.0f} ms" if p50 is not None else "-",
        f"{p99:.0f} ms" if p99 is not None else "-",
    )
    return table


def run_file(
    path: str,
    conf_pairs: list[str],
    master: str | None,
    name: str | None,
    duration: float | None,
    idle_secs: float,
    console: Console | None = None,
    spark_pairs: list[str] | None = None,
) -> TopologyRun:
    """Run the topology of ``path`` until idle, ``duration`` or Ctrl-C; raises ``TopologyFailed`` if it was stopped."""
    from squall.spark.cluster import LocalCluster

    console = console or Console()
    module = load_module(path)
    conf = {**getattr(module, "CONF", {}), **parse_conf_pairs(conf_pairs)}
    if master:
        conf[cfg.SQUALL_SPARK_MASTER] = master
    if spark_pairs:
        conf[cfg.SQUALL_SPARK_CONF] = {**conf.get(cfg.SQUALL_SPARK_CONF, {}), **parse_spark_pairs(spark_pairs)}
    topology = topology_of(module, conf)
    graph = getattr(topology, "topology", topology)  # a transactional topology wraps its graph
    declared = graph.conf
    if cfg.SQUALL_TRANSACTIONAL_STORE not in declared:  # after build_topology, which may choose one
        # The durable default, so that a restarted ``squall run`` resumes (LocalCluster would own a temporary one).
        conf.setdefault(cfg.SQUALL_TRANSACTIONAL_STORE, cfg.DEFAULTS[cfg.SQUALL_TRANSACTIONAL_STORE])
    stateful = any(isinstance(spec.obj, StatefulBolt) for spec in graph.bolts.values())
    if stateful and cfg.SQUALL_CHECKPOINT_DIR not in {**declared, **conf}:  # so that a restart resumes their state
        conf[cfg.SQUALL_CHECKPOINT_DIR] = os.path.abspath(DEFAULT_CHECKPOINT_DIR)
    name = name or getattr(module, "NAME", Path(path).stem)
    squall_conf = {k: v for k, v in conf.items() if k.startswith("squall.")}
    with LocalCluster(squall_conf) as cluster:
        console.print(f"[bold]squall[/bold] running {name!r} on Spark {cluster.sc.version} ({cluster.sc.master})")
        if cluster.conf[cfg.SQUALL_SPARK_UI] and cluster.sc.uiWebUrl:
            console.print(f"Spark UI at {cluster.sc.uiWebUrl}")
        run = cluster.submit_topology(name, conf, topology)
        if hasattr(module, "on_commit") and hasattr(run, "on_commit"):
            run.on_commit.append(lambda attempt, tuples, captured: module.on_commit(attempt, tuples, captured, console))
        started = time.monotonic()
        model = run.topology  # the component graph, for either kind of topology
        with Live(stats_table(run.stats, model), console=console, refresh_per_second=2) as live:
            try:
                while True:
                    time.sleep(0.25)
                    live.update(stats_table(run.stats, model))
                    if duration is not None and time.monotonic() - started >= duration:
                        break
                    if idle_secs and run.idle_for() >= idle_secs:
                        break
                    if name in cluster.failures:
                        break
            except KeyboardInterrupt:
                console.print("interrupted")
            cluster.kill_topology(name)
            live.update(stats_table(run.stats, model))
        failure = cluster.failures.get(name)
    console.print()
    if failure is not None:
        raise failure
    if hasattr(run, "commits"):
        malformed = run.stats.spout_totals(list(run.topology.spouts)).malformed
        console.print(f"transactions committed: {len(run.commits)} (last txid {run.coordinator.last_committed})")
        console.print(f"malformed messages set aside: {malformed}")
    else:
        console.print(summary_table(run))
    if hasattr(module, "summary"):
        module.summary(conf, console)
    return run
