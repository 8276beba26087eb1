"""Per-component counters of a running topology.

Complete latencies go into an HdrHistogram: fixed memory (about 26 KB a
component) whatever the number of tuples, 2 significant digits, from 1 µs to one hour.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from hdrh.histogram import HdrHistogram

LATENCY_RANGE_US = (1, 3_600_000_000)
LATENCY_DIGITS = 2


def latency_histogram() -> HdrHistogram:
    return HdrHistogram(*LATENCY_RANGE_US, LATENCY_DIGITS)


_EXACT = latency_histogram().sub_bucket_count  # below this every value has a bucket of its own


def encode_latencies(histogram: HdrHistogram) -> bytes:
    """``histogram`` in HdrHistogram's compressed form, without its base64 (a quarter smaller on the wire)."""
    return base64.b64decode(histogram.encode())


def decode_latencies(encoded: bytes) -> HdrHistogram:
    """The histogram ``encode_latencies`` gave."""
    return HdrHistogram.decode(base64.b64encode(encoded))


def latency_buckets(seconds) -> tuple[np.ndarray, np.ndarray]:
    """Latencies in seconds as ``(values, counts)`` in microseconds: each is rounded down to its histogram
    bucket's lowest value (which changes nothing the histogram holds), and each bucket appears once."""
    micros = np.clip(np.rint(np.asarray(seconds) * 1e6), *LATENCY_RANGE_US).astype(np.int64)
    shift = np.maximum(np.floor(np.log2(np.maximum(micros, 1))).astype(np.int64) + 1 - (_EXACT.bit_length() - 1), 0)
    return np.unique((micros >> shift) << shift, return_counts=True)


@dataclass
class ComponentStats:
    emitted: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    timed_out: int = 0  # counted apart from explicit fails (also included in failed)
    errors: int = 0
    malformed: int = 0  # spout messages set aside as malformed, never emitted
    state_changes: int = 0  # a stateful bolt's keys put or deleted, each saved once per wave
    state_seconds: float = 0.0  # its tasks' time saving them
    busy_seconds: float = 0.0  # a bolt's tasks' time executing tuples
    process_seconds: float = 0.0  # a bolt's tuples' times from reaching their worker to their execute's end
    inputs: dict[tuple[str, str], int] = field(default_factory=dict)  # (source, stream) -> tuples executed
    latencies: HdrHistogram = field(default_factory=latency_histogram, repr=False)  # microseconds
    _latency_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, status) -> None:
        """Fold in one task's ``TaskStatus`` for a wave."""
        self.executed += status.executed
        self.emitted += status.emitted
        self.acked += status.acked
        self.failed += status.failed
        self.errors += len(status.errors)
        self.malformed += status.malformed
        self.state_changes += status.state_changes
        self.state_seconds += status.state_seconds
        self.busy_seconds += status.busy_seconds
        self.process_seconds += status.process_seconds
        if status.inputs:
            inputs = dict(self.inputs)  # replaced whole: a reader on another thread iterates the one it read
            for key, n in status.inputs.items():
                inputs[key] = inputs.get(key, 0) + n
            self.inputs = inputs

    def record_buckets(self, values: np.ndarray, counts: np.ndarray) -> None:
        """Latencies as ``latency_buckets`` gives them: each bucket recorded once with its count."""
        with self._latency_lock:
            for value, count in zip(values.tolist(), counts.tolist(), strict=True):
                self.latencies.record_value(value, count)

    def add_latencies(self, latencies: HdrHistogram) -> None:
        """Latencies recorded elsewhere (a spout task on a worker), as ``decode_latencies`` gives them: decoded once
        for the component's stats and the task's."""
        with self._latency_lock:
            self.latencies.add(latencies)

    def latency_copy(self) -> HdrHistogram:
        """A copy of the latency histogram, safe to read while the topology records more."""
        copy = latency_histogram()
        with self._latency_lock:
            copy.add(self.latencies)
        return copy

    def latency_percentile(self, q: float) -> float | None:
        """The ``q``-th percentile of complete latency in milliseconds (2 significant digits), if any."""
        with self._latency_lock:
            if not self.latencies.get_total_count():
                return None
            return self.latencies.get_value_at_percentile(q) / 1000.0

    def latency_total(self) -> tuple[int, float]:
        """``(count, sum)`` of the complete latencies recorded, the sum in microseconds (from the histogram)."""
        with self._latency_lock:
            count = self.latencies.get_total_count()
            return count, (self.latencies.get_mean_value() * count if count else 0.0)

    @property
    def latency_count(self) -> int:
        return self.latencies.get_total_count()

    @property
    def execute_latency_ms(self) -> float | None:
        """A bolt's mean time per executed tuple, in milliseconds."""
        return self.busy_seconds / self.executed * 1000 if self.executed else None

    @property
    def process_latency_ms(self) -> float | None:
        """A bolt's mean time per tuple from reaching its worker to the end of its execute, in milliseconds; None
        where it is not measured (the acker tasks, a transactional topology's batches)."""
        return self.process_seconds / self.executed * 1000 if self.executed and self.process_seconds else None


@dataclass(frozen=True, slots=True)
class ErrorReport:
    component: str
    task: int | None
    time: float  # seconds since the epoch
    text: str  # the error with its traceback


ERRORS_KEPT = 50


@dataclass
class RunStats:
    components: dict[str, ComponentStats] = field(default_factory=dict)
    waves: int = 0
    failed_waves: int = 0  # transactional batches whose try failed
    restarts: int = 0  # times the workers restarted from the last completed wave, after one was lost
    pending: int = 0
    spout_emits_seen: int = 0  # spout emits the driver heard of from the workers' reports
    state_seconds: float = 0.0  # the driver's time applying stateful tasks' changes and writing checkpoints
    wave_seconds: float = 0.0  # the time waves were running: each completed wave's own time, summed
    inbox_peak_bytes: int = 0  # the most any worker's inbox held at once while the last completed wave ran
    # From the start of the first wave a spout emitted in to the end of the last that settled a tree (monotonic)
    busy_from: float | None = None
    busy_to: float | None = None
    tasks: dict[tuple[str, int], ComponentStats] = field(default_factory=dict)  # (component, task) -> its own
    errors: deque[ErrorReport] = field(default_factory=lambda: deque(maxlen=ERRORS_KEPT))  # the last ones

    def busy(self, started: float, ended: float, emitted: int, settled: int) -> None:
        """A wave that ran from ``started`` to ``ended`` (``time.monotonic()``): its spouts' emits and settled
        trees widen the span the spouts' throughput is measured over."""
        if emitted and self.busy_from is None:
            self.busy_from = started
        if settled and self.busy_from is not None:
            self.busy_to = ended

    def spout_throughput(self, acked: int) -> float | None:
        """``acked`` trees a second over the busy span, or None before a tree settled."""
        if self.busy_from is None or self.busy_to is None or self.busy_to <= self.busy_from:
            return None
        return acked / (self.busy_to - self.busy_from)

    def of_task(self, component: str, task: int) -> ComponentStats:
        stats = self.tasks.get((component, task))
        if stats is None:
            stats = self.tasks[(component, task)] = ComponentStats()
        return stats

    def peek(self, component: str, task: int | None = None) -> ComponentStats:
        """A component's (or one task's) stats for a reader on another thread: never creates an entry, which
        the run's own thread might be creating at the same moment."""
        found = self.components.get(component) if task is None else self.tasks.get((component, task))
        return found if found is not None else _EMPTY

    def record_error(self, component: str, task: int | None, text: str) -> None:
        self.errors.append(ErrorReport(component, task, time.time(), text))

    def setup_failed(self, component: str, task: int, text: str) -> None:
        """A worker could not set up a task (its ``prepare()`` or ``open()`` raised, its component did not unpickle):
        counted and kept among the run's errors, as the UI, REST and ``squall run`` show them."""
        for stats in (self.of(component), self.of_task(component, task)):
            stats.errors += 1
        self.record_error(component, task, text)

    def of(self, component: str) -> ComponentStats:
        stats = self.components.get(component)
        if stats is None:  # a histogram is made once per component, not per call
            stats = self.components[component] = ComponentStats()
        return stats

    def spout_totals(self, spouts: list[str]) -> ComponentStats:
        total = ComponentStats()
        for s in spouts:
            c = self.peek(s)
            total.emitted += c.emitted
            total.acked += c.acked
            total.failed += c.failed
            total.timed_out += c.timed_out
            total.malformed += c.malformed
            total.latencies.add(c.latency_copy())
        return total


_EMPTY = ComponentStats()
