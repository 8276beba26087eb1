"""The messages of a transactional topology's batches, through the run's hub, workers and links.

* ``BeginBatch``   driver -> every worker: a try of a batch begins; its emitter tasks emit their ``plans``.
* ``CommitBatch``  driver -> the workers hosting commit-phase tasks: the try commits now.
* ``AbortBatches`` driver -> every worker: these tries failed; drop whatever they hold.
* ``BatchReport``  worker -> driver: a phase of a try is done there (``EMITTED``, ``PROCESSED``, ``COMMITTED``).

A try's tuples travel as the runtime's ``Batch``es (``squall/spark/protocol.py``), whose ``wave`` is then the
try's sequence number (``seq``); each producer sends each reader one ``last`` batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from squall.model.attempt import TransactionAttempt
from squall.spark.protocol import Batch, TaskStatus, wire


@wire
@dataclass(frozen=True, slots=True)
class EmitPlan:
    """What one partition emits for a batch. ``replay``: exactly the batch ``meta`` describes. Otherwise the batch
    that follows ``meta`` (None: the partition's first), or, with ``cached``, the one that follows what the
    emitter itself emitted for the txid before (still in flight, so not yet stored)."""

    partition: int
    replay: bool
    meta: Any = None
    cached: bool = False


@wire
@dataclass(frozen=True, slots=True)
class BeginBatch:
    """Driver -> every worker: a try of a batch begins. The emitter tasks here emit their ``plans``; ``batches`` are
    what the emitters emitted when they run in the driver's process (``TestCluster``)."""

    generation: int
    seq: int
    attempt: TransactionAttempt
    plans: dict[int, list[EmitPlan]]  # emitter task -> its partitions
    batches: list[Batch] = field(default_factory=list)
    last_committed: int = 0  # emitters forget what they emitted up to it
    group: str | None = None  # a request group's spout: the try carries one request, emitted in ``batches``


@wire
@dataclass(frozen=True, slots=True)
class CommitBatch:
    """Driver -> the workers hosting commit-phase tasks: the try ``seq`` commits now; its committers finish."""

    generation: int
    seq: int


@wire
@dataclass(frozen=True, slots=True)
class AbortBatches:
    """Driver -> every worker: these tries failed; whatever they still hold or are sent is dropped."""

    generation: int
    seqs: tuple[int, ...]


EMITTED, PROCESSED, COMMITTED = "emitted", "processed", "committed"


@wire
@dataclass(frozen=True, slots=True)
class BatchReport:
    """Worker -> driver: a phase of try ``seq`` is done here. ``EMITTED``: its emitter tasks emitted (``metas``
    per partition). ``PROCESSED``: its processing bolts finished.
    ``COMMITTED``: its commit-phase bolts finished. ``failure`` fails the try."""

    generation: int
    seq: int
    worker: int
    phase: str
    statuses: dict[int, tuple[str, TaskStatus]] = field(default_factory=dict)  # task -> component, counters
    metas: dict[int, Any] = field(default_factory=dict)  # partition -> what it emitted
    captured: dict[str, list[tuple]] = field(default_factory=dict)  # commit-phase bolts' default-stream emits
    failure: str | None = None
