"""One wave as one Spark job.

Each active bolt is a stage with one partition per task. A task's partition is
the bolt's state (the previous wave's output for that task, co-partitioned so
it is never shuffled) followed by the tuples upstream bolts sent it, which
arrive through a shuffle keyed by task index: the groupings are the
partitioners. Tuples from the driver (spout emits, ticks) reach tasks through a
per-wave broadcast.

Every task's ack messages are XOR-reduced by root into
``topology.acker.executors`` partitions (root mod N); each task's status rides
the same shuffle. The reduced partitions come back to the driver as numpy
arrays in a single ``collect``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from pyspark import RDD, SparkContext, StorageLevel

from squall.model.topology import Topology
from squall.spark.bolt_task import TaskPlan, run_partition
from squall.spark.collectors import TaskStatus
from squall.spark.records import Out
from squall.spark.shipping import load_shipped


def _task_index(key: int) -> int:
    return key


def _acker_partition(key) -> int:
    """Acks by root (Spark takes this mod the number of ackers); task statuses to partition 0."""
    return key if isinstance(key, int) else 0


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


def _acks_and_status(records):
    for key, payload in records:
        if payload[0] == Out.ACK:
            yield key, payload[1:]
        elif payload[0] == Out.STATUS:
            yield key, payload


def _xor_combine(a: tuple, b: tuple) -> tuple:
    return (a[0] ^ b[0], a[1] or b[1], a[2] or b[2])


def _to_arrays(index: int, rows):
    acks = []
    for key, value in rows:
        if isinstance(key, int):
            acks.append((key, value))
        else:
            yield ("status", key[1], key[2], value[1], value[2])
    yield (
        "acks",
        index,
        np.array([r for r, _ in acks], dtype=np.uint64),
        np.array([v[0] for _, v in acks], dtype=np.uint64),
        np.array([v[1] for _, v in acks], dtype=bool),
        np.array([v[2] for _, v in acks], dtype=bool),
    )


@dataclass
class WaveResult:
    acks: list[tuple] = field(default_factory=list)  # (partition, roots, xors, failed, reset)
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
    num_ackers: int,
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

    reports = sc.union([out.mapPartitions(_acks_and_status) for out in outputs.values()])
    try:
        rows = (
            reports.reduceByKey(_xor_combine, max(1, num_ackers), _acker_partition)
            .mapPartitionsWithIndex(_to_arrays)
            .collect()
        )
    except BaseException:
        for out in outputs.values():
            out.unpersist(blocking=False)
        raise
    result = WaveResult(outputs=outputs)
    for row in rows:
        if row[0] == "acks":
            if num_ackers:
                result.acks.append(row[1:])
        else:
            _, component, task, status, captured = row
            result.status[(component, task)] = status
            if captured:
                result.captured[(component, task)] = captured
    return result
