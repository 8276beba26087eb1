"""Storm's windows of a topology's figures (the last 10 minutes, 3 hours, a day) and the recent points its charts
draw, kept from samples of the run's cumulative counters.

Each sample gives every figure's total so far; what changed since the sample before goes into one ring of
per-interval buckets per window (``WindowRing``): 60 buckets each, of 10 s for the 10-minute window, 3 minutes
for 3 hours, 24 minutes for a day. A window's figure is the sum of its ring's buckets, so reading one costs the
same whatever the traffic, and memory is fixed. Time is given to every call (``now``, in seconds), never read
here: tests run these on simulated time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

BUCKETS = 60  # per window
POINT_SECS = 1.0  # the charts get a point at most this often
POINTS = 600  # and keep this many: 10 minutes


@dataclass(frozen=True)
class Window:
    key: str  # as the REST API names it: Storm's ``window`` parameter
    seconds: float | None  # None: all time
    pretty: str  # as Storm UI shows it


WINDOWS = (
    Window("600", 600, "10m 0s"),
    Window("10800", 10800, "3h 0m 0s"),
    Window("86400", 86400, "1d 0h 0m 0s"),
)
ALL_TIME = Window("all", None, "All time")


class WindowRing:
    """The sums of figures over about the last ``span`` seconds, in ``buckets`` buckets of ``span / buckets``
    seconds each: what is added at time ``t`` goes to bucket ``t // width``, and the sums are those of the buckets
    that end less than ``span`` seconds before the current one does; the window covers between ``span - width``
    and ``span`` seconds. Time going back (a clock set back) adds to the newest bucket."""

    def __init__(self, span: float, buckets: int = BUCKETS) -> None:
        if span <= 0 or buckets < 1:
            raise ValueError("a window needs a positive span and at least one bucket")
        self.span, self.buckets, self.width = span, buckets, span / buckets
        self._ring: deque[tuple[int, dict[Hashable, float]]] = deque()  # (bucket index, sums), oldest first

    def _index(self, now: float) -> int:
        index = int(now // self.width)
        return max(index, self._ring[-1][0]) if self._ring else index

    def _expire(self, index: int) -> None:
        while self._ring and self._ring[0][0] <= index - self.buckets:
            self._ring.popleft()

    def add(self, now: float, deltas: Mapping[Hashable, float]) -> None:
        """Add what changed (``{figure: delta}``) at time ``now``."""
        index = self._index(now)
        if not self._ring or self._ring[-1][0] != index:
            self._ring.append((index, {}))
            self._expire(index)
        bucket = self._ring[-1][1]
        for key, delta in deltas.items():
            if delta:
                bucket[key] = bucket.get(key, 0) + delta

    def sums(self, now: float) -> dict[Hashable, float]:
        """Every figure's sum over the window ending at ``now`` (figures that did not change are left out)."""
        self._expire(self._index(now))
        total: dict[Hashable, float] = {}
        for _, bucket in self._ring:
            for key, value in bucket.items():
                total[key] = total.get(key, 0) + value
        return total


ChartPoint = Callable[[Mapping[Hashable, float], float], dict[str, Any]]


class RunHistory:
    """One run's windows and chart points, fed by ``sample``; safe to use from any thread.

    ``sample`` takes every figure's cumulative total (``{figure: total}``, figures keyed however the caller
    likes) and the gauges to chart (pending trees). At most once every ``point_secs`` it adds a chart point:
    ``chart(growth, seconds)`` of what every figure grew by over the ``seconds`` since the point before, with
    the gauges and the point's ``time``."""

    def __init__(self, chart: ChartPoint, points: int = POINTS, point_secs: float = POINT_SECS) -> None:
        self.chart, self.point_secs = chart, point_secs
        self.rings = {w.key: WindowRing(w.seconds) for w in WINDOWS}
        self.points: deque[dict[str, Any]] = deque(maxlen=points)
        self._lock = threading.Lock()
        self._totals: dict[Hashable, float] = {}
        self._point: tuple[float, dict[Hashable, float]] | None = None  # (when, totals) of the last point

    def sample(self, now: float, totals: Mapping[Hashable, float], gauges: Mapping[str, Any]) -> None:
        with self._lock:
            deltas = {key: value - self._totals.get(key, 0) for key, value in totals.items()}
            self._totals = dict(totals)
            for ring in self.rings.values():
                ring.add(now, deltas)
            if self._point is None:  # the first sample: the charts start here
                self._point = (now, self._totals)
                return
            since, before = self._point
            if now - since < self.point_secs:
                return
            growth = {key: value - before.get(key, 0) for key, value in self._totals.items()}
            self.points.append({"time": round(now, 3), **self.chart(growth, now - since), **gauges})
            self._point = (now, self._totals)

    def windows(self, now: float) -> dict[str, dict[Hashable, float]]:
        """Every window's sums, by the window's key, and ``"all"``: every figure's total as last sampled."""
        with self._lock:
            found = {key: ring.sums(now) for key, ring in self.rings.items()}
            found[ALL_TIME.key] = dict(self._totals)
            return found

    def points_after(self, after: float | None = None) -> list[dict[str, Any]]:
        """The chart's points, oldest first: all of them, or those later than time ``after``."""
        with self._lock:
            return [p for p in self.points if after is None or p["time"] > after]
