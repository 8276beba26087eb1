"""Running a batch's rows through a bolt task: the per-tuple loop.

This module, ``squall/model/tuple.py`` and ``collectors.py`` are compiled by Cython when squall is installed
(``setup.py``); they are plain Python too, and run as such where they are not compiled.
"""

from __future__ import annotations

import logging
import time

from squall.model.errors import FailedException
from squall.model.tuple import Tuple
from squall.spark.bolt_task import BoltTask
from squall.spark.protocol import Batch

log = logging.getLogger("squall.worker")


def execute_batch(task: BoltTask, batch: Batch) -> None:
    """Each row as a ``Tuple`` through the task's bolt, in order; a row that raises fails and the rest go on.

    A basic bolt's rows are acked together once the batch is done (``OutputCollector.ack_batch``).
    """
    started = time.perf_counter()
    component, source, trees = batch.component, batch.source, batch.trees
    collector = task.collector
    collector.status.executed += len(batch.values)
    basic_collector = task.basic_collector
    execute = task.bolt.execute
    fields_of, last_stream, fields = task.fields_of, None, None
    failed: list[int] = []  # rows that raised or failed
    roots, edges = batch.roots, batch.edges
    if not isinstance(roots, list):  # a sealed batch's uint64 arrays
        roots, edges = roots.tolist(), edges.tolist()
    for i, (stream, values, root, edge) in enumerate(zip(batch.streams, batch.values, roots, edges, strict=True)):
        if stream is not last_stream:
            last_stream, fields = stream, fields_of(component, stream)
        tup = Tuple(values, fields, component, source, stream, None, 0, root, edge)
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
            collector.fail(tup)
            failed.append(i)
    if basic_collector is not None:
        collector.ack_batch(batch, failed)
    collector.status.busy_seconds += time.perf_counter() - started
