"""A running topology's figures as JSON-ready dicts, the one source of the web page, the REST API and /metrics.

The shapes follow Storm UI's ``/api/v1/``: a summary per topology, a topology's
spouts and bolts, and a component's tasks. Latencies come from the runs'
bounded histograms, never from raw lists. A bolt's *capacity* is Storm's: the
share of the time waves were running that its busiest task spent executing
tuples (near 1, the bolt is the bottleneck). A transactional topology's is over
its uptime.

Every figure is also given over Storm's windows (the last 10 minutes, 3 hours, a day, and all time), from the
sums ``history.RunHistory`` keeps of the flat totals ``cumulative_figures`` reads: a component's ``windows``,
the topology's ``topologyStats`` and each stream's counts.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from typing import Any

from squall.model import config as cfg
from squall.model.drawing import edges
from squall.model.topology import Topology
from squall.model.urls import redact_config
from squall.spark.run import TRANSACTIONAL, Run
from squall.spark.stats import ComponentStats, RunStats
from squall.ui.history import ALL_TIME, WINDOWS

ACTIVE, INACTIVE, FAILED = "ACTIVE", "INACTIVE", "FAILED"


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def status_of(run: Run, failed: bool) -> str:
    if failed:
        return FAILED
    return INACTIVE if not run.wanted_active else ACTIVE


def uptime_secs(run: Run) -> float:
    return max(0.0, run.clock.now() - run.started_at)


def buffered_bytes(run: Run) -> tuple[int, int]:
    """Bytes on the way: ``(hub, links)``: what the driver's hub holds for the workers, not yet sent, and what
    the workers' links hold (received and not yet handled, or sent and not yet acknowledged by the peer)."""
    return run.scheduler.buffered_bytes()


def topology_summary(name: str, run: Run, failed: bool = False) -> dict[str, Any]:
    stats: RunStats = run.stats
    uptime = uptime_secs(run)
    hub_bytes, link_bytes = buffered_bytes(run)
    return {
        "name": name,
        "kind": run.kind,
        "status": status_of(run, failed),
        "uptimeSeconds": round(uptime, 3),
        "waves": stats.waves,
        "wavesPerSecond": round(stats.waves / uptime, 3) if uptime else 0.0,
        "pendingTrees": stats.pending,
        "maxSpoutPending": run.conf[cfg.TOPOLOGY_MAX_SPOUT_PENDING],
        "messageTimeoutSeconds": run.conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS],
        "workerRestarts": stats.restarts,
        "failedWaves": stats.failed_waves,
        "hubBufferedBytes": hub_bytes,
        "linkBufferedBytes": link_bytes,
        "inboxPeakBytes": stats.inbox_peak_bytes,
        "spouts": len(run.topology.spouts),
        "bolts": len(run.topology.bolts),
        "tasks": sum(spec.parallelism for spec in run.topology.components.values()),
    }


def _spout_figures(c: ComponentStats) -> dict[str, Any]:
    return {
        "emitted": c.emitted,
        "acked": c.acked,
        "failed": c.failed,
        "timedOut": c.timed_out,
        "malformed": c.malformed,
        "errors": c.errors,
        "completeLatencyMs": {"p50": _ms(c.latency_percentile(50)), "p99": _ms(c.latency_percentile(99))},
    }


def _bolt_figures(c: ComponentStats, running: float) -> dict[str, Any]:
    return {
        "executed": c.executed,
        "emitted": c.emitted,
        "acked": c.acked,
        "failed": c.failed,
        "errors": c.errors,
        "executeLatencyMs": _ms(c.execute_latency_ms),
        "processLatencyMs": _ms(c.process_latency_ms),
        "capacity": round(c.busy_seconds / running, 3) if running else 0.0,
    }


def running_secs(stats: RunStats, uptime: float) -> float:
    """The time a bolt could have been busy: while waves ran (a transactional topology: its uptime)."""
    return stats.wave_seconds or uptime


def system_components(run: Run) -> dict[str, list[int]]:
    """Components squall adds, as Storm adds its own: ``__acker`` with its tasks, when they run on the workers."""
    return {"__acker": list(run.acker_task_ids)} if run.acker_task_ids else {}


def system_figures(run: Run, cid: str, uptime: float) -> dict[str, Any]:
    """An acker component's figures: acks it merged (executed) and trees it settled (emitted)."""
    tasks = system_components(run)[cid]
    figures = _bolt_figures(run.stats.peek(cid), running_secs(run.stats, uptime))
    return {"id": cid, "type": "bolt", "tasks": len(tasks), **figures}


def component_figures(topology: Topology, stats: RunStats, cid: str, uptime: float) -> dict[str, Any]:
    spec = topology.components[cid]
    c = stats.peek(cid)
    running = running_secs(stats, uptime)
    figures = _spout_figures(c) if spec.kind == "spout" else _bolt_figures(c, running)
    if spec.kind == "bolt":  # Storm's capacity: the busiest task's
        busy = max((stats.peek(cid, t).busy_seconds for t in spec.tasks), default=0.0)
        figures["capacity"] = round(busy / running, 3) if running else 0.0
    return {"id": cid, "type": spec.kind, "tasks": spec.parallelism, **figures}


def topology_detail(
    name: str, run: Any, failed: bool = False, windows: Mapping[str, Mapping[Hashable, float]] | None = None
) -> dict[str, Any]:
    """A topology's figures; with ``windows`` (``RunHistory.windows``), each component's over every window too,
    the ``topologyStats`` rows, and the ``streams``."""
    topology, stats, uptime = run.topology, run.stats, uptime_secs(run)
    detail = topology_summary(name, run, failed)
    detail["spouts"] = [component_figures(topology, stats, cid, uptime) for cid in topology.spouts]
    detail["bolts"] = [component_figures(topology, stats, cid, uptime) for cid in topology.bolts]
    detail["bolts"] += [system_figures(run, cid, uptime) for cid in system_components(run)]
    if windows is not None:
        for c in detail["spouts"] + detail["bolts"]:
            tasks = _tasks_of(run, c["id"])
            c["windows"] = {key: window_figures(sums, c["id"], c["type"], tasks) for key, sums in windows.items()}
        detail["topologyStats"] = topology_stats(windows)
        detail["streams"] = streams(run, windows)
    detail["workers"] = workers(run)
    detail["graph"] = [
        {"source": source, "target": target, "stream": stream, "grouping": grouping}
        for source, target, stream, grouping in edges(topology)
    ]
    errors = list(stats.errors)  # one C-level copy: the run's thread may be appending
    detail["errors"] = [
        {"component": e.component, "task": e.task, "time": e.time, "error": e.text} for e in reversed(errors)
    ]
    if run.kind == TRANSACTIONAL:
        detail["transactional"] = transactional_figures(run)
    detail["configuration"] = redact_config(run.conf)  # Storm UI's "Topology Configuration", secrets masked
    return detail


def component_detail(
    name: str, run: Any, cid: str, windows: Mapping[str, Mapping[Hashable, float]] | None = None
) -> dict[str, Any]:
    """A component's figures and its tasks'; with ``windows``, its figures over every window, and the streams
    it takes (``inputs``) and those it gives (``outputs``)."""
    detail = _component_detail(name, run, cid)
    if windows is not None:
        tasks = _tasks_of(run, cid)
        detail["windows"] = {key: window_figures(sums, cid, detail["type"], tasks) for key, sums in windows.items()}
        rows = streams(run, windows)
        detail["inputs"] = [r for r in rows if r["target"] == cid]
        detail["outputs"] = [r for r in rows if r["source"] == cid]
    return detail


def _component_detail(name: str, run: Any, cid: str) -> dict[str, Any]:
    topology, stats, uptime = run.topology, run.stats, uptime_secs(run)
    system = system_components(run)
    if cid in system:
        running = running_secs(stats, uptime)
        rows = [{"task": task, **_bolt_figures(stats.peek(cid, task), running)} for task in system[cid]]
        return {"topology": name, **system_figures(run, cid, uptime), "taskStats": rows, "errors": []}
    detail = {"topology": name, **component_figures(topology, stats, cid, uptime)}
    spec = topology.components[cid]
    rows = []
    for task in spec.tasks:
        c = stats.peek(cid, task)
        figures = _spout_figures(c) if spec.kind == "spout" else _bolt_figures(c, running_secs(stats, uptime))
        rows.append({"task": task, **figures})
    detail["taskStats"] = rows
    detail["errors"] = [
        {"task": e.task, "time": e.time, "error": e.text} for e in reversed(list(stats.errors)) if e.component == cid
    ]
    return detail


def transactional_figures(run: Run) -> dict[str, Any]:
    """The coordinator's progress: the last committed txid, the attempts in flight, the recent commits."""
    now = time.time()
    return {
        "lastCommittedTxid": run.coordinator.last_committed,
        "inFlight": [
            {"txid": a.txid, "attemptId": a.attempt_id, "phase": phase, "ageSeconds": round(now - since, 3)}
            for a, (phase, since) in sorted(run.attempt_phases().items(), key=lambda item: item[0].txid)
        ],
        "recentCommits": [
            {
                "txid": a.txid,
                "attemptId": a.attempt_id,
                "tuples": tuples,
                "seconds": round(seconds, 3),
                "began": round(began, 3),
            }
            for a, tuples, seconds, began in run.recent_commits()
        ],
    }


# -- windows ---------------------------------------------------------------------------
TOPOLOGY = ""  # the component part of a topology-wide figure's key
# ComponentStats attribute -> the figure's name, of the counters every window sums
COUNTED = (
    ("emitted", "emitted"),
    ("executed", "executed"),
    ("acked", "acked"),
    ("failed", "failed"),
    ("timed_out", "timedOut"),
    ("malformed", "malformed"),
    ("errors", "errors"),
    ("busy_seconds", "busy"),
    ("process_seconds", "process"),
)


def _tasks_of(run: Run, cid: str) -> list[int]:
    system = system_components(run)
    return system[cid] if cid in system else list(run.topology.components[cid].tasks)


def cumulative_figures(run: Run) -> dict[Hashable, float]:
    """Every windowed figure's total so far, flat: ``(component, figure)``; ``(component, "busy", task)`` per
    bolt task (for capacity); ``(bolt, "in", source, stream)`` for the tuples a bolt executed of each stream;
    ``("", figure)`` topology-wide: its spouts' emitted, acked, failed and latencies, and ``waveSeconds``."""
    stats, topology = run.stats, run.topology
    totals: dict[Hashable, float] = {}
    spout_totals = dict.fromkeys(("emitted", "acked", "failed", "latencyCount", "latencySum"), 0.0)
    components = [(cid, spec.kind) for cid, spec in topology.components.items()]
    components += [(cid, "bolt") for cid in system_components(run)]
    for cid, kind in components:
        c = stats.peek(cid)
        for attribute, figure in COUNTED:
            totals[(cid, figure)] = getattr(c, attribute)
        if kind == "spout":
            count, total = c.latency_total()
            totals[(cid, "latencyCount")], totals[(cid, "latencySum")] = count, total
            for figure in spout_totals:
                spout_totals[figure] += totals[(cid, figure)]
        else:
            for task in _tasks_of(run, cid):
                totals[(cid, "busy", task)] = stats.peek(cid, task).busy_seconds
            for (source, stream), n in c.inputs.items():
                totals[(cid, "in", source, stream)] = n
    for figure, value in spout_totals.items():
        totals[(TOPOLOGY, figure)] = value
    totals[(TOPOLOGY, "waveSeconds")] = stats.wave_seconds
    return totals


def chart_point(growth: Mapping[Hashable, float], seconds: float) -> dict[str, Any]:
    """A chart point from what the figures grew by over ``seconds``: the spouts' emits, acks (trees completed)
    and fails per second, and the mean complete latency of the trees completed meanwhile."""
    count = growth.get((TOPOLOGY, "latencyCount"), 0)
    latency = growth.get((TOPOLOGY, "latencySum"), 0) / count / 1000 if count else None
    return {
        "emitted": round(growth.get((TOPOLOGY, "emitted"), 0) / seconds, 3),
        "acked": round(growth.get((TOPOLOGY, "acked"), 0) / seconds, 3),
        "failed": round(growth.get((TOPOLOGY, "failed"), 0) / seconds, 3),
        "completeLatencyMs": _ms(latency),
    }


def chart_gauges(run: Run) -> dict[str, Any]:
    return {"pendingTrees": run.stats.pending}


def _per(sums: Mapping[Hashable, float], numerator: Hashable, denominator: Hashable, scale: float) -> float | None:
    under = sums.get(denominator, 0)
    return _ms(sums.get(numerator, 0) / under * scale) if under else None


def window_figures(sums: Mapping[Hashable, float], cid: str, kind: str, tasks: list[int]) -> dict[str, Any]:
    """A component's figures over one window, from its sums: counts, and latencies as means over the window
    (Storm's: complete latency for a spout, execute and process latency for a bolt), in milliseconds."""

    def count(figure: str) -> int:
        return round(sums.get((cid, figure), 0))

    if kind == "spout":
        figures: dict[str, Any] = {f: count(f) for f in ("emitted", "acked", "failed", "timedOut", "malformed")}
        figures["errors"] = count("errors")
        figures["completeLatencyMs"] = _per(sums, (cid, "latencySum"), (cid, "latencyCount"), 1 / 1000)
        return figures
    figures = {f: count(f) for f in ("executed", "emitted", "acked", "failed", "errors")}
    figures["executeLatencyMs"] = _per(sums, (cid, "busy"), (cid, "executed"), 1000)
    measured = sums.get((cid, "process"), 0)  # none for the acker tasks, or a transactional topology's batches
    figures["processLatencyMs"] = _per(sums, (cid, "process"), (cid, "executed"), 1000) if measured else None
    running = sums.get((TOPOLOGY, "waveSeconds"), 0)
    busiest = max((sums.get((cid, "busy", t), 0) for t in tasks), default=0)
    figures["capacity"] = round(min(busiest / running, 1.0), 3) if running else 0.0
    return figures


def topology_stats(windows: Mapping[str, Mapping[Hashable, float]]) -> list[dict[str, Any]]:
    """Storm UI's "Topology stats": a row per window of the spouts' emitted, acked, failed and mean complete
    latency."""
    rows = []
    for window in (*WINDOWS, ALL_TIME):
        sums = windows.get(window.key, {})
        rows.append(
            {
                "window": window.key,
                "windowPretty": window.pretty,
                **{f: round(sums.get((TOPOLOGY, f), 0)) for f in ("emitted", "acked", "failed")},
                "completeLatencyMs": _per(sums, (TOPOLOGY, "latencySum"), (TOPOLOGY, "latencyCount"), 1 / 1000),
            }
        )
    return rows


def streams(run: Run, windows: Mapping[str, Mapping[Hashable, float]]) -> list[dict[str, Any]]:
    """The tuples each bolt executed of each stream it takes, by source component, over every window (Storm's
    input stats); what a component's stream carried to all its bolts is their sum (Storm's transferred)."""
    keys = sorted({key for sums in windows.values() for key in sums if len(key) == 4 and key[1] == "in"})
    return [
        {
            "source": source,
            "stream": stream,
            "target": target,
            "executed": {w: round(sums.get((target, "in", source, stream), 0)) for w, sums in windows.items()},
        }
        for target, _, source, stream in sorted(keys, key=lambda k: (k[2], k[3], k[0]))
    ]


def workers(run: Run) -> list[dict[str, Any]]:
    """The run's workers now: host, pid, uptime, the tasks each hosts (``component:task``), resident memory."""
    summaries = run.scheduler.worker_summaries()
    now = time.time()
    rows = []
    for w in summaries:
        tasks = [f"{run.topology.component_of(t)}:{t}" for t in w.tasks]
        tasks += [f"__acker:{run.acker_task_ids[a]}" for a in w.ackers if a < len(run.acker_task_ids)]
        rows.append(
            {
                "worker": w.worker,
                "host": w.host,
                "pid": w.pid,
                "uptimeSeconds": round(max(0.0, now - w.started_at), 3),
                "tasks": tasks,
                "memoryBytes": w.memory_bytes,
            }
        )
    return rows
