"""How big a wave is: waves size themselves to take about ``squall.wave.target.ms``.

Each spout task gets ``calls_per_spout_task()`` calls of ``next_tuple`` per wave.
After each wave completes, the size moves toward what would have taken the
target time at the rate the last waves were handled, much as Spark Streaming's
backpressure rate estimator does. It starts small, so a lightly loaded topology
keeps small, quick waves, and never exceeds ``squall.wave.spout.batch``:

- it grows only after a full wave (the spouts could give more), at most
  fourfold, as TCP's slow start grows its window;
- it shrinks as soon as a wave runs long, at most by half.

The rate is the emits of the last ``window`` waves over their own times. Waves
in flight together are handled together: the first to complete carries most of
their time, the next one little, so the rate counts them as one.
"""

from __future__ import annotations

from collections import deque

INITIAL_CALLS = 64
MAX_GROWTH = 4.0
MAX_SHRINK = 0.5


class WaveSizer:
    def __init__(self, target_secs: float, cap: int, window: int = 2) -> None:
        self.target_secs = target_secs
        self.cap = cap
        self.size = min(cap, INITIAL_CALLS)
        self._emits: dict[int, int] = {}  # wave in flight -> spout emits in it
        self._recent: deque[tuple[int, float]] = deque(maxlen=max(1, window))  # (emits, seconds) of the last waves

    def calls_per_spout_task(self) -> int:
        return self.size

    def sent(self, wave: int, emits: int) -> None:
        self._emits[wave] = emits

    def completed(self, wave: int, seconds: float) -> None:
        emits = self._emits.pop(wave, 0)
        if seconds <= 0:
            return
        self._recent.append((emits, seconds))
        recent_emits = sum(e for e, _ in self._recent)
        recent_seconds = sum(s for _, s in self._recent)
        at_rate = recent_emits / recent_seconds * self.target_secs  # the emits a wave of the target time holds
        if seconds > self.target_secs:
            self.size = max(1, int(self.size * MAX_SHRINK), min(self.size, int(at_rate)))
        elif emits >= self.size:  # the wave was full and quick: the spouts could give more
            grown = min(int(self.size * MAX_GROWTH), max(self.size + 1, int(at_rate)))
            self.size = min(self.cap, max(self.size, grown))
