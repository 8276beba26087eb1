"""How big a wave is: waves size themselves to take about ``squall.wave.target.ms``.

Each spout task gets ``calls_per_spout_task()`` calls of ``next_tuple`` per wave.
After each wave completes, the size moves toward what would have taken the
target time at the rate the last waves were handled, much as Spark Streaming's
backpressure rate estimator does. It starts small, so a lightly loaded topology
keeps small, quick waves, and never exceeds ``squall.wave.spout.batch``:

- it grows only after a full wave (the spouts could give more), at most
  fourfold, as TCP's slow start grows its window;
- it shrinks as soon as a wave runs long, at most by half;
- it stays small enough that the workers' inboxes hold at most
  ``BUFFER_HEADROOM`` of ``squall.worker.inbox.max.bytes``: each wave's report
  says the most any inbox held while it ran, that over the wave's size is what
  a spout call brought (the waves in flight with it included), and the size is
  held to what the bound allows at the most a call brought over the last
  ``BYTES_WINDOW`` waves. A bolt that emits many or large tuples gets smaller
  waves, so what waits between tasks stays bounded in bytes.

The rate is the emits of the last ``window`` waves over their own times. Waves
in flight together are handled together: the first to complete carries most of
their time, the next one little, so the rate counts them as one.
"""

from __future__ import annotations

from collections import deque

INITIAL_CALLS = 64
MAX_GROWTH = 4.0
MAX_SHRINK = 0.5
BUFFER_HEADROOM = 0.8  # waves size toward this share of the inbox bound
BYTES_WINDOW = 8  # waves whose inbox bytes a spout call brought are remembered


class WaveSizer:
    def __init__(self, target_secs: float, cap: int, window: int = 2, inbox_max_bytes: int | None = None) -> None:
        self.target_secs = target_secs
        self.cap = cap
        self.inbox_max_bytes = inbox_max_bytes
        self._bytes_per_call: deque[float] = deque(maxlen=BYTES_WINDOW)
        self.size = min(cap, INITIAL_CALLS)
        self._emits: dict[int, int] = {}  # wave in flight -> spout emits in it
        self._calls: dict[int, int] = {}  # wave in flight -> the calls it was sent with
        self._recent: deque[tuple[int, float]] = deque(maxlen=max(1, window))  # (emits, seconds) of the last waves
        self.dry = False  # the last completed wave's spouts emitted fewer tuples than one task's calls allowed

    def calls_per_spout_task(self) -> int:
        return self.size

    def sized(self, wave: int, calls: int) -> None:
        """Wave ``wave`` went out with ``calls`` spout calls a spout task."""
        self._calls[wave] = calls

    def sent(self, wave: int, emits: int) -> None:
        self._emits[wave] = emits

    def completed(self, wave: int, seconds: float, inbox_peak_bytes: int = 0) -> None:
        """Wave ``wave`` took ``seconds``; the workers' inboxes held at most ``inbox_peak_bytes`` meanwhile."""
        calls = self._calls.pop(wave, self.size)  # its own size: the size may have grown since it went out
        for older in [w for w in self._calls if w < wave]:  # of waves that ran again
            del self._calls[older]
        emits = self._emits.pop(wave, 0)
        self.dry = emits < calls
        self._resize(emits, seconds)
        if self.inbox_max_bytes and inbox_peak_bytes > 0 and calls > 0:
            self._bytes_per_call.append(inbox_peak_bytes / calls)
        if self._bytes_per_call:
            fits = int(self.inbox_max_bytes * BUFFER_HEADROOM / max(self._bytes_per_call))
            self.size = max(1, min(self.size, fits))

    def _resize(self, emits: int, seconds: float) -> None:
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
