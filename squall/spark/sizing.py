"""How big a wave is: waves size themselves to take about ``squall.wave.target.ms``.

Each spout task gets ``calls_per_spout_task()`` calls of ``next_tuple`` per wave.
After each wave completes, the size moves toward what would have taken the
target time at the rate just seen, much as Spark Streaming's backpressure rate
estimator does: it at most doubles while waves are full and quick, and it
shrinks as soon as a wave runs long. It starts small, so a lightly loaded
topology keeps small, quick waves, and never exceeds ``squall.wave.spout.batch``.
"""

from __future__ import annotations

INITIAL_CALLS = 64


class WaveSizer:
    def __init__(self, target_secs: float, cap: int) -> None:
        self.target_secs = target_secs
        self.cap = cap
        self.size = min(cap, INITIAL_CALLS)
        self._emits: dict[int, int] = {}  # wave in flight -> spout emits in it

    def calls_per_spout_task(self) -> int:
        return self.size

    def sent(self, wave: int, emits: int) -> None:
        self._emits[wave] = emits

    def completed(self, wave: int, seconds: float) -> None:
        emits = self._emits.pop(wave, 0)
        if seconds <= 0:
            return
        factor = self.target_secs / seconds
        if factor < 1.0:
            self.size = max(1, int(self.size * max(0.5, factor)))
        elif emits >= self.size:  # the wave was full and quick: the spouts could give more
            self.size = min(self.cap, max(self.size + 1, int(self.size * min(2.0, factor))))
