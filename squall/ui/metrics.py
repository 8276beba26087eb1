"""Prometheus metrics of a cluster's topologies, read from their stats at each scrape.

Counters and gauges carry ``topology`` and ``component`` labels (and ``task``
where a figure is per task); the complete latency is a histogram made from the
spouts' bounded HdrHistograms, never from raw lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from squall.spark.stats import ComponentStats
from squall.ui.figures import ACTIVE, buffered_bytes, status_of, system_components, uptime_secs

# Complete-latency bucket bounds, in seconds.
LATENCY_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75),
    *(1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0),
)

# (metric name, help, ComponentStats attribute, kinds it applies to)
COUNTERS = (
    ("squall_tuples_emitted", "Tuples emitted", "emitted", ("spout", "bolt")),
    ("squall_tuples_executed", "Tuples a bolt executed", "executed", ("bolt",)),
    ("squall_tuples_acked", "Tuples acked (a spout's: trees completed)", "acked", ("spout", "bolt")),
    ("squall_tuples_failed", "Tuples failed (a spout's: trees failed, timeouts included)", "failed", ("spout", "bolt")),
    ("squall_tuples_timed_out", "Spout tuples whose tree timed out", "timed_out", ("spout",)),
    ("squall_messages_malformed", "Source messages set aside as malformed", "malformed", ("spout",)),
    ("squall_errors", "Errors a component raised or reported", "errors", ("spout", "bolt")),
    ("squall_execute_seconds", "Time a bolt's tasks spent executing tuples", "busy_seconds", ("bolt",)),
)


def _latency_histogram(name: str, labels: list[str], rows: Iterable[tuple[list[str], ComponentStats]]):
    family = HistogramMetricFamily(name, "Complete latency of spout tuples, emit to ack", labels=labels, unit="")
    for values, stats in rows:
        hist = stats.latency_copy()  # the topology goes on recording into its own
        total = hist.get_total_count()
        cumulative, buckets = 0, []
        recorded = [(item.value_iterated_to, item.count_at_value_iterated_to) for item in hist.get_recorded_iterator()]
        position = 0
        for bound in LATENCY_BUCKETS:
            limit = bound * 1e6  # the histogram holds microseconds
            while position < len(recorded) and recorded[position][0] <= limit:
                cumulative += recorded[position][1]
                position += 1
            buckets.append((repr(bound), cumulative))
        buckets.append(("+Inf", total))
        mean = hist.get_mean_value() if total else 0.0
        family.add_metric(values, buckets, sum_value=mean * total / 1e6)
    return family


class TopologyCollector(Collector):
    """Reads ``runs()``: ``{name: (run, failed)}``."""

    def __init__(self, runs: Callable[[], dict[str, tuple[Any, bool]]]) -> None:
        self._runs = runs

    def collect(self):
        runs = self._runs()
        labels = ["topology", "component"]
        counters = {name: CounterMetricFamily(name, text, labels=labels) for name, text, _, _ in COUNTERS}
        task_counters = {
            name: CounterMetricFamily(f"{name}_by_task", f"{text}, per task", labels=[*labels, "task"])
            for name, text, _, _ in COUNTERS
        }
        by_topology = ["topology"]
        gauges = {
            "pending": GaugeMetricFamily("squall_pending_trees", "Tuple trees pending", labels=by_topology),
            "active": GaugeMetricFamily("squall_topology_active", "1 while the spouts are active", labels=by_topology),
            "uptime": GaugeMetricFamily(
                "squall_uptime_seconds", "Seconds since the topology started", labels=by_topology
            ),
            "hub": GaugeMetricFamily(
                "squall_hub_buffered_bytes",
                "Bytes the driver's hub holds for the workers, not yet sent",
                labels=by_topology,
            ),
            "links": GaugeMetricFamily(
                "squall_link_buffered_bytes",
                "Bytes the workers' links hold: received and not yet handled, or sent and not yet acknowledged",
                labels=by_topology,
            ),
            "inbox_peak": GaugeMetricFamily(
                "squall_worker_inbox_peak_bytes",
                "The most any worker's inbox held at once while the last completed wave ran",
                labels=by_topology,
            ),
        }
        waves = CounterMetricFamily("squall_waves", "Waves (transactional: batches) completed", labels=by_topology)
        committed = GaugeMetricFamily(
            "squall_last_committed_txid",
            "A transactional (or Trident) topology's last committed txid",
            labels=by_topology,
        )
        in_flight = GaugeMetricFamily(
            "squall_batches_in_flight", "A transactional (or Trident) topology's batches in flight", labels=by_topology
        )
        restarts = CounterMetricFamily("squall_worker_restarts", "Times the workers restarted", labels=by_topology)
        latency_rows = []
        for name, (run, failed) in runs.items():
            stats, topology = run.stats, run.topology
            gauges["pending"].add_metric([name], stats.pending)
            gauges["active"].add_metric([name], 1.0 if status_of(run, failed) == ACTIVE else 0.0)
            gauges["uptime"].add_metric([name], uptime_secs(run))
            hub_bytes, link_bytes = buffered_bytes(run)
            gauges["hub"].add_metric([name], hub_bytes)
            gauges["links"].add_metric([name], link_bytes)
            gauges["inbox_peak"].add_metric([name], stats.inbox_peak_bytes)
            waves.add_metric([name], stats.waves)
            restarts.add_metric([name], stats.restarts)
            coordinator = getattr(run, "coordinator", None)
            if coordinator is not None:
                committed.add_metric([name], coordinator.last_committed)
                in_flight.add_metric([name], len(run.attempt_phases()))
            for cid, spec in topology.components.items():
                c = stats.peek(cid)
                for metric, _, attribute, kinds in COUNTERS:
                    if spec.kind in kinds:
                        counters[metric].add_metric([name, cid], getattr(c, attribute))
                        for task in spec.tasks:
                            value = getattr(stats.peek(cid, task), attribute)
                            task_counters[metric].add_metric([name, cid, str(task)], value)
                if spec.kind == "spout":
                    latency_rows.append(([name, cid], c))
            for cid, tasks in system_components(run).items():  # __acker, as a bolt
                for metric, _, attribute, kinds in COUNTERS:
                    if "bolt" in kinds:
                        counters[metric].add_metric([name, cid], getattr(stats.peek(cid), attribute))
                        for task in tasks:
                            value = getattr(stats.peek(cid, task), attribute)
                            task_counters[metric].add_metric([name, cid, str(task)], value)
        yield from counters.values()
        yield from task_counters.values()
        yield from gauges.values()
        yield waves
        yield restarts
        yield committed
        yield in_flight
        yield _latency_histogram("squall_complete_latency_seconds", labels, latency_rows)


def exposition(runs: Callable[[], dict[str, tuple[Any, bool]]]) -> bytes:
    """The metrics in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TopologyCollector(runs))
    return generate_latest(registry)
