"""The word count of ``benchmarks/word_count.py`` as a Bytewax dataflow, written as Bytewax users write it:

    FileSource(sentences) -> flat_map split -> key_on word -> stateful_map running count -> sink

The running count emits ``(word, count)`` for every word, as squall's count bolt does; the sink counts what it is
given and nothing else (squall's sink does nothing). With ``PEER_REDISTRIBUTE=1`` the dataflow moves the sentences
and the counts to a random worker (``redistribute``) before split and before the sink, as squall's shuffle
groupings do; without it split runs where the file is read and the sink where the word was counted.

Run by ``benchmarks/peers/run.py`` in the Bytewax venv that ``benchmarks/peers/setup.sh`` makes, two processes, from
this directory:

    PEER_SENTENCES=FILE PEER_REPORT_DIR=DIR python -m bytewax.run bytewax_word_count:flow \\
        -i0 -a "127.0.0.1:2101;127.0.0.1:2102"     (and -i1 the same)

Each process writes to ``PEER_REPORT_DIR`` when its source partition is built (``read-<pid>``: the first read's
time) and when each sink partition closes (``sink-<pid>-<n>``: words sunk and the time), so that the runner can
time the dataflow from its first read as well as the command from start to exit.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import bytewax.operators as op
from bytewax.connectors.files import FileSource
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition

REPORT_DIR = Path(os.environ.get("PEER_REPORT_DIR", "."))


class TimedFileSource(FileSource):
    """``FileSource``, noting the time its partition is built: the dataflow's first read."""

    def build_part(self, step_id, for_part, resume_state):
        (REPORT_DIR / f"read-{os.getpid()}").write_text(repr(time.time()))
        return super().build_part(step_id, for_part, resume_state)


class CountingPartition(StatelessSinkPartition):
    def __init__(self, name: str) -> None:
        self.name, self.words = name, 0

    def write_batch(self, items) -> None:
        self.words += len(items)

    def close(self) -> None:
        (REPORT_DIR / self.name).write_text(f"{self.words} {time.time()!r}")


class CountingSink(DynamicSink):
    """Takes each ``(word, count)`` and drops it, counting them; a partition on every worker."""

    def build(self, step_id, worker_index, worker_count):
        return CountingPartition(f"sink-{os.getpid()}-{worker_index}")


def running_count(count, _word):
    count = (count or 0) + 1
    return count, count


flow = Dataflow("word_count")
sentences = op.input("sentences", flow, TimedFileSource(os.environ.get("PEER_SENTENCES", "sentences.txt")))
if os.environ.get("PEER_REDISTRIBUTE") == "1":
    sentences = op.redistribute("shuffle_sentences", sentences)
words = op.flat_map("split", sentences, lambda sentence: sentence.split(" "))
keyed = op.key_on("word", words, lambda word: word)
counts = op.stateful_map("count", keyed, running_count)
if os.environ.get("PEER_REDISTRIBUTE") == "1":
    counts = op.redistribute("shuffle_counts", counts)
op.output("sink", counts, CountingSink())
