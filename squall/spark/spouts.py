"""Spout hosting: spout tasks, their collectors, and their tuples for the next wave. The host runs on a worker
(``worker_spouts.py``): one of the Spark job's under ``LocalCluster`` and ``squall run``, the one in the test's
process under ``TestCluster``.

The host calls ``next_tuple`` on each spout task within its ``max.spout.pending``
budget and the wave's size. An emit with a message id starts a tuple tree
(``trees.PendingTrees.start``) and becomes one row per target task in the
wave's ``SpoutOutbox``, carrying the tree's root. When the wave is taken, each
row gets its edge id, drawn all at once (``take_wave``), and once the batches have
left, the new trees' init messages reach their acker tasks (``merge_inits``). When
trees settle, the host calls ``ack`` or ``fail`` on the exact spout task that
emitted each one and records its complete latency.
"""

from __future__ import annotations

import logging
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from squall.model.components import DEFAULT_STREAM, Spout
from squall.model.config import DEFAULTS, SQUALL_MAX_REPEATED_ERRORS
from squall.model.topology import Topology, TopologyContext
from squall.reliability.acker import ACKED, TIMED_OUT, Settlement
from squall.reliability.acks import draw_edges
from squall.spark.clock import Clock
from squall.spark.collectors import plain_rows, plain_tuple
from squall.spark.failures import ErrorStreak, TaskSetupError
from squall.spark.load import TaskWeights
from squall.spark.protocol import DRIVER, Batch
from squall.spark.records import EmitChecker, EmitError, Routes, direct_target
from squall.spark.stats import RunStats, latency_buckets
from squall.spark.trees import PendingTrees

log = logging.getLogger("squall")


class SpoutOutbox:
    """The spout tasks' emits for the next wave: one batch per source task and target task."""

    def __init__(self) -> None:
        self._batches: dict[int, dict[int, Batch]] = {}  # source task -> target task -> batch

    def batch_for(self, target: int, component: str, source: int) -> Batch:
        per_target = self._batches.get(source)
        if per_target is None:
            per_target = self._batches[source] = {}
        batch = per_target.get(target)
        if batch is None:
            batch = per_target[target] = Batch(0, 0, DRIVER, component, source, target)
        return batch

    def take(self) -> dict[int, dict[int, Batch]]:
        """Each source task's batches, per target task; the outbox starts over."""
        batches, self._batches = self._batches, {}
        return batches


class SpoutOutputCollector:
    """A spout task's collector, handed to ``open`` for the task's life: Storm's ``SpoutOutputCollector``.

    Use it from the spout's own methods, on the task's thread: it is not thread-safe. Emit from ``next_tuple``,
    where the budgets below are counted. An emit with a ``msg_id`` starts a tuple tree that ends in one
    ``ack(msg_id)`` or ``fail(msg_id)`` on this task; one without is not tracked. What the task emits leaves when
    the round of calls it came from ends (a wave's first calls, or those of its open part), to each target task
    in emission order. An emit that does not
    match the declared stream and fields raises ``EmitError``, and a value that cannot be pickled
    ``SerializationError``, each naming the component, the stream and what is wrong.

    ``emit_budget``: how many tuples the current ``next_tuple`` call may still emit, set before each call: the
    task's share of the wave left, and no more than ``topology.max.spout.pending`` less its trees pending. It is
    not enforced: a call that emits more ends the task's calls for the wave, and may take it past
    ``topology.max.spout.pending``.

    ``may_wait``: False in a run, where ``next_tuple`` must return at once; a spout that can wait for input (a
    broker's poll timeout) asks this before it does.
    """

    def __init__(
        self, host: SpoutHost, topology: Topology, component: str, task: int, weights: TaskWeights | None = None
    ) -> None:
        self._host, self._topology, self._component, self._task = host, topology, component, task
        self._routes = Routes(topology, component, task, weights=weights)
        self._pickers: dict[str, Any] = {}  # stream -> Routes.picker, or False when a stream has none
        self._check = EmitChecker(topology, component)
        self._arity = self._check.arity
        self.emit_budget = 1  # tuples the current next_tuple call may emit (set by the host before each call)
        # A run calls every spout task of a worker in turn, on the thread its bolts run on, and paces an idle
        # topology itself (a progressive wait, as Storm's): next_tuple should return at once when it has nothing,
        # not wait for input. A spout that can wait (a broker's poll timeout) asks this.
        self.may_wait = False

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a spout tuple on ``stream``; with a ``msg_id`` it is tracked and acked or failed later. Returns
        the target task ids (none when no bolt reads the stream: a tracked tuple is then acked at once)."""
        checked = plain_tuple(values, self._arity.get(stream, -1))
        values = self._check(stream, values) if checked is None else checked
        pick = self._pickers.get(stream)
        if pick is None:
            pick = self._pickers[stream] = self._routes.picker(stream) or False
        if pick is not False:
            targets = [pick(values)]
        else:
            targets = [task for _, task in self._routes.targets(stream, values)]
        return self._host.emit(self._component, self._task, stream, values, msg_id, targets)

    def emit_many(
        self, rows: Sequence[Sequence[Any]], msg_ids: Sequence[Any] | None = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit ``rows`` on ``stream``, with ``msg_ids`` (one per row) when they are tracked: the same as an
        ``emit`` of each in turn, in one call. A spout that emits in bulk asks ``emit_budget`` how many it may."""
        if msg_ids is not None and len(msg_ids) != len(rows):
            raise EmitError(
                f"component {self._component!r} emitted {len(rows)} rows with {len(msg_ids)} msg ids on stream "
                f"{stream!r}: give one msg id per row"
            )
        checked = plain_rows(rows, self._check.arity.get(stream, -1))
        rows = self._check.many(stream, rows) if checked is None else checked
        pick = self._pickers.get(stream)
        if pick is None:
            pick = self._pickers[stream] = self._routes.picker(stream) or False
        if pick is not False and (msg_ids is None or None not in msg_ids):
            take = getattr(pick, "take", None)  # a shuffle's picks do not depend on the values: drawn at once
            targets = take(len(rows)) if take is not None else list(map(pick, rows))
            self._host.emit_many(self._component, self._task, stream, rows, msg_ids, targets)
        else:  # several subscribers, a grouping that sends a tuple to several tasks, or untracked rows among them
            for i, values in enumerate(rows):
                targets = [task for _, task in self._routes.targets(stream, values)]
                self._host.emit(
                    self._component, self._task, stream, values, None if msg_ids is None else msg_ids[i], targets
                )

    def emit_direct(self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> None:
        """Emit to ``task``, a task of a bolt that reads ``stream`` with ``direct_grouping``; ``EmitError`` if the
        stream is not direct or ``task`` does not read it."""
        values = self._check(stream, values)
        direct_target(self._topology, self._component, stream, task)
        self._host.emit(self._component, self._task, stream, values, msg_id, [task])

    def report_error(self, error: BaseException) -> None:
        """Count and log ``error`` among the run's errors (the web UI's and ``squall run``'s), failing nothing."""
        self._host.error(self._component, self._task, "reported an error", error, uncaught=False)

    def report_malformed(self, what: str) -> None:
        """A message the spout set aside instead of emitting: counted in the run's stats and logged."""
        self._host.stats.of(self._component).malformed += 1
        self._host.stats.of_task(self._component, self._task).malformed += 1
        log.error("spout %s task %d: malformed message set aside: %s", self._component, self._task, what)


class SpoutTask:
    """One spout task. ``open`` is called by ``SpoutHost.open``, on the thread that makes every later call."""

    def __init__(
        self,
        host: SpoutHost,
        topology: Topology,
        conf: dict,
        component: str,
        task: int,
        spout: Any,
        weights: TaskWeights | None = None,
    ) -> None:
        self.component, self.task = component, task
        spec = topology.components[component]
        self.spout = spout
        self.conf = {**conf, **spec.conf}
        self.context = TopologyContext(topology, component, task)
        self.collector = SpoutOutputCollector(host, topology, component, task, weights)


class SpoutHost:
    """The spout tasks ``tasks`` of one worker (``worker_spouts.py``), each an instance ``make_spout`` made, with
    what they emit for the next wave and the trees they wait on."""

    def __init__(
        self,
        topology: Topology,
        conf: dict,
        stats: RunStats,
        trees: PendingTrees | None,
        clock: Clock,
        max_pending: int | None,
        captured: dict[tuple[str, int], list[tuple]] | None,
        tasks: list[int],
        make_spout: Callable[[Topology, str, int], Any],
        weights: TaskWeights | None = None,
    ) -> None:
        self.stats = stats
        self.trees = trees  # None when acking is off: a message id is acked as soon as it is emitted
        self.outbox = SpoutOutbox()
        self._inits: tuple[list, list] = ([], [])  # (roots, edges) of trees taken, not merged yet
        self._clock = clock
        self._now: Callable[[], float] = clock.reader()  # read again at each ``call``
        self._max_pending = max_pending
        self._captured = captured  # default-stream emits, when testing asks for them
        self._immediate_acks: list[tuple[int, Any]] = []
        self.emits = 0
        self._emitted: dict[int, int] = {}  # spout task -> its emits not yet in its stats (``count_emits``)
        self.wave_emits: dict[int, int] = {}  # spout task -> its emits in the wave open now (``begin_wave``)
        self.active = True  # deactivated, the spouts are not asked for tuples
        self._wanted_active = True  # as asked from any thread; applied on the run's own thread
        self.tasks = [
            SpoutTask(self, topology, conf, component, task, make_spout(topology, component, task), weights)
            for component, spec in topology.spouts.items()
            for task in spec.tasks
            if task in tasks
        ]
        self._by_task = {s.task: s for s in self.tasks}
        self.opened = False
        self.closed = False
        self._component_stats = {component: stats.of(component) for component in topology.spouts}
        self._task_stats = {s.task: stats.of_task(s.component, s.task) for s in self.tasks}
        limit = conf.get(SQUALL_MAX_REPEATED_ERRORS, DEFAULTS[SQUALL_MAX_REPEATED_ERRORS])
        # Each task's run of one repeated uncaught error; an emit is its progress (failures.ErrorStreak).
        self._streaks = {s.task: ErrorStreak(s.component, s.task, limit) for s in self.tasks}
        self.repeated: dict[int, str] = {}  # task -> why its run of one repeated error stops the topology

    def emit(self, component: str, task: int, stream: str, values: tuple, msg_id: Any, targets: list[int]) -> list[int]:
        self.emits += 1
        emitted = self._emitted
        emitted[task] = emitted.get(task, 0) + 1
        batch_for = self.outbox.batch_for
        tree = 0  # the tree's sequence number until the wave is taken (``take_wave``), which makes it its root
        if msg_id is not None:
            if self.trees is not None and targets:
                tree = self.trees.begin(task, msg_id, self._now())
            else:  # ackers off, or nobody listens: the tree is complete at once
                self._immediate_acks.append((task, msg_id))
        for target in targets:  # a row in tree ``tree``; each copy's edge is drawn when the wave is taken
            batch = batch_for(target, component, task)
            batch.streams.append(stream)
            batch.values.append(values)
            batch.roots.append(tree)
            batch.edges.append(0)
        if self._captured is not None and stream == DEFAULT_STREAM:
            self._captured.setdefault((component, task), []).append(values)
        return targets

    def count_emits(self) -> None:
        """Add the emits since the last call to the spout tasks' stats (``emit`` only counts them per task)."""
        emitted, self._emitted = self._emitted, {}
        for task, count in emitted.items():
            self._component_stats[self._by_task[task].component].emitted += count
            self._task_stats[task].emitted += count

    def emit_many(
        self,
        component: str,
        task: int,
        stream: str,
        rows: list[tuple],
        msg_ids: Sequence[Any] | None,
        targets: list[int],
    ) -> None:
        """``emit`` of each row, to one target task each, with its trees started at once."""
        n = len(rows)
        self.emits += n
        self._emitted[task] = self._emitted.get(task, 0) + n
        tracked = msg_ids is not None and self.trees is not None
        if tracked:
            roots = self.trees.begin_many(task, msg_ids, self._now())  # made roots by ``take_wave``
        else:
            if msg_ids is not None:  # ackers off: complete at once
                self._immediate_acks.extend((task, msg_id) for msg_id in msg_ids)
            roots = [0] * n
        by_target: dict[int, Batch] = {}
        batch_for = self.outbox.batch_for
        for target in set(targets):
            by_target[target] = batch_for(target, component, task)
        if len(by_target) == 1:
            (batch,) = by_target.values()
            batch.streams.extend([stream] * n)
            batch.values.extend(rows)
            batch.roots.extend(roots)
            batch.edges.extend([0] * n)
        else:
            for target, values, root in zip(targets, rows, roots, strict=True):
                by_target[target].add(stream, values, root)
        if self._captured is not None and stream == DEFAULT_STREAM:
            self._captured.setdefault((component, task), []).extend(rows)

    def take_captured(self) -> dict[tuple[str, int], list[tuple]]:
        """The default-stream emits captured since the last call, per spout task (when testing asks for them)."""
        if not self._captured:
            return {}
        captured, self._captured = self._captured, {}
        return captured

    def open(self) -> None:
        """``open`` on every spout task, once, on the calling thread: the worker's serving thread, which makes
        every later call (Storm runs a spout task's methods on one thread). What ``open`` raises stops the run
        (``TaskSetupError``, naming the spout and its task)."""
        if self.opened:
            return
        self.opened = True
        for s in self.tasks:
            try:
                s.spout.open(s.conf, s.context, s.collector)
            except Exception as exc:
                self.error(s.component, s.task, "open() raised", exc, uncaught=False)  # a setup error, not a streak
                raise TaskSetupError(s.component, s.task, "open() raised", exc) from exc

    def begin_wave(self) -> None:
        """A wave opens: each task's emits in it count from zero (``call``)."""
        self.wave_emits = {}

    def call(self, emits_per_task: int) -> int:
        """``next_tuple`` on each spout task until it has emitted ``emits_per_task`` tuples in the open wave
        (``begin_wave``), reached its pending budget, or emitted nothing in a call; returns the emits. Before each
        call the task's collector says how many tuples it may still emit (``emit_budget``), for spouts that emit in
        bulk."""
        self.open()
        before = self.emits
        self._now = self._clock.reader()
        self.apply_activation()
        per_task = self.trees.per_task if self.trees is not None else None
        bounded = per_task is not None and self._max_pending is not None
        wave_emits = self.wave_emits
        for s in self.tasks if self.active else ():
            collector, next_tuple = s.collector, s.spout.next_tuple
            left = emits_per_task - wave_emits.get(s.task, 0)
            streak = self._streaks[s.task]
            started = self.emits
            while left > 0:
                budget = min(left, self._max_pending - per_task[s.task]) if bounded else left
                if budget <= 0:
                    break
                collector.emit_budget = budget
                emitted = self.emits
                try:
                    next_tuple()
                except Exception as exc:
                    if self.emits != emitted:  # it emitted before raising: progress, then the error
                        streak.progressed()
                    self.error(s.component, s.task, "raised in next_tuple()", exc)
                    break
                if self.emits == emitted:
                    break
                if streak.count:  # an emit is the task's progress
                    streak.progressed()
                left -= self.emits - emitted
            if self.emits != started:
                wave_emits[s.task] = wave_emits.get(s.task, 0) + self.emits - started
        acks, self._immediate_acks = self._immediate_acks, []
        if acks:
            tasks = [task for task, _ in acks]
            counts = Counter(tasks)
            for task, count in counts.items():
                self.stats.of(self._by_task[task].component).acked += count
                self._task_stats[task].acked += count
            if any(self._overrides(task, "ack") for task in counts):
                self._call_each(tasks, [msg_id for _, msg_id in acks], "ack")
        return self.emits - before

    def apply_activation(self) -> None:
        """Tell the spouts what ``set_active`` asked last, if it changed (``activate`` or ``deactivate``)."""
        if self._wanted_active != self.active and self.opened and not self.closed:
            self.active = self._wanted_active
            hook = "activate" if self.active else "deactivate"
            for s in self.tasks:
                if hasattr(s.spout, hook):  # optional: a spout need only have next_tuple
                    self._call(s, hook)

    def take_wave(self) -> dict[int, dict[int, Batch]]:
        """The batches emitted since the last take (a wave's first calls, or a part of it), per source task and
        target task. Each copy of a tracked spout tuple gets its edge id here, all at once; the trees started since
        the last take reach the ackers with ``merge_inits``, which the caller makes once the batches have left,
        before it takes any ack."""
        self.count_emits()
        by_source = self.outbox.take()
        if self.trees is None:
            return by_source
        roots, edges = self._inits
        for batches in by_source.values():
            for batch in batches.values():
                if not any(batch.roots):
                    continue
                batch.roots = self.trees.roots_of(batch.roots)  # the rows' sequence numbers until now
                batch.edges, entering, entered = draw_edges(batch.roots, self.trees.new_edges)
                roots.append(entering)  # the trees' inits
                edges.append(entered)
        return by_source

    def merge_inits(self) -> None:
        """The init messages of the trees the last ``take_wave`` started, to their acker tasks here (settling any
        tree whose acks all came before)."""
        roots, edges = self._inits
        if roots:
            self._inits = ([], [])
            self.settle(self.trees.merge_inits(np.concatenate(roots), np.concatenate(edges)))

    def settle(self, settlement: Settlement) -> None:
        """``ack`` or ``fail`` on the spout task of each finished tree; complete latencies recorded per spout."""
        if not len(settlement):
            return
        acked = settlement.where(ACKED)
        if len(acked):
            latencies = self._now() - acked.emitted_at
            tasks = acked.tasks
            spout_tasks = np.unique(tasks).tolist()
            for task in spout_tasks:
                mine = tasks == task
                acked_here = int(np.count_nonzero(mine))
                self.stats.of(self._by_task[task].component).acked += acked_here
                self._task_stats[task].acked += acked_here
                # Only the task's histogram: its report carries it, and the driver adds it to the component's.
                self._task_stats[task].record_buckets(*latency_buckets(latencies[mine]))
            if any(self._overrides(task, "ack") for task in spout_tasks):
                self._call_each(acked.tasks.tolist(), acked.msg_ids, "ack")
        if len(acked) == len(settlement):
            return
        rows = zip(settlement.tasks.tolist(), settlement.msg_ids, settlement.how.tolist(), strict=True)
        for task, msg_id, how in rows:
            if how == ACKED:
                continue
            spout = self._by_task[task]
            for stats in (self.stats.of(spout.component), self._task_stats[task]):
                stats.failed += 1
                stats.timed_out += how == TIMED_OUT
            self._call(spout, "fail", msg_id)

    def _call_each(self, tasks: list[int], msg_ids: list[Any], method: str) -> None:
        """``method(msg_id)`` on the spout task of each; what one raises is counted and logged, and the rest go on.
        A spout that keeps ``Spout``'s own ``ack`` or ``fail``, which does nothing, is not called."""
        bound: dict[int, Any] = {}
        for task, msg_id in zip(tasks, msg_ids, strict=True):
            call = bound.get(task)
            if call is None:
                own = self._overrides(task, method)
                call = bound[task] = getattr(self._by_task[task].spout, method) if own else False
            if call is False:
                continue
            try:
                call(msg_id)
            except Exception as exc:
                spout = self._by_task[task]
                self.error(spout.component, spout.task, f"raised in {method}({msg_id!r})", exc)

    def _overrides(self, task: int, method: str) -> bool:
        """Whether spout task ``task``'s class has its own ``method`` (``ack``, ``fail``), not ``Spout``'s no-op."""
        return getattr(type(self._by_task[task].spout), method, None) is not getattr(Spout, method)

    def _call(self, spout: SpoutTask, method: str, *args: Any) -> None:
        """``method(*args)`` on the spout; what it raises is counted and logged, and the topology goes on."""
        try:
            getattr(spout.spout, method)(*args)
        except Exception as exc:
            self.error(spout.component, spout.task, f"raised in {method}({', '.join(map(repr, args))})", exc)

    def error(self, component: str, task: int, what: str, error: BaseException, uncaught: bool = True) -> None:
        """A spout task raised or reported ``error``: counted, logged, and kept among the run's last errors;
        the topology goes on, unless an ``uncaught`` one is the task's same error ``squall.max.repeated.errors``
        times in a row with no emit in between (``repeated`` then says why, for the driver)."""
        self.stats.of(component).errors += 1
        self._task_stats[task].errors += 1
        log.error("spout %s task %d %s", component, task, what, exc_info=error)
        text = "".join(traceback.format_exception(error))
        self.stats.record_error(component, task, f"{component} task {task} {what}: {text}")
        streak = self._streaks.get(task)
        if uncaught and streak is not None and streak.raised(error):
            self.repeated.setdefault(task, streak.stop)  # the first, which reached the limit, until reported

    @property
    def wanted_active(self) -> bool:
        """What ``set_active`` asked last, applied or about to be."""
        return self._wanted_active

    def set_active(self, active: bool) -> None:
        """Storm's ``activate``/``deactivate``: start or stop asking the spouts for tuples. Each spout is told
        on the run's own thread, before its next call."""
        self._wanted_active = active

    def close(self) -> None:
        """``close`` on every spout task that was opened, once."""
        if self.closed or not self.opened:
            return
        self.closed = True
        for s in self.tasks:
            try:
                s.spout.close()
            except Exception:
                log.exception("spout %s task %d raised in close()", s.component, s.task)
