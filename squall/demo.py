"""A walk through squall's model and reliability core, with no cluster.

Builds the seed's word-count topology, routes one sentence through its
groupings, and follows the sentence's tuple tree through the XOR acker until
the spout tuple completes.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from squall.model import BasicBolt, Bolt, Fields, Spout, TopologyBuilder, Tuple
from squall.reliability import (
    ACKED,
    AckBatch,
    Acker,
    Acks,
    IdGenerator,
    Init,
    ack_messages,
    anchor,
    enter_messages,
    spout_edges,
)


class SentenceSpout(Spout):
    outputs = ("sentence",)

    def next_tuple(self) -> None:
        pass


class SplitSentence(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector) -> None:
        for word in tup["sentence"].split(" "):
            collector.emit([word])


class WordCount(Bolt):
    outputs = ("word", "count")

    def execute(self, tup) -> None:
        pass


def word_count_topology():
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout())
    builder.set_bolt("split", SplitSentence(), 10).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 20).fields_grouping("split", Fields("word"))
    return builder.build()


def run(console: Console | None = None, sentence: str = "the cow jumped over the moon") -> bool:
    console = console or Console()
    topo = word_count_topology()
    console.rule("[bold]The topology")
    console.print(topo.describe())

    ids = IdGenerator()
    spout_task = topo.task_ids("sentences")[0]
    split_route = (
        topo.components["split"]
        .inputs[0]
        .grouping.router(spout_task, topo.task_ids("split"), topo.stream_fields("sentences", "default"))
    )
    (split_task,) = split_route([sentence])
    root = ids.next_id()
    init_value, (edge,) = spout_edges(root, 1, ids.next_id)
    spout_tuple = Tuple([sentence], Fields("sentence"), "sentences", spout_task, anchors_to_ids=edge)

    acker = Acker()
    console.rule("[bold]One sentence through the acker")
    console.print(f"spout task {spout_task} emits {sentence!r} as root {root:#018x} to split task {split_task}")
    acker.handle(Init(np.array([root], np.uint64), np.array([init_value], np.uint64), np.array([spout_task])))

    count_route = (
        topo.components["count"]
        .inputs[0]
        .grouping.router(split_task, topo.task_ids("count"), topo.stream_fields("split", "default"))
    )
    table = Table("step", "message", "ack val after", "settled")
    words = []  # (word tuple, the count task it goes to)
    for word in sentence.split(" "):
        edges = anchor([spout_tuple], ids.next_id)
        tup = Tuple([word], Fields("word"), "split", split_task, anchors_to_ids=edges)
        words.append((tup, count_route([word])[0]))

    def send(step: str, message: tuple[int, int]) -> None:
        r, value = message
        settlement = acker.handle(Acks(AckBatch.reduce(np.array([r], np.uint64), np.array([value], np.uint64))))
        entry = acker.entry(root)
        settled = ", ".join(f"task {t} acks root {x:#x}" for t, x in settlement.pairs(ACKED))
        table.add_row(step, f"xor({value:#018x})", f"{entry.value:#018x}" if entry else "0 (done)", settled)

    for tup, _ in words:  # in split's wave report, with its ack of the sentence
        (message,) = enter_messages(tup.anchors_to_ids)
        send(f"split task {split_task} sends {tup[0]!r} into the tree", message)
    (message,) = ack_messages(spout_tuple)
    send(f"split task {split_task} acks the sentence", message)
    for tup, count_task in words:
        (message,) = ack_messages(tup)
        send(f"count task {count_task} acks {tup[0]!r}", message)
    console.print(table)
    complete = root not in acker and len(acker) == 0
    console.print(
        "[green]tree complete: the spout's ack(msg_id) is due[/green]" if complete else "[red]tree still pending[/red]"
    )
    return complete
