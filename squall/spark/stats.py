"""Per-component counters of a running topology."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ComponentStats:
    emitted: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    timed_out: int = 0  # counted apart from explicit fails (also included in failed)
    errors: int = 0
    malformed: int = 0  # spout messages set aside as malformed, never emitted
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, status) -> None:
        """Fold in one task's ``TaskStatus`` for a wave."""
        self.executed += status.executed
        self.emitted += status.emitted
        self.acked += status.acked
        self.failed += status.failed
        self.errors += len(status.errors)
        self.malformed += status.malformed

    def latency_percentile(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        return float(np.percentile(np.asarray(self.latencies_ms), q))


@dataclass
class RunStats:
    components: dict[str, ComponentStats] = field(default_factory=dict)
    waves: int = 0
    failed_waves: int = 0
    pending: int = 0

    def of(self, component: str) -> ComponentStats:
        return self.components.setdefault(component, ComponentStats())

    def spout_totals(self, spouts: list[str]) -> ComponentStats:
        total = ComponentStats()
        for s in spouts:
            c = self.of(s)
            total.emitted += c.emitted
            total.acked += c.acked
            total.failed += c.failed
            total.timed_out += c.timed_out
            total.malformed += c.malformed
            total.latencies_ms.extend(c.latencies_ms)
        return total
