"""A running topology's figures as JSON-ready dicts, the one source of the web page, the REST API and /metrics.

The shapes follow Storm UI's ``/api/v1/``: a summary per topology, a topology's
spouts and bolts, and a component's tasks. Latencies come from the runs'
bounded histograms, never from raw lists. A bolt's *capacity* is Storm's: the
share of the time waves were running that its busiest task spent executing
tuples (near 1, the bolt is the bottleneck). A transactional topology's is over
its uptime.
"""

from __future__ import annotations

import time
from typing import Any

from squall.model import config as cfg
from squall.model.drawing import edges
from squall.model.topology import Topology
from squall.model.urls import redact_config
from squall.spark.run import TRANSACTIONAL, Run
from squall.spark.stats import ComponentStats, RunStats

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


def topology_detail(name: str, run: Any, failed: bool = False) -> dict[str, Any]:
    topology, stats, uptime = run.topology, run.stats, uptime_secs(run)
    detail = topology_summary(name, run, failed)
    detail["spouts"] = [component_figures(topology, stats, cid, uptime) for cid in topology.spouts]
    detail["bolts"] = [component_figures(topology, stats, cid, uptime) for cid in topology.bolts]
    detail["bolts"] += [system_figures(run, cid, uptime) for cid in system_components(run)]
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


def component_detail(name: str, run: Any, cid: str) -> dict[str, Any]:
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
