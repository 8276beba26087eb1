"""Bolts of a transactional topology."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: the runtime's classes are not imported here
    from squall.model.topology import TopologyContext
    from squall.model.tuple import Tuple
    from squall.spark.collectors import OutputCollector
    from squall.transactional.coordinator import TransactionAttempt


class BatchBolt:
    """Processes one batch of a transactional topology: Storm's ``IBatchBolt``, a fresh instance per batch and task.

    For each try of a batch (a ``TransactionAttempt``), every task of the bolt gets a new instance, unpickled on
    its worker from the declared one, and all of its calls come on a thread of that try's own: ``prepare``, then
    ``execute`` for each of the task's tuples of the batch, then ``finish_batch``. Up to
    ``topology.max.spout.pending`` batches are processed at once, each on its own threads, so a batch bolt that
    waits on something external holds up no other batch; what it shares beyond its own instance (a class
    attribute, a module global) must be thread-safe. The instance is dropped when the try ends.

    Its collector is an ``OutputCollector``. There are no tuple trees: the batch is the unit of replay, so
    anchors and acks change nothing. A ``FailedException`` (or any other error) raised in ``execute`` or
    ``finish_batch``, or a tuple failed in ``execute``, fails the try: the coordinator fails it and every later
    batch in flight, and emits them again with new attempt ids (the same tuples for a transactional spout,
    perhaps others for an opaque one). What ``prepare`` raises stops the topology.
    """

    outputs: Any = ()

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector, batch_id: TransactionAttempt
    ) -> None:
        """Called once per instance, first: ``batch_id`` is the try's ``TransactionAttempt``."""

    def execute(self, tup: Tuple) -> None:
        """Called for each of the task's tuples of the batch, as it arrives, in each upstream task's emission
        order."""

    def finish_batch(self) -> None:
        """Called once, on every task of the bolt (even one that received no tuple), once the task has every
        tuple of the batch from every upstream task: emit the batch's results here. A committer's runs only in
        the commit phase (``Committer``)."""


class Committer:
    """Marker: a ``BatchBolt`` that also derives from ``Committer`` runs ``finish_batch`` only in the commit phase.

    That is once every processing bolt has finished the batch and every earlier txid has committed: strictly in
    txid order, one batch at a time, so a committer may write ``(value, txid)`` beside its state and skip a txid
    it finds already written. Its ``execute`` still runs in the processing phase, as tuples arrive, and the bolts
    downstream of a committer finish in the commit phase too.
    """
