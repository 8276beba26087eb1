"""``Run``: what the cluster, the runner, the web UI, REST and metrics use of a running topology, of either kind.

The runtime's ``TopologyRun`` (at-least-once waves) and the transactional package's ``TransactionalRun``
(batches) both implement it; code above the runtime reads ``kind`` instead of asking which class it holds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from squall.model.errors import TopologyFailed
    from squall.model.topology import Topology
    from squall.spark.clock import Clock
    from squall.spark.scheduler import WaveScheduler
    from squall.spark.stats import RunStats

TOPOLOGY, TRANSACTIONAL = "topology", "transactional"
RunKind = Literal["topology", "transactional"]


@dataclass
class WaveInfo:
    """What one ``step`` did."""

    spout_emits: int
    delivered: int  # tuples the wave handed bolts: its spouts' emits, and ticks
    completed: int = 0  # waves that completed
    confirming: bool = False  # nothing moved, and the next step makes sure over a wave that follows every commit
    dry: bool = False  # its spouts had less to emit than their calls allowed: the next wave may wait a moment

    @property
    def idle(self) -> bool:
        """Nothing was sent and nothing completed: the topology has nothing to do until time passes."""
        return not self.delivered and not self.completed and not self.confirming


class Run(Protocol):
    """A topology running on a cluster, driven by one thread that calls ``step`` until the run stops.

    ``kind`` is ``"topology"`` for an at-least-once topology, whose spouts can be deactivated and whose
    parallelism can be rebalanced, or ``"transactional"`` for a transactional topology's batches.
    """

    name: str
    kind: RunKind
    topology: Topology  # the graph: components, tasks and subscriptions
    conf: dict[str, Any]  # the run's resolved configuration
    stats: RunStats
    clock: Clock
    failure: TopologyFailed | None  # set once a failure no retry can fix has stopped the run
    started_at: float  # the clock's time when it was submitted
    scheduler: WaveScheduler  # its workers: the worker job, the hub and the links
    acker_task_ids: list[int]  # the ``__acker`` tasks on the workers (none for a transactional topology)
    woken: threading.Event  # set, from any thread, when the run has work: its thread's idle pause ends

    @property
    def wanted_active(self) -> bool:
        """Whether its spouts are to run (``set_active``); a transactional topology's always are."""

    def step(self) -> WaveInfo:
        """Move the run along once; raises ``TopologyFailed`` once it has stopped. Called by the run's thread."""

    def idle_for(self) -> float:
        """Seconds the run has had nothing in flight (0 while something is)."""

    def not_started(self) -> str | None:
        """Why the run's tasks are not up, when a worker could not set one up and none has come up since."""

    def interrupt(self) -> None:
        """Make a step that waits for workers return now; any thread may call it."""

    def finish(self, fail_pending: bool) -> None:
        """The run is being killed: with ``fail_pending``, what is still pending fails back to its source."""

    def close(self) -> None:
        """Stop the workers and release what the run holds."""
