"""``squall run``: load a topology file, run it on Spark, show progress and a summary.

A topology file defines ``build_topology(conf)`` returning a built topology (or a
module-level ``topology``), and may define ``CONF`` (defaults, overridden by
``--conf``), ``NAME``, ``summary(conf, console)`` to report results at the end and,
for a transactional topology, ``on_commit(attempt, tuples, captured, console)``,
called after each commit with what each commit-phase bolt emitted.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import os
import signal
import sys
import threading
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
from squall.model.errors import SquallError, TopologyFailed
from squall.model.topology import Topology
from squall.spark.run import TRANSACTIONAL, Run
from squall.spark.shipping import check_shippable
from squall.spark.stats import RunStats

DEFAULT_CHECKPOINT_DIR = ".squall-state/checkpoints"  # squall run's, under the working directory
RATE_SECS = 1.0  # the live table's rates are over about this long
DEFAULT_UI_PORT = 8080
DEFAULT_KILL_WAIT_SECS = 5.0  # Ctrl-C's wait for pending trees
DEFAULT_PROGRESS_SECS = 10.0  # with no terminal to draw the live table on, a progress line this often


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


def compact(n: float) -> str:
    """A count in at most 7 characters: 99999, 123.4k, 12.35M."""
    if n < 100_000:
        return f"{n:.0f}"
    if n < 10_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1e6:.2f}M"


class LiveTable:
    """``squall run``'s live table, readable in an 80-column terminal: each component's counts and its rate
    (spouts' emits, bolts' executes per second over the last second or so); the rest is in the caption, and the
    web page has every figure."""

    def __init__(self, stats: RunStats, topology: Topology, clock=time.monotonic) -> None:
        self.stats, self.topology, self._clock = stats, topology, clock
        self._last: tuple[float, dict[str, int]] | None = None  # when the rates were last taken, and the counts
        self._rates: dict[str, float] = {}

    def _moved(self, cid: str) -> int:
        c = self.stats.peek(cid)
        return c.emitted if self.topology.components[cid].kind == "spout" else c.executed

    def render(self) -> Table:
        stats, now = self.stats, self._clock()
        moved = {cid: self._moved(cid) for cid in self.topology.components}
        if self._last is None:
            self._last = (now, moved)
        elif now - self._last[0] >= RATE_SECS:
            before, seconds = self._last[1], now - self._last[0]
            self._rates = {cid: (n - before.get(cid, 0)) / seconds for cid, n in moved.items()}
            self._last = (now, moved)
        rates = self._rates
        width = max((len(cid) for cid in self.topology.components), default=9)
        table = Table(box=None, padding=(0, 1))
        table.add_column("component", no_wrap=True, min_width=min(width, 30), overflow="fold")
        for header in ("emitted", "executed", "acked", "failed", "per sec"):
            table.add_column(header, justify="right", no_wrap=True)
        for cid, spec in self.topology.components.items():
            c = stats.peek(cid)
            rate = rates.get(cid)
            table.add_row(
                cid,
                compact(c.emitted),
                compact(c.executed) if spec.kind == "bolt" else "-",
                compact(c.acked),
                compact(c.failed),
                compact(rate) if rate is not None else "",
            )
        spouts = stats.spout_totals(list(self.topology.spouts))
        errors = sum(stats.peek(cid).errors for cid in self.topology.components)
        table.caption = (
            f"waves {stats.waves} · pending trees {stats.pending} · worker restarts {stats.restarts}\n"
            f"timed out {spouts.timed_out} · malformed {spouts.malformed} · errors {errors}"
        )
        table.caption_justify = "left"
        return table


class ProgressLines:
    """``squall run``'s progress when its output is not a terminal (nohup, CI, a pipe): one plain line at a time,
    of the spouts' tuples so far, their emit rate since the last line and their complete latency so far."""

    def __init__(self, run: Run, clock=time.monotonic) -> None:
        self.run, self._clock = run, clock
        self._started = self._last_time = clock()
        self._last_emitted = 0

    def line(self) -> str:
        run, now = self.run, self._clock()
        total = run.stats.spout_totals(list(run.topology.spouts))
        seconds = now - self._last_time
        rate = (total.emitted - self._last_emitted) / seconds if seconds > 0 else 0.0
        self._last_time, self._last_emitted = now, total.emitted
        p50, p99 = total.latency_percentile(50), total.latency_percentile(99)
        latency = f"p50 {p50:.0f} ms p99 {p99:.0f} ms" if p50 is not None and p99 is not None else "-"
        elapsed = datetime.timedelta(seconds=round(now - self._started))
        line = (
            f"progress {elapsed}: emitted {total.emitted} ({rate:.0f}/s), acked {total.acked}, "
            f"failed {total.failed}, pending trees {run.stats.pending}, complete latency {latency}"
        )
        if run.kind == TRANSACTIONAL:
            line += f", transactions committed {len(run.commits)}"
        return line


def summary_table(run: Run) -> Table:
    """What the spouts' tuples came to, one figure a line."""
    total = run.stats.spout_totals(list(run.topology.spouts))
    p50, p99 = total.latency_percentile(50), total.latency_percentile(99)
    table = Table("spout tuples", "", title="summary", box=None, padding=(0, 1))
    for label, value in (
        ("emitted", total.emitted),
        ("acked", total.acked),
        ("failed", total.failed),
        ("timed out", total.timed_out),
        ("malformed", total.malformed),
    ):
        table.add_row(label, str(value))
    rate = run.stats.spout_throughput(total.acked)
    table.add_row("acked per second", f"{rate:,.0f}" if rate is not None else "-")
    table.add_row("complete latency p50", f"{p50:.0f} ms" if p50 is not None else "-")
    table.add_row("complete latency p99", f"{p99:.0f} ms" if p99 is not None else "-")
    return table


ERRORS_SHOWN = 3  # the last distinct errors a run's summary shows in full


def print_errors(run: Run, console: Console) -> None:
    """The run's error count and its last few distinct errors, each with its traceback (a task that could not
    be set up included), as the web UI's "Last errors" shows them."""
    errors = list(run.stats.errors)
    total = sum(run.stats.peek(cid).errors for cid in run.topology.components)
    if not total and not errors:
        return
    shown: list[str] = []
    for report in reversed(errors):
        if report.text not in shown:
            shown.append(report.text)
        if len(shown) == ERRORS_SHOWN:
            break
    console.print(f"errors: {max(total, len(errors))}; the last {len(shown)} distinct:", highlight=False)
    for text in shown:
        console.print(text.rstrip(), highlight=False, markup=False, soft_wrap=True)


def run_file(
    path: str,
    conf_pairs: list[str],
    master: str | None,
    name: str | None,
    duration: float | None,
    idle_secs: float,
    console: Console | None = None,
    spark_pairs: list[str] | None = None,
    ui_port: int | None = None,
    ui_host: str | None = None,
    ui: bool = True,
    kill_wait: float = DEFAULT_KILL_WAIT_SECS,
    progress_secs: float = DEFAULT_PROGRESS_SECS,
) -> Run:
    """Run the topology of ``path`` until idle, ``duration``, ``squall kill`` or Ctrl-C; raises ``TopologyFailed``
    if a failure stopped it.

    The web UI, REST API and /metrics are served on ``ui_host:ui_port`` (127.0.0.1:8080, or a free port when
    8080 is taken and no port was asked for) unless ``ui`` is false. Ctrl-C stops the topology as ``squall kill``
    does, waiting up to ``kill_wait`` seconds for pending trees.

    On a terminal, progress is a live table; otherwise (output to a file or a pipe) it is a plain line every
    ``progress_secs`` seconds, and the table is printed once at the end."""
    from squall.cluster import LocalCluster

    console = console or Console()
    module = load_module(path)
    conf = {**getattr(module, "CONF", {}), **parse_conf_pairs(conf_pairs)}
    if master:
        conf[cfg.SQUALL_SPARK_MASTER] = master
    if spark_pairs:
        conf[cfg.SQUALL_SPARK_CONF] = {**conf.get(cfg.SQUALL_SPARK_CONF, {}), **parse_spark_pairs(spark_pairs)}
    topology = topology_of(module, conf)
    check_shippable(topology)  # a component that cannot travel to the workers is refused before Spark starts
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
    fallback = False
    if not ui:
        squall_conf[cfg.SQUALL_UI_PORT] = None
    elif ui_port is not None:
        squall_conf[cfg.SQUALL_UI_PORT] = ui_port
    elif squall_conf.get(cfg.SQUALL_UI_PORT) is None:
        squall_conf[cfg.SQUALL_UI_PORT], fallback = DEFAULT_UI_PORT, True  # no port asked for: any will do
    if ui and ui_host is not None:
        squall_conf[cfg.SQUALL_UI_HOST] = ui_host
    interrupted = threading.Event()

    def on_ctrl_c(signum, frame) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: stop at once
        interrupted.set()  # the first: the loop below stops the topology as kill -w does

    with LocalCluster(squall_conf, ui_fallback=fallback) as cluster:
        if threading.current_thread() is threading.main_thread():
            # In place of PySpark's own handler, which cancels every job, the worker job too.
            signal.signal(signal.SIGINT, on_ctrl_c)
        console.print(f"[bold]squall[/bold] running {name!r} on Spark {cluster.sc.version} ({cluster.sc.master})")
        if cluster.ui is not None:
            console.print(f"web UI at {cluster.ui.url}", highlight=False)
        if cluster.conf[cfg.SQUALL_SPARK_UI] and cluster.sc.uiWebUrl:
            console.print(f"Spark UI at {cluster.sc.uiWebUrl}")
        run = cluster.submit_topology(name, conf, topology)
        if hasattr(module, "on_commit") and run.kind == TRANSACTIONAL:
            run.on_commit.append(lambda attempt, tuples, captured: module.on_commit(attempt, tuples, captured, console))
        started = time.monotonic()
        model = run.topology  # the component graph, for either kind of topology
        table = LiveTable(run.stats, model)
        terminal = console.is_terminal and not console.is_dumb_terminal
        progress = ProgressLines(run)
        last_line = time.monotonic()
        live_display = Live(table.render(), console=console, refresh_per_second=2) if terminal else None
        with live_display if live_display is not None else contextlib.nullcontext() as live:
            stop_wait = None
            while True:
                time.sleep(0.25)
                rendered = table.render()  # without a terminal too, so that the closing table has rates
                if live is not None:
                    live.update(rendered)
                elif time.monotonic() - last_line >= progress_secs:
                    last_line = time.monotonic()
                    console.print(progress.line(), highlight=False, markup=False, soft_wrap=True)
                if name in cluster.failures:  # first: a failure is never read as the idle stop
                    break
                if interrupted.is_set():
                    console.print(f"interrupted: stopping, pending trees get up to {kill_wait:g}s")
                    stop_wait = kill_wait
                    break
                if duration is not None and time.monotonic() - started >= duration:
                    break
                if idle_secs and run.idle_for() >= idle_secs:
                    break
                if name not in cluster.runs:  # squall kill
                    break
            with contextlib.suppress(SquallError):  # squall kill may have got there first
                cluster.kill_topology(name, stop_wait)
            if live is not None:
                live.update(table.render())
            else:
                console.print(table.render())
            failure = cluster.take_failure(name)
            why = run.not_started() if failure is None else None
            if why is not None:  # stopped (a duration, a kill) before its tasks were ever up
                failure = TopologyFailed(f"topology {name!r} could not start: {why}")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    console.print()
    if failure is not None:
        print_errors(run, console)
        raise failure
    if run.kind == TRANSACTIONAL:
        malformed = run.stats.spout_totals(list(run.topology.spouts)).malformed
        console.print(f"transactions committed: {len(run.commits)} (last txid {run.coordinator.last_committed})")
        console.print(f"malformed messages set aside: {malformed}")
    else:
        console.print(summary_table(run))
    print_errors(run, console)
    if hasattr(module, "summary"):
        module.summary(conf, console)
    return run
