"""Bolts of a transactional topology."""

from __future__ import annotations

from typing import Any


class BatchBolt:
    """Processes one batch: a fresh instance per batch and task.

    ``prepare`` gets the batch's id (a ``TransactionAttempt``), ``execute`` each of
    the task's tuples of the batch, and ``finish_batch`` runs once the task has
    every tuple of the batch from every upstream task, on every task, even one
    that received none. Raise ``FailedException`` to fail (and replay) the batch.
    """

    outputs: Any = ()

    def prepare(self, conf: dict, context: Any, collector: Any, batch_id: Any) -> None:
        pass

    def execute(self, tup: Any) -> None:
        pass

    def finish_batch(self) -> None:
        pass


class Committer:
    """Marker: a ``BatchBolt`` that also derives from ``Committer`` runs ``finish_batch``
    only in the commit phase, strictly in txid order."""
