"""A transactional spout's emitter tasks, in the process that hosts them.

Storm's emitter is a bolt of parallelism P: partition ``p`` of a batch is emitted by emitter task ``p mod P``.
Under ``LocalCluster`` and ``squall run`` the emitter tasks live on the workers, beside the bolt tasks, and their
tuples go straight to their readers over the workers' links; under ``TestCluster`` they run in the test's own
process, as its spouts do, so a test that appends to a ``MemoryTransactionalSpout`` sees its batches grow.

An emitter task emits the batches in the order they begin, and remembers what each partition emitted for every
txid still in flight: a batch whose previous txid is not committed yet continues from there (``EmitPlan.cached``).
Every emitter task ends its part of a batch with one ``last`` batch to every task that reads the spout.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from squall.model.topology import Topology, TopologyContext
from squall.spark.collectors import OutputCollector
from squall.spark.protocol import Batch, TaskStatus
from squall.transactional.messages import EmitPlan
from squall.transactional.spouts import OpaquePartitionedTransactionalSpout

log = logging.getLogger("squall.transactional")


@dataclass
class Emitted:
    """What the emitter tasks here did for one batch."""

    metas: dict[int, Any] = field(default_factory=dict)  # partition -> the metadata of its slice
    statuses: dict[int, TaskStatus] = field(default_factory=dict)  # emitter task -> what it counted
    failure: str | None = None

    @property
    def emitted(self) -> int:
        return sum(status.emitted for status in self.statuses.values())

    @property
    def malformed(self) -> int:
        return sum(status.malformed for status in self.statuses.values())


class Emitters:
    def __init__(
        self, topology: Topology, spout_id: str, spouts: dict[int, Any], generation: int, conf: dict | None = None
    ) -> None:
        """``spouts``: each emitter task hosted here -> its spout instance, opened here for its task."""
        self.topology, self.spout_id, self.spouts, self.generation = topology, spout_id, spouts, generation
        self.readers = topology.reader_tasks(spout_id)
        self._emitted: dict[tuple[int, int], Any] = {}  # (txid, partition) -> metadata, for txids in flight
        self._uncommitted: set[int] = set()  # txids emitted here whose commit the spouts have not been told of
        task_conf = {**(conf or {}), **topology.components[spout_id].conf}
        for task, spout in spouts.items():
            spout.open(task_conf, TopologyContext(topology, spout_id, task))

    def close(self) -> None:
        for spout in self.spouts.values():
            try:
                spout.close()
            except Exception:
                log.warning("%s: close() raised", self.spout_id, exc_info=True)

    def _tell_committed(self, last_committed: int) -> None:
        """Each spout here hears ``success(txid)`` once for every txid it emitted that has committed."""
        done = sorted(t for t in self._uncommitted if t <= last_committed)
        for txid in done:
            self._uncommitted.discard(txid)
            for spout in self.spouts.values():
                spout.success(txid)

    def emit(
        self,
        seq: int,
        attempt: Any,
        plans: dict[int, list[EmitPlan]],
        send: Callable[[Batch], None],
        last_committed: int = 0,
    ) -> Emitted:
        """Emit the slices ``plans`` names for the tasks here, each batch to ``send`` as it fills, then a ``last``
        batch from each task to every reader. A partition that raises fails the batch; nothing more is sent."""
        for key in [k for k in self._emitted if k[0] < last_committed]:
            del self._emitted[key]
        self._tell_committed(last_committed)
        self._uncommitted.add(attempt.txid)
        done = Emitted()
        for task, spout in self.spouts.items():
            collector = OutputCollector(self.topology, self.spout_id, task, acking=False, capture=False)
            collector.generation, collector.wave, collector.ship = self.generation, seq, send
            for plan in plans.get(task, ()):
                try:
                    done.metas[plan.partition] = self._emit_one(spout, attempt, collector, plan)
                except Exception as exc:
                    text = "".join(traceback.format_exception(exc))
                    done.failure = f"{self.spout_id} emitter task {task}, partition {plan.partition}: {text}"
                    log.error("batch %r: %s", attempt, done.failure)
                    return done
                self._emitted[(attempt.txid, plan.partition)] = done.metas[plan.partition]
            done.statuses[task] = collector.status
            for batch in collector.take_last_batches(self.readers):
                send(batch)
        return done

    def _emit_one(self, spout: Any, attempt: Any, collector: OutputCollector, plan: EmitPlan) -> Any:
        if plan.replay:
            spout.emit_partition_batch(attempt, collector, plan.partition, plan.meta)
            return plan.meta
        previous = self._emitted.get((attempt.txid - 1, plan.partition)) if plan.cached else plan.meta
        if isinstance(spout, OpaquePartitionedTransactionalSpout):
            return spout.emit_partition_batch(attempt, collector, plan.partition, previous)
        return spout.emit_partition_batch_new(attempt, collector, plan.partition, previous)
