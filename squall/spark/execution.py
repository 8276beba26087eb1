"""Running a batch's rows through a bolt task: the per-tuple loop.

This module, ``squall/model/tuple.py`` and ``collectors.py`` are compiled by Cython when squall is installed
(``setup.py``); they are plain Python too, and run as such where they are not compiled.
"""

from __future__ import annotations

import logging
import time

import cython
import numpy as np

from squall.model.errors import FailedException
from squall.model.tuple import row_tuple
from squall.spark.bolt_task import BoltTask
from squall.spark.collectors import BasicOutputCollector
from squall.spark.protocol import Batch

log = logging.getLogger("squall.worker")


@cython.locals(
    streams=list,
    rows=list,
    basic_collector=BasicOutputCollector,
    roots=list,
    edges=list,
    sealed=cython.bint,
    with_edges=cython.bint,
    root=cython.ulonglong,
    edge=cython.ulonglong,
    i=cython.Py_ssize_t,
    n=cython.Py_ssize_t,
    raised_at=cython.Py_ssize_t,
)
@cython.annotation_typing(True)  # for the two views' declarations below
def execute_batch(task: BoltTask, batch: Batch) -> None:
    """Each row as a ``Tuple`` through the task's bolt, in order; a row that raises fails and the rest go on.

    A basic bolt's rows are acked together once the batch is done (``OutputCollector.ack_batch``). A row that
    raises extends the task's ``error_streak`` when the row before it raised too (or, for the first row, when no
    row has gone through since the last error); a row that goes through ends it. Once the streak reaches
    ``squall.max.repeated.errors``, the wave's status says so and the driver stops the topology.
    """
    started = time.perf_counter()
    component, source, trees = batch.component, batch.source, batch.trees
    collector = task.collector
    collector.status.executed += len(batch.values)
    basic_collector = task.basic_collector
    execute = task.bolt.execute
    fields_of, last_stream, fields = task.fields_of, None, None
    failed: list[int] = []  # rows that raised or failed
    streak = task.error_streak
    raised_at = -1  # the last row that raised
    streams, rows = batch.streams, batch.values
    n = len(rows)
    # A basic bolt's rows are acked from the batch's own columns: its tuples need no edge of their own.
    with_edges = basic_collector is None
    sealed = not isinstance(batch.roots, list)  # a sealed batch's columns are uint64 arrays
    root_view: cython.const[cython.ulonglong][::1]
    edge_view: cython.const[cython.ulonglong][::1]
    if sealed and cython.compiled:  # read in place: a row's root and edge are never Python integers
        root_view = np.ascontiguousarray(batch.roots, np.uint64)
        edge_view = np.ascontiguousarray(batch.edges, np.uint64)
        root_count, edge_count = len(root_view), len(edge_view)
    else:
        roots, edges = batch.roots, batch.edges
        if sealed:  # run as plain Python
            roots, edges, sealed = roots.tolist(), edges.tolist(), False
        root_count, edge_count = len(roots), len(edges)
    if not len(streams) == root_count == edge_count == n:
        raise ValueError(f"a batch from {component!r} has columns of different lengths")
    for i in range(n):
        stream = streams[i]
        if sealed:
            root = root_view[i]
            edge = edge_view[i] if with_edges else 0
        else:
            root, edge = roots[i], edges[i]
        if stream is not last_stream:
            last_stream, fields = stream, fields_of(component, stream)
        tup = row_tuple(rows[i], fields, component, source, stream, root, edge)
        if not root and trees:
            tup.trees = trees.get(i)
        try:
            if basic_collector is not None:
                basic_collector.input = tup
                execute(tup, basic_collector)
            else:
                execute(tup)
        except FailedException:
            collector.fail(tup)
            failed.append(i)
        except Exception as exc:
            log.error("%s task %d failed %r", task.component, task.task, tup, exc_info=True)
            collector.report_error(exc)
            if streak.raised(exc, i == raised_at + 1) and collector.status.repeated is None:
                collector.status.repeated = streak.stop  # the wave's first, which reached the limit
            raised_at = i
            collector.fail(tup)
            failed.append(i)
    if raised_at != n - 1 and streak.count:  # a row went through after the last error
        streak.progressed()
    if basic_collector is not None:
        collector.ack_batch(batch, failed)
    collector.status.busy_seconds += time.perf_counter() - started
