"""A worker takes what its peers send in the order the network gives it.

The driver sends every worker its ``Assign`` and then the wave's ``WaveInput`` over the worker's own connection,
but a peer's batches come over another one. A peer that got its ``Assign`` first can execute its part of the wave
and send its batch before this worker's ``Assign`` or ``WaveInput`` has arrived. The batch must wait for them, not
be dropped (the wave would never end) nor run on the wall clock (the wave's simulated time is in its
``WaveInput``).

These tests drive one real ``Worker`` over real sockets, in the order that race produces.
"""

from __future__ import annotations

import queue

import pytest
from servers import driver_end_of_a_worker_channel

from squall import BasicBolt, Fields, TopologyBuilder
from squall.security.handshake import LinkKeys
from squall.security.sealing import BlobSealer
from squall.spark.links import Inbox, PeerLinks
from squall.spark.protocol import (
    DRIVER,
    Assign,
    Batch,
    RunSettings,
    Stop,
    TaskReport,
    WaveInput,
    WorkerChannel,
    read_frames,
)
from squall.spark.shipping import ShippedTopology, pack
from squall.spark.worker import Worker
from squall.testing import FeederSpout
from squall.time import now

KEYS = LinkKeys(b"s" * 32)
SIMULATED_NOW = 1_000.0


class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


class StampWords(BasicBolt):
    """Emits each word with the topology clock's time when it ran."""

    outputs = ("word", "at")

    def execute(self, tup, collector):
        collector.emit([tup["word"], now()])


@pytest.fixture
def worker_and_driver_end():
    builder = TopologyBuilder()
    builder.set_spout("sentences", FeederSpout(Fields("sentence")))
    builder.set_bolt("split", Split(), 1).shuffle_grouping("sentences")
    builder.set_bolt("stamp", StampWords(), 1).shuffle_grouping("split")
    topology = builder.build()
    shipped = ShippedTopology(
        topology.with_objects(dict.fromkeys(topology.components)),
        {},
        {cid: pack(topology.components[cid].obj) for cid in ("split", "stamp")},
    )
    address, finish = driver_end_of_a_worker_channel(KEYS)
    channel = WorkerChannel(address, KEYS)
    connection, stream, session = finish()
    inbox = Inbox()
    worker = Worker(shipped, channel, 0, inbox, PeerLinks(KEYS), BlobSealer(b"k" * 32))
    yield topology, worker, inbox, (stream, session)
    channel.close()
    stream.close()
    connection.close()


def reports_after(worker: Worker, driver_end) -> list[TaskReport]:
    """Serve until ``Stop``, then everything the worker said to the driver."""
    worker.serve()
    worker.channel.close()
    said: queue.SimpleQueue = queue.SimpleQueue()
    stream, session = driver_end
    read_frames(stream, session, said)
    reports = []
    while not said.empty():
        reports.append(said.get())
    return reports


def assign(topology, generation: int) -> Assign:
    split, stamp = topology.task_ids("split")[0], topology.task_ids("stamp")[0]
    settings = RunSettings("generations", 7, acking=False, capture=True)
    return Assign(generation, 0, settings, {split: 1, stamp: 0}, [stamp], 0, {stamp: None})


def peer_batch(topology, generation: int, words: list[str]) -> Batch:
    split, stamp = topology.task_ids("split")[0], topology.task_ids("stamp")[0]
    batch = Batch(generation, 1, split, "split", split, stamp, last=True)
    for word in words:
        batch.add("default", (word,))
    return batch


def wave_one(topology, generation: int) -> WaveInput:
    stamp = topology.task_ids("stamp")[0]
    return WaveInput(generation, 1, SIMULATED_NOW, [Batch(generation, 1, DRIVER, "", DRIVER, stamp, last=True)])


def test_a_peers_batch_that_comes_before_the_assign_is_kept_for_it(worker_and_driver_end):
    topology, worker, inbox, stream = worker_and_driver_end
    inbox.put(peer_batch(topology, 1, ["a", "b", "c"]))
    inbox.put(assign(topology, 1))
    inbox.put(wave_one(topology, 1))
    inbox.put(Stop())

    [report] = reports_after(worker, stream)

    assert (report.generation, report.wave, report.component) == (1, 1, "stamp")
    assert report.status.executed == 3
    assert report.captured == [("a", SIMULATED_NOW), ("b", SIMULATED_NOW), ("c", SIMULATED_NOW)]


def test_a_peers_batch_that_comes_before_the_wave_runs_on_the_waves_simulated_time(worker_and_driver_end):
    topology, worker, inbox, stream = worker_and_driver_end
    inbox.put(assign(topology, 1))
    inbox.put(peer_batch(topology, 1, ["a", "b"]))
    inbox.put(wave_one(topology, 1))
    inbox.put(Stop())

    [report] = reports_after(worker, stream)

    assert report.captured == [("a", SIMULATED_NOW), ("b", SIMULATED_NOW)]


def test_what_is_left_of_an_older_generation_is_dropped(worker_and_driver_end):
    topology, worker, inbox, stream = worker_and_driver_end
    inbox.put(assign(topology, 1))
    inbox.put(peer_batch(topology, 2, ["new"]))  # the next generation's, early
    inbox.put(assign(topology, 2))
    inbox.put(peer_batch(topology, 1, ["old"]))  # the first generation's, late
    inbox.put(wave_one(topology, 2))
    inbox.put(Stop())

    [report] = reports_after(worker, stream)

    assert (report.generation, report.captured) == (2, [("new", SIMULATED_NOW)])
