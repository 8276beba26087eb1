"""Time sources: the wall clock, or simulated time for tests."""

from __future__ import annotations

import time
from collections.abc import Callable


class Clock:
    simulated = False

    def now(self) -> float:
        raise NotImplementedError

    def reader(self) -> Callable[[], float]:
        """A function that reads ``now()`` while the clock keeps its current mode (simulated or not)."""
        return self.now


class RealClock(Clock):
    def now(self) -> float:
        return time.monotonic()


class SimulatedClock(Clock):
    """Time that moves only when told to."""

    simulated = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"simulated time cannot go back from {self._now} to {when}")
        self._now = when
