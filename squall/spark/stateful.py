"""Stateful bolts' checkpoints: when one is due, when it is complete, and the acks it holds back.

Every ``topology.state.checkpoint.interval.ms`` (on the run's clock) the next
wave carries a checkpoint id; a wave is sent for it even with no tuples. Each
stateful task calls its bolt's ``pre_commit(id)`` at the end of that wave.

Each task then writes its own part of the checkpoint through the state
provider, where it runs: what its state changed since its last part, or all of
it after a restart and every ``COMPACT_EVERY`` checkpoints. It reports only that
it did. When the wave completes with every task's part written, the driver
commits the checkpoint: a marker naming the parts (a file), or one script that
the server runs (Redis). The state itself never reaches the driver.

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
from typing import Any

from squall.model.errors import SquallError
from squall.model.groupings import FieldsGrouping
from squall.model.hashing import stable_hash
from squall.model.topology import Topology
from squall.state.providers import FileStateProvider, RedisStateProvider, Restored

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
        self._issued = 0  # the last checkpoint id a wave carried
        self._held = False  # stateful tasks sent acks that their acker tasks hold for a checkpoint
        self._parts: list[tuple[int, int, bool]] = []  # (checkpoint, task, whole) written since the last commit
        self._executed = False  # stateful tasks executed anything since the last checkpoint

    # -- start ------------------------------------------------------------------------
    def restore(self) -> dict[int, dict[Any, Any]]:
        """Each stateful task's state as of the last complete checkpoint."""
        restored = self.provider.load()
        self.checkpoint = restored.checkpoint
        self.provider.discard_uncommitted(restored.checkpoint)
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
        return self._executed or self._held

    def due(self, now: float) -> int | None:
        """The id of a checkpoint the next wave should carry, if one is due."""
        if self.in_flight is not None or now < self.next_due:
            return None
        self.next_due = now + self.interval
        if not self.waiting:
            return None  # nothing changed and nothing waits: no checkpoint needed
        # A new id even after a checkpoint that did not complete: its parts, written already, are kept.
        self.in_flight = self._issued = max(self.checkpoint, self._issued) + 1
        return self.in_flight

    def abandon(self, checkpoint: int) -> None:
        """``checkpoint``'s wave will not complete (a worker loss dropped it); the next is due at once."""
        if self.in_flight == checkpoint:
            self.in_flight = None
            self.next_due = min(self.next_due, 0.0)

    def completed(
        self, checkpoint: int | None, holds_acks: bool, parts: dict[int, tuple[int, bool]], executed: bool
    ) -> bool:
        """A wave completed: ``holds_acks`` says whether its stateful tasks sent acks that wait for a checkpoint,
        ``parts`` which checkpoint part each stateful task wrote, ``executed`` whether any executed a tuple. When
        it carried a checkpoint whose parts are all written, commit it, and return True: the acks held up to it
        may be applied (the caller tells the acker tasks)."""
        self._held = self._held or holds_acks
        self._executed = self._executed or executed
        self._parts.extend((number, task, whole) for task, (number, whole) in sorted(parts.items()))
        if checkpoint is None:
            return False
        self.in_flight = None
        missing = sorted(self.tasks - {task for number, task, _ in self._parts if number == checkpoint})
        if missing:  # a task could not write: its changes, and every task's acks, wait for the next checkpoint
            log.warning("checkpoint %d: tasks %s wrote no part of it; trying again at the next", checkpoint, missing)
            return False
        try:
            self.provider.commit(checkpoint, self.layout, sorted(self._parts))
        except Exception:
            log.exception(
                "checkpoint %d could not be committed in %s; trying again", checkpoint, self.provider.directory
            )
            return False
        self.checkpoint = checkpoint
        self._parts, self._executed, self._held = [], False, False
        return True
