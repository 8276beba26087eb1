"""The collectors handed to spouts and bolts."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from squall.model.components import DEFAULT_STREAM
from squall.model.topology import Topology
from squall.model.tuple import Tuple
from squall.reliability.anchoring import ack_messages, anchor, fail_messages
from squall.spark.acks import ACK, FAIL, RESET, AckBatch
from squall.spark.protocol import Batch, TaskStatus
from squall.spark.records import EmitChecker, Routes, direct_target

log = logging.getLogger("squall")


def _anchor_list(anchors: Tuple | Iterable[Tuple] | None) -> list[Tuple]:
    if anchors is None:
        return []
    if isinstance(anchors, Tuple):
        return [anchors]
    return list(anchors)


def _sole_anchor(anchors: Tuple | Iterable[Tuple]) -> Tuple | None:
    """The one tuple ``anchors`` names, if it names exactly one."""
    if type(anchors) is Tuple:
        return anchors
    if type(anchors) in (list, tuple) and len(anchors) == 1 and type(anchors[0]) is Tuple:
        return anchors[0]
    return None


CHUNK_ROWS = 4096  # a batch this long leaves before the wave ends


class OutputCollector:
    """A bolt task's collector: emits are routed by the groupings into a ``Batch`` per target task; acks are
    buffered for the acker.

    A batch that reaches ``CHUNK_ROWS`` goes to ``ship`` at once; the rest stay in ``outbox`` until the task
    ends its wave (``take_batches``). The common emit (declared plain values, to one subscriber whose grouping
    picks one task, anchored to one tuple in one tree) takes a short path with no per-tuple allocation beyond
    the row itself.
    """

    def __init__(
        self,
        topology: Topology,
        component: str,
        task: int,
        acking: bool,
        capture: bool,
        local_tasks: frozenset[int] = frozenset(),
    ) -> None:
        self._topology = topology
        self._component = component
        self._task = task
        self._acking = acking
        self._capture = capture
        self._routes = Routes(topology, component, task, local_tasks)
        self._pickers: dict[str, Any] = {}  # stream -> Routes.picker, or False when a stream has none
        self._check = EmitChecker(topology, component)
        self.next_id: Callable[[], int] = lambda: 0
        self.generation = 0
        self.wave = 0
        self.outbox: dict[int, Batch] = {}  # target task -> this wave's emits to it not yet shipped
        self.ship: Callable[[Batch], None] | None = None
        self.ack_roots: list[int] = []  # (root, edge ^ ack_val) of each ack, reduced by take_acks()
        self.ack_values: list[int] = []
        self.failed_roots: list[int] = []
        self.reset_roots: list[int] = []
        self.status = TaskStatus()
        self.captured: list[tuple] = []  # default-stream emits, when testing asks for them

    def set_local_tasks(self, local_tasks: frozenset[int]) -> None:
        """The tasks that share this task's worker, after it moved."""
        self._routes = Routes(self._topology, self._component, self._task, local_tasks)
        self._pickers = {}

    def _batch_to(self, task: int) -> Batch:
        batch = self.outbox.get(task)
        if batch is None:
            batch = self.outbox[task] = Batch(self.generation, self.wave, self._task, self._component, self._task, task)
        return batch

    def _full(self, batch: Batch) -> None:
        if self.ship is not None:
            del self.outbox[batch.target]
            self.ship(batch)

    def _send(self, targets: list[tuple[str, int]], stream: str, values: tuple, anchors) -> list[int]:
        """The general emit: any number of targets, any anchors."""
        parents = _anchor_list(anchors) if self._acking else []
        for _, task in targets:
            batch = self._batch_to(task)
            batch.add_in_trees(stream, values, anchor(parents, self.next_id) if parents else {})
            if len(batch.values) >= CHUNK_ROWS:
                self._full(batch)
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
        values = self._check(stream, values)
        pick = self._pickers.get(stream)
        if pick is None:
            pick = self._pickers[stream] = self._routes.picker(stream) or False
        if pick is False:
            return self._send(self._routes.targets(stream, values), stream, values, anchors)
        target = pick(values)
        root = edge = 0
        if anchors is not None and self._acking:
            parent = _sole_anchor(anchors)
            if parent is None or parent.trees:
                return self._send([("", target)], stream, values, anchors)
            root = parent.root
            if root:
                edge = self.next_id()
                parent.ack_val ^= edge
        batch = self.outbox.get(target)
        if batch is None:
            batch = self._batch_to(target)
        batch.streams.append(stream)  # Batch.add, inline: this runs once per tuple
        batch.values.append(values)
        batch.roots.append(root)
        batch.edges.append(edge)
        if len(batch.values) >= CHUNK_ROWS:
            self._full(batch)
        if self._capture and stream == DEFAULT_STREAM:
            self.captured.append(values)
        self.status.emitted += 1
        return [target]

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Iterable[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        values = self._check(stream, values)
        bolt = direct_target(self._topology, self._component, stream, task)
        self._send([(bolt, task)], stream, values, anchors)

    def ack(self, tup: Tuple) -> None:
        self.status.acked += 1
        if self._acking:
            root = tup.root
            if root:
                self.ack_roots.append(root)
                self.ack_values.append(tup.edge ^ tup.ack_val)
            elif tup.trees:
                for root, value in ack_messages(tup):
                    self.ack_roots.append(root)
                    self.ack_values.append(value)

    def fail(self, tup: Tuple) -> None:
        self.status.failed += 1
        if self._acking:
            self.failed_roots.extend(fail_messages(tup))

    def reset_timeout(self, tup: Tuple) -> None:
        if self._acking:
            self.reset_roots.extend(tup.anchors_to_ids)

    def take_batches(self) -> list[Batch]:
        """The emits not shipped yet, one batch per target task; the outbox starts over."""
        batches, self.outbox = list(self.outbox.values()), {}
        return batches

    def take_acks(self) -> AckBatch:
        """This wave's ack messages, XOR-reduced per root; the buffers start over."""
        acks, failed, reset = len(self.ack_roots), len(self.failed_roots), len(self.reset_roots)
        batch = AckBatch.from_messages(
            self.ack_roots + self.failed_roots + self.reset_roots,
            self.ack_values + [0] * (failed + reset),
            [ACK] * acks + [FAIL] * failed + [RESET] * reset,
        )
        self.ack_roots, self.ack_values, self.failed_roots, self.reset_roots = [], [], [], []
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
