"""Load-aware shuffling, as Storm 2's ``LoadAwareShuffleGrouping`` does it: a shuffle grouping sends fewer tuples to
the tasks of a busier worker.

A worker's load is the share of a core its Python process used over the last half second or more: every worker
runs its tasks, spout tasks and acker tasks in one process, so a worker that also hosts a spout, or runs on a
slower host, is busier than its peers for the same tuples. The driver turns the workers' loads into a weight per
worker (``LoadBalancer``), a pure state machine fed by ``WorkerReport``; each ``WaveInput`` carries the weights;
on the worker, ``TaskWeights`` holds them by task, and every shuffle picker of the worker reads them
(``LoadAwareShuffle``). Until the loads differ, the weights are equal and the picker is the plain shuffle.

``topology.disable.loadaware.messaging`` (Storm's key) turns it off. Under ``TestCluster`` it is off: the
spouts run in the test's process and no worker is busier for hosting them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cython
import numpy as np

from squall.model.groupings import ShuffledRing

LOAD_WINDOW_SECS = 0.25  # a worker's load is measured over at least this long
GAIN = 4.0  # how far one measurement moves a weight toward equal loads: a fifth for two loads 0.1 apart
DEADBAND = 0.03  # loads this close to the mean move nothing
BUSY = 0.5  # while no worker is this busy nobody waits on anybody: the weights drift back to equal
MIN_WEIGHT, MAX_WEIGHT = 0.02, 4.0  # a worker gets at least a fiftieth, at most four times, its even share
RING = 100  # the picker's choices per target, as Storm's ring of choices
PICKS_AT_ONCE = 4096  # the picks a shuffle takes from its ring at a time


@dataclass
class LoadBalancer:
    """The driver's view: each worker's load, and the weights that even them out."""

    workers: int
    loads: dict[int, float] = field(default_factory=dict)
    _clock: dict[int, tuple[float, float]] = field(default_factory=dict)  # worker -> (cpu seconds, at)
    _weights: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._weights = [1.0] * self.workers

    @property
    def weights(self) -> tuple[float, ...] | None:
        """A weight per worker, or None while they are all equal."""
        if all(w == 1.0 for w in self._weights):
            return None
        return tuple(self._weights)

    def observe(self, worker: int, cpu_seconds: float, now: float) -> None:
        """Worker ``worker``'s process had used ``cpu_seconds`` of CPU at ``now``."""
        if not 0 <= worker < self.workers:
            return
        last = self._clock.get(worker)
        if last is None or cpu_seconds < last[0]:  # first report, or a new process
            self._clock[worker] = (cpu_seconds, now)
            return
        if now - last[1] < LOAD_WINDOW_SECS:
            return
        self.loads[worker] = min(1.0, (cpu_seconds - last[0]) / (now - last[1]))
        self._clock[worker] = (cpu_seconds, now)
        if len(self.loads) == self.workers:
            self._rebalance()

    def _rebalance(self) -> None:
        mean = sum(self.loads.values()) / self.workers
        idle = max(self.loads.values()) < BUSY
        weights = self._weights
        for worker, load in self.loads.items():
            if idle:
                weights[worker] += (1.0 - weights[worker]) / 2
            elif abs(load - mean) > DEADBAND:
                weights[worker] *= min(2.0, max(0.5, 1.0 + GAIN * (mean - load)))  # at most halved or doubled
        for worker, weight in enumerate(bounded_mean_one(weights)):
            weights[worker] = 1.0 if abs(weight - 1.0) < 1e-3 else weight
        self.loads.clear()

    def resized(self, workers: int) -> None:
        """The run starts again on ``workers`` workers: loads and weights start over."""
        self.workers, self.loads, self._clock = workers, {}, {}
        self._weights = [1.0] * workers


def bounded_mean_one(weights: list[float]) -> list[float]:
    """``weights`` scaled to average one, each kept between ``MIN_WEIGHT`` and ``MAX_WEIGHT``: those that pass a
    bound are held at it, and the rest scaled again to make up the average."""
    held: dict[int, float] = {}
    while True:
        free = [i for i in range(len(weights)) if i not in held]
        if not free:
            return [held[i] for i in range(len(weights))]
        scale = (len(weights) - sum(held.values())) / (sum(weights[i] for i in free) or 1.0)
        passed = {
            i: MAX_WEIGHT if weights[i] * scale > MAX_WEIGHT else MIN_WEIGHT
            for i in free
            if not MIN_WEIGHT <= weights[i] * scale <= MAX_WEIGHT
        }
        if not passed:
            return [held[i] if i in held else weights[i] * scale for i in range(len(weights))]
        held.update(passed)


class TaskWeights:
    """A worker's copy of the weights, by task; every shuffle picker of the worker reads it."""

    def __init__(self) -> None:
        self.version = 0
        self._by_task: dict[int, float] = {}

    def update(self, weights: tuple[float, ...] | None, placement: dict[int, int]) -> None:
        by_task = {} if weights is None else {task: weights[w] for task, w in placement.items() if w < len(weights)}
        if by_task != self._by_task:
            self._by_task = by_task
            self.version += 1

    def of(self, task: int) -> float:
        return self._by_task.get(task, 1.0)

    @property
    def uniform(self) -> bool:
        return not self._by_task


@cython.cclass
class LoadAwareShuffle:
    """A shuffle grouping's picker that deals targets in proportion to their weights: a ring of ``RING`` choices
    per target, shuffled and gone through in turn, dealt again when the weights change. With equal weights it is
    ``ShuffledRing``'s picker, the same tuples to the same tasks. It is called once per tuple, so it keeps the
    ring's picks itself (``make setup`` compiles this module with the per-tuple ones)."""

    _rng = cython.declare(object)
    _targets = cython.declare(list)
    _weights = cython.declare(object)
    _version = cython.declare(cython.longlong)
    _ring = cython.declare(object)
    _picks = cython.declare(list)
    _position = cython.declare(cython.Py_ssize_t)

    def __init__(self, source_task: int, targets: Sequence[int], weights: TaskWeights) -> None:
        self._rng = np.random.default_rng(source_task)  # one generator across deals: a new ring, new orders
        self._targets = list(targets)
        self._weights = weights
        self._version = -1
        self._ring = ShuffledRing(self._rng, self._targets)
        self._picks: list[int] = []
        self._position = 0

    def _deal(self) -> None:
        self._version = self._weights.version
        if self._weights.uniform:
            ring = self._targets
        else:
            shares = [self._weights.of(t) for t in self._targets]
            total = sum(shares)
            size = RING * len(self._targets)
            counts = [max(1, round(size * s / total)) for s in shares]
            ring = [t for t, n in zip(self._targets, counts, strict=True) for _ in range(n)]
        self._ring = ShuffledRing(self._rng, ring)
        self._picks, self._position = [], 0

    @cython.locals(version=cython.longlong, position=cython.Py_ssize_t)
    def __call__(self, values: Any = None) -> int:
        version = self._weights.version
        if self._version != version:
            self._deal()
        position = self._position
        if position >= len(self._picks):  # the ring's next passes, many at once
            self._picks, position = self._ring.take(PICKS_AT_ONCE), 0
        self._position = position + 1
        return self._picks[position]

    def take(self, n: int) -> list[int]:
        """The next ``n`` picks, as ``n`` calls would give them."""
        if self._version != self._weights.version:
            self._deal()
        taken = self._picks[self._position : self._position + n]
        self._position += len(taken)
        if len(taken) < n:
            taken += self._ring.take(n - len(taken))
        return taken
