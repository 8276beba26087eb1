"""``WatermarkEventGenerator``: Storm's ``WaterMarkEventGenerator``, run from the windowed bolt's ticks.

A watermark is the minimum, over the bolt's input streams, of the latest timestamp each has brought, less the
lag; none is made until every input stream has brought one. A tuple older than the last watermark is late.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from squall.windowing.manager import WatermarkEvent


class WatermarkEventGenerator:
    def __init__(self, window_manager: Any, interval: int, lag: int, input_streams: set[Hashable]) -> None:
        self.window_manager, self.interval, self.lag = window_manager, interval, lag
        self.input_streams = set(input_streams)
        self.latest: dict[Hashable, int] = {}  # stream -> the latest timestamp it brought
        self.last_watermark = 0

    def track(self, stream: Hashable, ts: int) -> bool:
        """Note ``ts`` from ``stream``; False when the tuple is late (older than the last watermark)."""
        current = self.latest.get(stream)
        if current is None or ts > current:
            self.latest[stream] = ts
        return ts >= self.last_watermark

    def run(self) -> None:
        """Make a watermark, if it moved, and hand it to the window manager."""
        watermark = self._watermark()
        if watermark > self.last_watermark:
            self.window_manager.add_event(WatermarkEvent(watermark))
            self.last_watermark = watermark

    def _watermark(self) -> int:
        ts = 0
        if len(self.latest) >= len(self.input_streams):
            ts = min(self.latest.values())
        return ts - self.lag

    def start(self) -> None:
        pass

    def shutdown(self) -> None:
        pass
