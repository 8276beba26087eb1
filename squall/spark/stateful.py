"""Stateful bolts' checkpoints, on the driver: when one is due, writing it, and the acks it holds back.

Every ``topology.state.checkpoint.interval.ms`` (on the run's clock) the next
wave carries a checkpoint id; a wave is sent for it even with no tuples. Each
stateful task calls its bolt's ``pre_commit(id)`` at the end of that wave and
reports what its state changed, as after every wave. When the wave completes,
the driver writes what every stateful task's state changed since the last
checkpoint through the state provider, and the checkpoint is complete.

The acks of stateful tasks are held until the checkpoint that holds their
state changes is complete, as Storm's stateful bolts hold theirs until the
state commits: a driver that dies before it replays those tuples from the
source, and one that dies after has them both saved and acked.

On start, each task's state is the provider's last complete checkpoint. With
a stateful bolt's parallelism changed since, its keys are dealt out again by
the fields grouping its input arrives by, when that is one field; otherwise
the restart fails with an error that says why.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from squall.model.errors import SquallError
from squall.model.groupings import FieldsGrouping
from squall.model.hashing import stable_hash
from squall.model.state import StateDelta
from squall.model.topology import Topology
from squall.spark.protocol import AckBatch
from squall.state.providers import COMPACT_EVERY, FileStateProvider, RedisStateProvider, Restored

log = logging.getLogger("squall")


class StateCheckpoints:
    def __init__(
        self,
        topology: Topology,
        components: list[str],
        provider: FileStateProvider | RedisStateProvider,
        interval: float,
        now: float,
    ) -> None:
        self.topology = topology
        self.provider = provider
        self.interval = interval
        self.layout = {c: list(topology.task_ids(c)) for c in components}
        self.tasks = frozenset(t for tasks in self.layout.values() for t in tasks)
        self.next_due = now + interval
        self.checkpoint = 0  # the last one complete
        self.in_flight: int | None = None  # a checkpoint whose wave is running
        self._changes: dict[int, StateDelta] = defaultdict(StateDelta)  # task -> its changes since the last one
        self._held: list[AckBatch] = []  # stateful tasks' acks since the last checkpoint
        self._held_elsewhere = False  # stateful tasks sent acks that their ackers on the workers hold

    # -- start ------------------------------------------------------------------------
    def restore(self) -> dict[int, dict[Any, Any]]:
        """Each stateful task's state as of the last complete checkpoint."""
        restored = self.provider.load()
        self.checkpoint = restored.checkpoint
        if not restored.checkpoint:
            return {}
        log.info("restoring stateful bolts from checkpoint %d in %s", restored.checkpoint, self.provider.directory)
        states = self._dealt_out(restored)
        if any(restored.layout.get(c) != tasks for c, tasks in self.layout.items()):
            # Tasks numbered anew or keys dealt out again: later checkpoints' changes need a base in this layout.
            self.provider.compact(restored.checkpoint, self.layout, {t: states.get(t, {}) for t in self.tasks})
        return states

    def _dealt_out(self, restored: Restored) -> dict[int, dict[Any, Any]]:
        states: dict[int, dict[Any, Any]] = {}
        for component, tasks in self.layout.items():
            saved = restored.layout.get(component)
            if saved is None:
                continue
            if len(saved) == len(tasks):  # the same tasks, perhaps numbered anew: each keeps its keys
                states.update({new: restored.states.get(old, {}) for old, new in zip(saved, tasks, strict=True)})
                continue
            field = self._grouping_field(component, len(saved), len(tasks))
            for task in tasks:
                states[task] = {}
            for old in saved:
                for key, value in restored.states.get(old, {}).items():
                    states[tasks[stable_hash([key]) % len(tasks)]][key] = value
            log.info(
                "bolt %s: state keys dealt out again by field %r, %d tasks to %d",
                component,
                field,
                len(saved),
                len(tasks),
            )
        return states

    def _grouping_field(self, component: str, before: int, now: int) -> str:
        fields = set()
        for subscription in self.topology.components[component].inputs:
            grouping = subscription.grouping
            if not isinstance(grouping, FieldsGrouping) or len(grouping.fields) != 1:
                break
            fields.add(grouping.fields[0])
        else:
            if len(fields) == 1:
                return fields.pop()
        raise SquallError(
            f"bolt {component!r} ran with {before} tasks and now has {now}: its state keys can be dealt out again"
            " only when every input arrives by a fields grouping on one field (the key); restart it with"
            f" parallelism {before}"
        )

    # -- each wave ----------------------------------------------------------------------
    @property
    def waiting(self) -> bool:
        """State changes or acks wait for the next checkpoint."""
        return bool(self._changes) or self._held_elsewhere or any(len(acks) for acks in self._held)

    def due(self, now: float) -> int | None:
        """The id of a checkpoint the next wave should carry, if one is due."""
        if self.in_flight is not None or now < self.next_due:
            return None
        self.next_due = now + self.interval
        if not self.waiting:
            return None  # nothing changed and nothing waits: no checkpoint needed
        self.in_flight = self.checkpoint + 1
        return self.in_flight

    def completed(
        self,
        checkpoint: int | None,
        deltas: dict[int, StateDelta],
        held: AckBatch,
        states: dict[int, tuple[int, dict]],
        held_elsewhere: bool = False,
    ) -> AckBatch | None:
        """A wave completed; when it carried a checkpoint, write it and return the acks it released (when the
        ackers are on the workers, ``held_elsewhere`` says they hold some, and the caller releases them there)."""
        self._held_elsewhere = self._held_elsewhere or held_elsewhere
        for task, delta in deltas.items():
            self._changes[task].absorb(delta)
        if len(held):
            self._held.append(held)
        if checkpoint is None:
            return None
        self.in_flight = None
        try:
            self.provider.save(checkpoint, self.layout, dict(self._changes))
        except Exception:  # the store is away: the changes and the acks wait for the next checkpoint
            log.exception("checkpoint %d could not be written to %s; trying again", checkpoint, self.provider.directory)
            return None
        if checkpoint % COMPACT_EVERY == 0 and isinstance(self.provider, FileStateProvider):
            self.provider.compact(checkpoint, self.layout, {t: states.get(t, (0, {}))[1] for t in self.tasks})
        self.checkpoint = checkpoint
        self._changes.clear()
        self._held_elsewhere = False
        released, self._held = AckBatch.combine(self._held), []
        return released
