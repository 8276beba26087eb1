"""A worker that restarts its tasks lets go of the instances it drops at once, with what they hold.

After a loss, every worker starts its tasks again from the last snapshot, under a new generation: a task whose
live instance is not at that snapshot gets a new instance (``prepare`` runs again and opens its connections
again), and a task hosted elsewhere now is not run here. The old instances refer to themselves (a bolt and its
collector do), so only a full run of Python's cyclic collector would free them and close what they opened: found
by the soak (``benchmarks/soak.py``), where a sink's SQLite connections grew with every fault. These tests run a
real ``Worker`` with the cyclic collector off, so nothing frees an instance unless the worker does.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from servers import driver_end_of_a_worker_channel

from squall import BasicBolt, Fields, TopologyBuilder
from squall.security.handshake import LinkKeys
from squall.security.sealing import BlobSealer
from squall.spark.bolt_task import LIVE
from squall.spark.links import Inbox, PeerLinks
from squall.spark.protocol import Assign, RunSettings, Snapshot, Stop, WorkerChannel
from squall.spark.shipping import ShippedTopology, pack
from squall.spark.worker import Worker
from squall.testing import FeederSpout

RUN = "dropped-tasks"


class Holds(BasicBolt):
    """Holds a file open from ``prepare``, as a sink holds its database connection."""

    outputs = ()
    alive: weakref.WeakSet = weakref.WeakSet()

    def prepare(self, conf, context):
        self.context_task = context.task_id
        self.file = open(__file__)  # noqa: SIM115 - held for the instance's life
        self.me = self  # an instance in a reference cycle, as bolts are
        Holds.alive.add(self)

    def execute(self, tup, collector):
        pass


@pytest.fixture
def worker():
    builder = TopologyBuilder()
    builder.set_spout("words", FeederSpout(Fields("word")))
    builder.set_bolt("hold", Holds(), 2).shuffle_grouping("words")
    topology = builder.build()
    shipped = ShippedTopology(
        topology.with_objects(dict.fromkeys(topology.components)), {}, {"hold": pack(topology.components["hold"].obj)}
    )
    keys = LinkKeys(b"s" * 32)
    address, finish = driver_end_of_a_worker_channel(keys)
    channel = WorkerChannel(address, keys)
    connection, _, _ = finish()
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    Holds.alive.clear()  # only this test's instances: one an earlier test left in a cycle is not among them
    try:
        yield topology, Worker(shipped, channel, 0, Inbox(), PeerLinks(keys), BlobSealer(b"k" * 32))
    finally:
        if collecting:
            gc.enable()
        for key in [key for key in LIVE if key[0] == RUN]:
            del LIVE[key]
        channel.close()
        connection.close()


def assign(topology, generation: int, tasks: list[int], snapshots: dict | None = None) -> Assign:
    settings = RunSettings(RUN, 7, acking=False, capture=False)
    placement = {t: (0 if t in tasks else 1) for t in topology.task_ids("hold")}
    return Assign(generation, 0, settings, placement, tasks, 0, snapshots or dict.fromkeys(tasks))


def serve(worker: Worker, *messages) -> None:
    for message in [*messages, Stop()]:
        worker.inbox.put(message)
    worker.serve()


def test_an_instance_restarted_from_a_snapshot_lets_go_of_the_old_one(worker):
    topology, worker = worker
    first, _ = topology.task_ids("hold")
    serve(worker, assign(topology, 1, [first]))
    old = weakref.ref(worker.tasks[first].task.bolt)
    taken = worker.tasks[first].task.snapshot(5)
    snapshot = Snapshot(6, taken.blob)  # a later state than the live instance's

    serve(worker, assign(topology, 2, [first], {first: snapshot}))

    assert old() is None  # the old instance is gone, and its file closed with it
    (new,) = Holds.alive
    assert not new.file.closed


def test_an_instance_of_a_task_hosted_elsewhere_now_is_not_kept(worker):
    topology, worker = worker
    first, second = topology.task_ids("hold")
    serve(worker, assign(topology, 1, [first, second]))
    instances = {task: weakref.ref(worker.tasks[task].task.bolt) for task in (first, second)}

    serve(worker, assign(topology, 2, [first]))  # the second task went to another worker

    assert instances[second]() is None and (RUN, second) not in LIVE
    assert instances[first]() is not None  # the first task's live instance goes on
