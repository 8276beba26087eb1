"""The collectors handed to spouts and bolts."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall.model.components import DEFAULT_STREAM
from squall.model.topology import Topology
from squall.model.tuple import Tuple
from squall.reliability.anchoring import ack_messages, anchor, fail_messages
from squall.spark.acks import ACK, FAIL, RESET, AckBatch
from squall.spark.records import Out, Routes, check_emit, direct_target

log = logging.getLogger("squall")


@dataclass
class TaskStatus:
    """What a task reports back to the driver after a wave."""

    executed: int = 0
    emitted: int = 0
    acked: int = 0
    failed: int = 0
    malformed: int = 0
    errors: list[str] = field(default_factory=list)
    unpicklable: list[str] = field(default_factory=list)  # bolt attributes left out of the task's snapshot


def _anchor_list(anchors: Tuple | Iterable[Tuple] | None) -> list[Tuple]:
    if anchors is None:
        return []
    if isinstance(anchors, Tuple):
        return [anchors]
    return list(anchors)


class OutputCollector:
    """A bolt task's collector: emits are routed by the groupings, acks go to the acker.

    Output records accumulate until the task drains them.
    """

    def __init__(self, topology: Topology, component: str, task: int, acking: bool, capture: bool) -> None:
        self._topology = topology
        self._component = component
        self._task = task
        self._acking = acking
        self._capture = capture
        self._routes = Routes(topology, component, task)
        self._task_index = {t: i for c in topology.components.values() for i, t in enumerate(c.tasks)}
        self.next_id: Callable[[], int] = lambda: 0
        self.out: list[tuple] = []  # emits, keyed by target task index
        self.ack_roots: list[int] = []  # ack, fail and reset messages, reduced into an AckBatch by take_acks()
        self.ack_values: list[int] = []
        self.ack_kinds: list[int] = []
        self.status = TaskStatus()
        self.captured: list[tuple] = []  # default-stream emits, when testing asks for them

    def _send(self, targets: list[tuple[str, int]], stream: str, values: tuple, anchors) -> list[int]:
        parents = _anchor_list(anchors) if self._acking else []
        for bolt, task in targets:
            edges = anchor(parents, self.next_id) if parents else {}
            record = (values, self._component, self._task, stream, edges)
            self.out.append((self._task_index[task], (Out.EMIT, bolt, record)))
        if self._capture and stream == DEFAULT_STREAM:
            self.captured.append(values)
        self.status.emitted += 1
        return [task for _, task in targets]

    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Iterable[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> list[int]:
        """Emit ``values`` on ``stream``, anchored to ``anchors``; returns the target task ids."""
        values = check_emit(self._topology, self._component, stream, values)
        return self._send(self._routes.targets(stream, values), stream, values, anchors)

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Iterable[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        values = check_emit(self._topology, self._component, stream, values)
        bolt = direct_target(self._topology, self._component, stream, task)
        self._send([(bolt, task)], stream, values, anchors)

    def _ack_message(self, root: int, value: int, kind: int) -> None:
        self.ack_roots.append(root)
        self.ack_values.append(value)
        self.ack_kinds.append(kind)

    def ack(self, tup: Tuple) -> None:
        self.status.acked += 1
        if self._acking:
            for root, value in ack_messages(tup):
                self._ack_message(root, value, ACK)

    def fail(self, tup: Tuple) -> None:
        self.status.failed += 1
        if self._acking:
            for root in fail_messages(tup):
                self._ack_message(root, 0, FAIL)

    def reset_timeout(self, tup: Tuple) -> None:
        if self._acking:
            for root in tup.anchors_to_ids:
                self._ack_message(root, 0, RESET)

    def take_acks(self) -> AckBatch:
        """This wave's ack messages, XOR-reduced per root; the buffers start over."""
        batch = AckBatch.from_messages(self.ack_roots, self.ack_values, self.ack_kinds)
        self.ack_roots, self.ack_values, self.ack_kinds = [], [], []
        return batch

    def report_error(self, error: BaseException) -> None:
        text = "".join(traceback.format_exception(error))
        self.status.errors.append(f"{self._component} task {self._task}: {text}")

    def report_malformed(self, what: str) -> None:
        """A source message that was set aside, not emitted: counted and logged."""
        self.status.malformed += 1
        log.error("%s task %d: malformed message set aside: %s", self._component, self._task, what)


class BasicOutputCollector:
    """What a ``BasicBolt`` sees: emits are anchored to the tuple being executed."""

    def __init__(self, collector: OutputCollector) -> None:
        self._collector = collector
        self.input: Tuple | None = None

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        return self._collector.emit(values, anchors=self.input, stream=stream)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        self._collector.emit_direct(task, values, anchors=self.input, stream=stream)

    def reset_timeout(self, tup: Tuple) -> None:
        self._collector.reset_timeout(tup)

    def report_error(self, error: BaseException) -> None:
        self._collector.report_error(error)
