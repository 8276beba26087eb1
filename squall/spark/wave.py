"""One wave as one Spark job.

Each active bolt is a stage with one partition per task. A task's partition is
the bolt's state (the previous wave's output for that task, co-partitioned so
it is never shuffled) followed by the tuples upstream bolts sent it, which
arrive through a shuffle keyed by task index: the groupings are the
partitioners. Tuples from the driver (spout emits, ticks) reach tasks through a
per-wave broadcast.

Each task ends its partition with its report: its status, what it emitted
(when testing asks for it) and its ack messages, XOR-reduced per root into an
``AckBatch``. The reports of every task come back in the job's one
``collect``: acks cross no shuffle.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark import RDD, SparkContext, StorageLevel

from squall.model.topology import Topology
from squall.spark.acks import AckBatch
from squall.spark.bolt_task import TaskPlan, run_partition
from squall.spark.collectors import TaskStatus
from squall.spark.records import Out
from squall.spark.shipping import load_shipped


def _task_index(key: int) -> int:
    return key


def _bolt_stage(run_id: str, topology_bc, inputs_bc, component: str, plan: TaskPlan, index: int, records):
    shipped = load_shipped(run_id, topology_bc)
    blob = inputs_bc.value.get(component, {}).get(index)
    driver_inputs = pickle.loads(blob) if blob is not None else ()
    return run_partition(shipped, component, plan, driver_inputs, index, records)


def _emits_for(bolt: str, records):
    for key, payload in records:
        if payload[0] == Out.EMIT and payload[1] == bolt:
            yield key, payload


def _state_only(records):
    for key, payload in records:
        if payload[0] == Out.STATE:
            yield key, payload


def _reports(records):
    for key, payload in records:
        if payload[0] == Out.STATUS:
            yield key[1], key[2], payload[1], payload[2], payload[3]


@dataclass
class WaveResult:
    acks: AckBatch = field(default_factory=AckBatch.empty)  # every task's, reduced per root
    status: dict[tuple[str, int], TaskStatus] = field(default_factory=dict)
    captured: dict[tuple[str, int], list[tuple]] = field(default_factory=dict)
    outputs: dict[str, RDD] = field(default_factory=dict)  # persisted; hold each task's new state


def initial_state(sc: SparkContext, parallelism: int) -> RDD:
    rows = [(i, (Out.STATE, None)) for i in range(parallelism)]
    return sc.parallelize(rows, parallelism).partitionBy(parallelism, _task_index)


def state_of(outputs: RDD) -> RDD:
    """A bolt's state RDD for the next wave: the state records of this wave's output."""
    return outputs.mapPartitions(_state_only, preservesPartitioning=True)


def checkpointed_state(outputs: RDD) -> RDD:
    """The state records, written to the checkpoint directory so that lineage stays short."""
    kept = state_of(outputs).persist(StorageLevel.MEMORY_AND_DISK)
    kept.checkpoint()
    kept.count()
    return kept


def active_bolts(topology: Topology, fed: set[str]) -> list[str]:
    """Bolts that may see input this wave: those fed by the driver and everything downstream."""
    active = set(fed)
    for cid in topology.topological_order():
        if any(sub.source in active for sub in topology.components[cid].inputs):
            active.add(cid)
    return [cid for cid in topology.topological_order() if cid in active and cid in topology.bolts]


def run_wave(
    sc: SparkContext,
    topology: Topology,
    run_id: str,
    topology_bc: Any,
    inputs_bc: Any,
    fed: set[str],
    plan: TaskPlan,
    state: dict[str, RDD],
) -> WaveResult:
    """Run the bolts reachable from ``fed``; ``inputs_bc`` holds ``{bolt: {task_index: pickled [payload]}}``."""
    outputs: dict[str, RDD] = {}
    for bolt in active_bolts(topology, fed):
        spec = topology.components[bolt]
        upstream = [
            outputs[src].mapPartitions(partial(_emits_for, bolt)) for src in topology.sources_of(bolt) if src in outputs
        ]
        partitions = state[bolt]
        if upstream:
            shuffled = (sc.union(upstream) if len(upstream) > 1 else upstream[0]).partitionBy(
                spec.parallelism, _task_index
            )
            partitions = partitions.union(shuffled)
        stage = partial(_bolt_stage, run_id, topology_bc, inputs_bc, bolt, plan)
        out = partitions.mapPartitionsWithIndex(stage, preservesPartitioning=True)
        outputs[bolt] = out.persist(StorageLevel.MEMORY_AND_DISK)
    if not outputs:
        return WaveResult()

    try:
        rows = sc.union([out.mapPartitions(_reports) for out in outputs.values()]).collect()
    except BaseException:
        for out in outputs.values():
            out.unpersist(blocking=False)
        raise
    result = WaveResult(outputs=outputs)
    batches = []
    for component, task, status, captured, acks in rows:
        if (component, task) in result.status:
            raise RuntimeError(f"wave reported {component} task {task} twice")  # acks apply once per (wave, task)
        result.status[(component, task)] = status
        batches.append(acks)
        if captured:
            result.captured[(component, task)] = captured
    result.acks = AckBatch.combine(batches)
    return result
