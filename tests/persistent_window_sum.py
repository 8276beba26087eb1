"""A persistent sliding sum in event time, from the embedded queue, that writes down every window it fires.

Messages are ``[id, value, ts]``. The windowed bolt sums the values of the last 2 s of event time every 1 s and
emits ``(end, sum, count)``; the sink appends ``<end> <sum> <count>`` to a file of its own, so a test can check
every window's sum and that none is lost. The window knows each message by its ``id``: a tuple replayed after a
lost worker while its message is still in the window is not added twice. At most 100 of the window's 200
tuples are in memory: the others are in sealed partitions in the checkpoint directory. The queue's path comes from
``test.queue``, the output directory from ``test.out``.
"""

import os
from pathlib import Path

from squall import BasicBolt, Duration, TopologyBuilder, WindowedBolt
from squall.connectors import QueueSpout

CONF = {
    "topology.max.spout.pending": 1000,  # acks wait for checkpoints: this paces the run, so faults land mid-way
    "topology.message.timeout.secs": 120,
    "topology.state.checkpoint.interval.ms": 500,
    "squall.wave.spout.batch": 1000,
}

LENGTH_MS, SLIDE_MS = 2000, 1000


class SlidingSum(WindowedBolt):
    outputs = ("end", "sum", "count")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        values = [t["value"] for t in window.get()]
        self.collector.emit([window.end_timestamp, sum(values), len(values)])


class WriteDown(BasicBolt):
    outputs = ()

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def prepare(self, conf, context):
        path = Path(self.out_dir, f"windows-{context.task_id}-{os.getpid()}.log")
        self.out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the task's life; a line per write

    def execute(self, tup, collector):
        self.out.write(f"{tup['end']} {tup['sum']} {tup['count']}\n")


def build_topology(conf):
    window = SlidingSum().with_window(Duration.millis(LENGTH_MS), Duration.millis(SLIDE_MS)).with_timestamp_field("ts")
    window = window.with_watermark_interval(Duration.millis(200)).with_message_id_field("id").with_persistence()
    window = window.with_max_events_in_memory(100)
    b = TopologyBuilder()
    b.set_spout("numbers", QueueSpout(conf["test.queue"], "numbers", fields=["id", "value", "ts"]))
    b.set_bolt("sum", window).global_grouping("numbers")
    b.set_bolt("sink", WriteDown(str(conf["test.out"]))).shuffle_grouping("sum")
    return b.build()
