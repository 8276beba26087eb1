"""The collectors handed to bolts: ``OutputCollector`` (a ``Bolt``'s, a ``BatchBolt``'s) and
``BasicOutputCollector`` (a ``BasicBolt``'s). A spout's is ``spouts.SpoutOutputCollector``."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import cython
import numpy as np

from squall.model.attempt import TransactionAttempt
from squall.model.components import DEFAULT_STREAM
from squall.model.topology import Topology
from squall.model.tuple import Tuple
from squall.reliability.acks import AckBatch, draw_edges
from squall.reliability.anchoring import ack_messages, anchor, enter_messages, fail_messages
from squall.reliability.ids import IdGenerator
from squall.spark.load import TaskWeights
from squall.spark.protocol import Batch, TaskStatus
from squall.spark.records import EmitChecker, Routes, direct_target

log = logging.getLogger("squall")
ACKED_START = 4096  # acked (root, edge) pairs a collector has room for at first; it doubles the room as needed


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
_CHUNK = cython.declare(cython.Py_ssize_t, CHUNK_ROWS)  # the same, as a C integer for ``emit``


def _doubled(array: np.ndarray, used: int) -> np.ndarray:
    """A uint64 buffer of twice ``used`` rows, holding the first ``used`` of ``array``."""
    grown = np.empty(2 * used, np.uint64)
    grown[:used] = array[:used]
    return grown


@cython.cclass
class _Open:
    """A batch being filled, with its columns at hand: ``emit`` appends to them with no attribute lookup. With
    acking, its rows' roots are C integers in a buffer that doubles as needed, until the batch is sealed."""

    batch = cython.declare(object, visibility="readonly")
    streams = cython.declare(list)
    values = cython.declare(list)
    _tracked = cython.declare(cython.bint)
    _root_array = cython.declare(object)
    _root_view = cython.declare(cython.ulonglong[::1])

    def __init__(self, batch: Batch, tracked: bool) -> None:
        self.batch = batch
        self.streams, self.values = batch.streams, batch.values
        self._tracked = tracked
        if tracked:
            self._root_array = self._root_view = np.empty(CHUNK_ROWS, np.uint64)

    @cython.cfunc
    @cython.locals(root=cython.ulonglong, rows=cython.Py_ssize_t)
    def add(self, stream: str, values: tuple, root: int) -> cython.void:
        """A row in tree ``root`` (0: in none, or in the batch's ``trees``)."""
        if self._tracked:
            rows = len(self.values)
            if rows == self._root_view.shape[0]:  # a batch that is not shipped at CHUNK_ROWS
                self._root_array = self._root_view = _doubled(self._root_array, rows)
            self._root_view[rows] = root
        self.streams.append(stream)
        self.values.append(values)

    def roots(self) -> np.ndarray:
        """The rows' roots, as uint64 (with acking)."""
        return self._root_array[: len(self.values)]


@cython.cfunc
@cython.returns(cython.bint)
def _plain_values(values: Any) -> bool:
    """Every value is of ``records.PLAIN_TYPES``, compared by identity."""
    for value in values:
        kind = type(value)
        if not (
            kind is str
            or kind is int
            or kind is float
            or kind is bool
            or kind is bytes
            or value is None
            or kind is TransactionAttempt
        ):
            return False
    return True


def plain_tuple(values: Any, arity: cython.Py_ssize_t) -> tuple | None:
    """``values`` as a tuple, when it is a list or tuple of ``arity`` plain values (``records.EmitChecker``'s fast
    path, at C speed); None when it is not."""
    kind = type(values)
    if (kind is tuple or kind is list) and len(values) == arity and _plain_values(values):
        return tuple(values)
    return None


def plain_rows(rows: list, arity: cython.Py_ssize_t) -> list | None:
    """``rows`` as tuples, when each is a list or tuple of ``arity`` plain values (``records.EmitChecker``'s fast
    path for many rows at once); None when one is not."""
    checked: list = []
    for values in rows:
        kind = type(values)
        if not (kind is tuple or kind is list) or len(values) != arity or not _plain_values(values):
            return None
        checked.append(tuple(values))
    return checked


@cython.cclass
class OutputCollector:
    """A bolt task's collector, handed to ``prepare`` for the task's life: Storm's ``OutputCollector``.

    Use it from the task's ``execute`` (and a ``BatchBolt``'s ``finish_batch``), on the task's thread: it is not
    thread-safe, and it cannot emit from ``prepare``, which comes before the task's first wave. Emits are routed by
    the groupings into a ``Batch`` per target task, and reach each target task in the order they were made. Acks,
    fails and timeout resets are buffered and go to the ackers, XOR-reduced per root, after the emits made before
    them: whenever the task's worker has nothing else to do, and when the task ends its wave at the latest (a
    stateful bolt's only then: they take effect once a checkpoint holds its state). In a transactional topology (a
    ``BatchBolt``'s collector) there is no tuple tree: anchors and acks change nothing, and ``fail`` in ``execute``
    fails the batch.

    A batch that reaches ``CHUNK_ROWS`` goes to ``ship`` at once; the rest stay in ``outbox`` until the worker
    takes them (``take_batches``), when it has nothing else to do or the task ends its wave. The common emit
    (declared plain values, to one subscriber whose grouping picks one task, anchored to one tuple in one tree)
    takes a short path with no per-tuple allocation beyond the row itself.
    """

    # Compiled, its fields are a C struct's, declared in ``collectors.pxd``: ``emit`` reads them once per tuple.

    def __init__(
        self,
        topology: Topology,
        component: str,
        task: int,
        acking: bool,
        capture: bool,
        local_tasks: frozenset[int] = frozenset(),
        weights: TaskWeights | None = None,
    ) -> None:
        self._topology = topology
        self._component = component
        self._task = task
        self._acking = acking
        self._capture = capture
        self._routes = Routes(topology, component, task, local_tasks, weights)
        self._pickers: dict[str, Any] = {}  # stream -> Routes.picker, or False when a stream has none
        self._forget_last_stream()
        self._check = EmitChecker(topology, component)
        self._arity = self._check.arity
        self.ids: IdGenerator | None = None  # set per wave: a replayed wave draws the same edge ids
        self.next_id: Callable[[], int] = lambda: 0
        self.generation = 0
        self.wave = 0
        self.outbox: dict[int, _Open] = {}  # target task -> this wave's emits to it not yet shipped
        self.ship: Callable[[Batch], None] | None = None
        # The wave's acker messages, XOR-reduced per root by take_acks():
        # (root, edge) of each acked tuple in one tree, stored as C integers: no list of ints made and converted
        # each wave, and no tuples kept for the garbage collector to walk over until the wave ends
        self._acked_count = 0
        self._acked_root_array = self._acked_root_view = np.empty(ACKED_START, np.uint64)
        self._acked_edge_array = self._acked_edge_view = np.empty(ACKED_START, np.uint64)
        self._acked_rows: list[tuple[list[int], list[int]]] = []  # a basic bolt's batch: every row acked at once
        self._entered: list[tuple[Any, np.ndarray]] = []  # (roots, edges) of shipped rows, sent into trees
        self._message_roots: list[int] = []  # any other (root, edge) message
        self._message_edges: list[int] = []
        self.failed_roots: list[int] = []
        self.reset_roots: list[int] = []
        self._status = TaskStatus()
        self._emitted = self._acked = 0
        self.captured: list[tuple] = []  # default-stream emits, when testing asks for them

    @property
    def status(self) -> TaskStatus:
        """The task's counters this wave."""
        self._status.emitted += self._emitted
        self._status.acked += self._acked
        self._emitted = self._acked = 0
        return self._status

    @status.setter
    def status(self, status: TaskStatus) -> None:
        self._status, self._emitted, self._acked = status, 0, 0

    def set_local_tasks(self, local_tasks: frozenset[int], weights: TaskWeights | None = None) -> None:
        """The tasks that share this task's worker, after it moved, and that worker's load weights."""
        self._routes = Routes(self._topology, self._component, self._task, local_tasks, weights)
        self._pickers = {}
        self._forget_last_stream()

    def _forget_last_stream(self) -> None:
        """``emit``'s memo of the last stream emitted on: its arity and its picker, looked up again next time."""
        self._last_stream, self._last_arity, self._last_pick = None, -1, None

    def _open(self, task: int) -> _Open:
        rows = self.outbox.get(task)
        if rows is None:
            batch = Batch(self.generation, self.wave, self._task, self._component, self._task, task)
            rows = self.outbox[task] = _Open(batch, self._acking)
        return rows

    def _full(self, rows: _Open) -> None:
        if self.ship is not None:
            del self.outbox[rows.batch.target]
            self.ship(self._seal(rows))

    def _seal(self, rows: _Open) -> Batch:
        """The open batch, its columns closed: with acking, the edge ids of its rows in one tree are drawn all at
        once and sent into their trees, and its ``roots`` and ``edges`` become uint64 arrays (two buffers on the
        wire, not lists); without, they are zeros."""
        batch = rows.batch
        if not self._acking:
            batch.roots, batch.edges = [0] * len(batch.values), [0] * len(batch.values)
            return batch
        roots = rows.roots()
        edges, entering, entered = draw_edges(roots, self.ids.next_ids)
        if len(entering):
            self._entered.append((entering, entered))  # XORed in with the wave's acks
        batch.roots, batch.edges = roots, edges
        return batch

    @cython.locals(rows=_Open)
    def _send(self, targets: list[tuple[str, int]], stream: str, values: tuple, anchors) -> list[int]:
        """The general emit: any number of targets, any anchors. Each copy's edges are drawn here and keep
        to the batch's ``trees``, so that ``_seal`` leaves them be."""
        parents = _anchor_list(anchors) if self._acking else []
        for _, task in targets:
            rows = self._open(task)
            anchors_to_ids = anchor(parents, self.next_id) if parents else {}
            if anchors_to_ids:
                rows.batch.trees[len(rows.values)] = anchors_to_ids
                self._messages(enter_messages(anchors_to_ids))
            rows.add(stream, values, 0)
            if len(rows.values) >= CHUNK_ROWS:
                self._full(rows)
        if self._capture and stream == DEFAULT_STREAM:
            self.captured.append(values)
        self._emitted += 1
        return [task for _, task in targets]

    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Iterable[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> list[int]:
        """Emit ``values`` on ``stream``, anchored to ``anchors``; returns the target task ids.

        ``anchors`` is the input tuple (or a list of them: multi-anchoring) whose trees the new tuple joins, or
        None for a tuple outside any tree. Values that do not match the stream's declared fields raise
        ``EmitError``, and one that cannot be pickled ``SerializationError``, naming the component, the stream
        and the field."""
        return self._emit(values, anchors, stream)

    @cython.cfunc
    @cython.locals(root=cython.ulonglong, columns=_Open, arity=cython.Py_ssize_t)
    def _emit(self, values: Any, anchors: Any, stream: Any):
        """``emit``, as a C method: a basic bolt's collector calls it with no Python call in between."""
        if stream is self._last_stream:  # a task mostly emits on one stream: no lookup
            arity, pick = self._last_arity, self._last_pick
        else:
            arity = self._arity.get(stream, -1)
            pick = self._pickers.get(stream)
            if pick is None:
                pick = self._pickers[stream] = self._picker(stream)
            self._last_stream, self._last_arity, self._last_pick = stream, arity, pick
        kind = type(values)
        if (kind is tuple or kind is list) and len(values) == arity and _plain_values(values):
            values = tuple(values)  # EmitChecker's fast path, inline
        else:
            values = self._check(stream, values)
        if pick is False:
            return self._send(self._routes.targets(stream, values), stream, values, anchors)
        target = pick if type(pick) is int else pick(values)
        root = 0
        if anchors is not None and self._acking:
            sole = anchors if type(anchors) is Tuple else _sole_anchor(anchors)
            if sole is None or cython.cast(Tuple, sole).trees:
                return self._send([("", target)], stream, values, anchors)
            root = cython.cast(Tuple, sole).root  # the row's edge is drawn when its batch is sealed
        rows = self.outbox.get(target)
        if rows is None:
            rows = self._open(target)
        columns = cython.cast(_Open, rows)
        columns.add(stream, values, root)
        if len(columns.values) >= _CHUNK:
            self._full(columns)
        if self._capture and stream == DEFAULT_STREAM:
            self.captured.append(values)
        self._emitted += 1
        return [target]

    def _picker(self, stream: str) -> Any:
        """How ``emit`` picks the target of a stream: a task id, a function of the values, or False (``_send``)."""
        target = self._routes.constant_target(stream)
        if target is not None:
            return target
        return self._routes.picker(stream) or False

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Iterable[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        """Emit to ``task``, a task of a bolt that reads ``stream`` with ``direct_grouping``, anchored as
        ``emit``; ``EmitError`` if the stream is not direct or ``task`` does not read it."""
        values = self._check(stream, values)
        bolt = direct_target(self._topology, self._component, stream, task)
        self._send([(bolt, task)], stream, values, anchors)

    @cython.locals(count=cython.Py_ssize_t, acked=Tuple)
    def ack(self, tup: Tuple) -> None:
        """The task is done with ``tup``: ack each input once, after emitting what is anchored to it."""
        self._acked += 1
        if self._acking:
            acked = cython.cast(Tuple, tup, typecheck=True)
            if acked.root:
                count = self._acked_count
                if count == self._acked_root_view.shape[0]:
                    self._grow_acked()
                self._acked_root_view[count] = acked.root
                self._acked_edge_view[count] = acked.edge
                self._acked_count = count + 1
            elif acked.trees:
                self._messages(ack_messages(acked))

    def _grow_acked(self) -> None:
        count = self._acked_count
        self._acked_root_array = self._acked_root_view = _doubled(self._acked_root_array, count)
        self._acked_edge_array = self._acked_edge_view = _doubled(self._acked_edge_array, count)

    def ack_batch(self, batch: Batch, failed: list[int]) -> None:
        """A basic bolt executed every row of ``batch``: each is acked but the ``failed`` ones (row indexes)."""
        self._acked += len(batch.values) - len(failed)
        if self._acking:
            roots = np.asarray(batch.roots, dtype=np.uint64)
            if failed:
                roots = roots.copy()
                roots[failed] = 0  # in no tree: left out of the acks
            self._acked_rows.append((roots, batch.edges))
            skip = set(failed)
            for i, anchors_to_ids in batch.trees.items():
                if i not in skip:
                    self._messages(anchors_to_ids.items())

    def _messages(self, pairs: Iterable[tuple[int, int]]) -> None:
        """``(root, edge)`` acker messages of tuples in several trees."""
        for root, edge in pairs:
            self._message_roots.append(root)
            self._message_edges.append(edge)

    def fail(self, tup: Tuple) -> None:
        """Fail ``tup``'s trees: the spout tuple each descends from fails (``Spout.fail``), whatever else acks."""
        self.status.failed += 1
        if self._acking:
            self.failed_roots.extend(fail_messages(tup))

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of ``tup``'s trees (Storm's ``resetTimeout``): for a tuple the task holds long."""
        if self._acking:
            self.reset_roots.extend(tup.anchors_to_ids)

    def take_batches(self) -> list[Batch]:
        """The emits not shipped yet, one batch per target task, sealed; the outbox starts over."""
        outbox, self.outbox = self.outbox, {}
        return [self._seal(rows) for rows in outbox.values()]

    def take_last_batches(self, readers: list[int]) -> list[Batch]:
        """``take_batches``, with an empty batch for each of ``readers`` that has none, every one marked ``last``:
        this task's part of the wave (or transactional batch) is over for each reader."""
        outbox = {batch.target: batch for batch in self.take_batches()}
        batches = []
        for reader in readers:
            batch = outbox.pop(reader, None) or Batch(
                self.generation, self.wave, self._task, self._component, self._task, reader
            )
            batch.last = True
            batches.append(batch)
        return batches

    def take_acks(self) -> AckBatch:
        """This wave's acker messages, XOR-reduced per root; the buffers start over."""
        count = self._acked_count
        roots = [self._acked_root_array[:count], np.array(self._message_roots, dtype=np.uint64)]
        edges = [self._acked_edge_array[:count], np.array(self._message_edges, dtype=np.uint64)]
        for row_roots, row_edges in (*self._acked_rows, *self._entered):
            roots.append(row_roots)
            edges.append(np.asarray(row_edges, dtype=np.uint64))
        failed, reset = self.failed_roots, self.reset_roots
        all_roots, all_edges = np.concatenate(roots), np.concatenate(edges)  # copies: the buffers start over
        self._acked_count = 0
        if not all_roots.all():  # rows of a basic bolt's batch in no tree
            in_tree = all_roots != 0
            all_roots, all_edges = all_roots[in_tree], all_edges[in_tree]
        self._acked_rows, self._entered = [], []
        self._message_roots, self._message_edges, self.failed_roots, self.reset_roots = [], [], [], []
        return AckBatch.from_acks(all_roots, all_edges, [r for r in failed if r], [r for r in reset if r])

    def report_error(self, error: BaseException) -> None:
        """Count ``error`` among the run's errors (the web UI's and ``squall run``'s), with the component and the
        task; in an at-least-once topology it fails nothing (in a ``BatchBolt``'s ``execute`` it fails the
        batch)."""
        text = "".join(traceback.format_exception(error))
        self.status.errors.append(f"{self._component} task {self._task}: {text}")

    def report_malformed(self, what: str) -> None:
        """A source message that was set aside, not emitted: counted and logged."""
        self.status.malformed += 1
        log.error("%s task %d: malformed message set aside: %s", self._component, self._task, what)


@cython.cclass
class BasicOutputCollector:
    """What a ``BasicBolt``'s ``execute`` gets: emits are anchored to the tuple being executed, which the runtime
    acks when ``execute`` returns (or fails if it raises). Use it only during that call, on the task's thread."""

    # Compiled, its fields are declared in ``collectors.pxd``, where ``execution.py`` reads them.

    def __init__(self, collector: OutputCollector) -> None:
        self._collector = collector
        self.input: Tuple | None = None

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """``OutputCollector.emit``, anchored to the input; returns the target task ids."""
        return self._collector._emit(values, self.input, stream)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """``OutputCollector.emit_direct``, anchored to the input."""
        self._collector.emit_direct(task, values, anchors=self.input, stream=stream)

    def reset_timeout(self, tup: Tuple) -> None:
        """``OutputCollector.reset_timeout``."""
        self._collector.reset_timeout(tup)

    def report_error(self, error: BaseException) -> None:
        """``OutputCollector.report_error``."""
        self._collector.report_error(error)
