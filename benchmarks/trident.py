"""Trident's word count against the core acked word count, on ``benchmarks/word_count.py``'s data, in one run.

    spout (2 partitions) -> each(Split) -> group_by(word) -> persistent_aggregate(MemoryMapState, Count)

timed from submit to the last sentence committed, against the acked core word count (split, count, sink on a
shuffle grouping) on the same sentences, and against what a Spark user writes instead: Structured Streaming's word
count over the same sentences in text files, the split in a Python UDF, ``groupBy("word").count()``, a checkpoint
location (its state kept exactly once) and ``trigger(availableNow=True)``, on the same ``local[2]`` context (and
once more with the split in the JVM, for reference). The counts are read back through DRPC
(``TupleCollectionGet``) and checked against the exact ones. Prints one ``name=value`` per line.

    python benchmarks/trident.py [--words 2000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from word_count import SOURCES, WORDS_PER_SENTENCE, make_sentences, squall_throughput

from squall import LocalCluster
from squall.drpc import LocalDRPC
from squall.model.fields import Fields
from squall.spark.context import spark_context
from squall.transactional import PartitionedTransactionalSpout
from squall.transactional.spouts import DEFAULT_TAKE_PER_BATCH
from squall.trident import BaseFunction, TridentTopology
from squall.trident.builtin import Count, TupleCollectionGet
from squall.trident.testing import MemoryMapState


class FileSentences(PartitionedTransactionalSpout):
    """The sentences from a file, read where each emitter task runs (``open``), as the core benchmark's spout reads
    them: partition ``p`` of ``partitions`` holds every ``partitions``-th sentence from the ``p``-th, and a batch
    takes up to ``take`` of each."""

    def __init__(self, sentences: list[str], partitions: int = 2, take: int = DEFAULT_TAKE_PER_BATCH) -> None:
        self.path, self.partitions, self.take = SOURCES.write(sentences), partitions, take
        self.fields = Fields("tx", "sentence")

    def num_partitions(self) -> int:
        return self.partitions

    def open(self, conf, context) -> None:
        lines = Path(self.path).read_text().split("\n")
        self.data = [lines[p :: self.partitions] for p in range(self.partitions)]

    def _emit(self, tx, collector, partition: int, start: int, amount: int) -> None:
        for sentence in self.data[partition][start : start + amount]:
            collector.emit([tx, sentence])

    def emit_partition_batch_new(self, tx, collector, partition: int, last_meta) -> dict:
        start = last_meta["index"] + last_meta["amount"] if last_meta else 0
        amount = max(0, min(self.take, len(self.data[partition]) - start))
        self._emit(tx, collector, partition, start, amount)
        return {"index": start, "amount": amount}

    def emit_partition_batch(self, tx, collector, partition: int, meta) -> None:
        self._emit(tx, collector, partition, meta["index"], meta["amount"])


class Split(BaseFunction):
    def execute(self, tup, collector):
        for word in tup[0].split(" "):
            collector.emit([word])


def trident_word_count(sentences: list[str], conf: dict | None = None) -> float:
    """Seconds from submitting to every sentence committed; the counts are checked."""
    spout = FileSentences(sentences)
    with LocalDRPC() as drpc, LocalCluster() as cluster:
        topology = TridentTopology()
        counts = (
            topology.new_stream("trident-words", spout)
            .parallelism_hint(2)
            .each(["sentence"], Split(), ["word"])
            .group_by(["word"])
            .persistent_aggregate(MemoryMapState.Factory(), Count(), ["count"])
            .parallelism_hint(2)
        )
        topology.new_drpc_stream("all", drpc).broadcast().state_query(
            counts, ["args"], TupleCollectionGet(), ["word", "count"]
        ).project(["word", "count"])
        started = time.perf_counter()
        run = cluster.submit_topology("trident", {"topology.max.spout.pending": 4, **(conf or {})}, topology.build())
        while sum(tuples for _, tuples, _ in list(run.commits)) < len(sentences):
            if cluster.failures:
                raise RuntimeError(f"the benchmark topology failed: {cluster.failures}")
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        counted = dict(json.loads(drpc.execute("all", "")))
    if counted != Counter(w for s in sentences for w in s.split(" ")):
        raise RuntimeError("the Trident word count is not exact")
    return seconds


def structured_streaming(sentences: list[str], python_split: bool = True) -> float:
    """Seconds for Spark Structured Streaming's word count to process every sentence, from start to its last
    trigger; the counts are checked."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, StringType

    spark = SparkSession.builder.getOrCreate()
    work = tempfile.mkdtemp(prefix="squall-structured-")
    try:
        source = os.path.join(work, "in")
        os.makedirs(source)
        for i in range(4):  # a few files, as a directory source is usually fed
            with open(os.path.join(source, f"part-{i}.txt"), "w") as out:
                out.write("\n".join(sentences[i::4]))
        lines = spark.readStream.text(source)
        if python_split:
            split = F.udf(lambda line: line.split(" "), ArrayType(StringType()))
            words = lines.select(F.explode(split("value")).alias("word"))
        else:
            words = lines.select(F.explode(F.split("value", " ")).alias("word"))
        counts = words.groupBy("word").count()
        started = time.perf_counter()
        query = (
            counts.writeStream.outputMode("update")
            .format("memory")
            .queryName("counts")
            .option("checkpointLocation", os.path.join(work, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        seconds = time.perf_counter() - started
        counted = {
            row["word"]: row["count"]
            for row in spark.sql("SELECT word, max(count) AS count FROM counts GROUP BY word").collect()
        }
        spark.catalog.dropTempView("counts")
        if counted != Counter(w for s in sentences for w in s.split(" ")):
            raise RuntimeError("the Structured Streaming word count is not exact")
        return seconds
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    sentences = make_sentences(args.words)
    words = len(sentences) * WORDS_PER_SENTENCE
    spark_context(args.master)
    acked, trident, structured, structured_jvm = [], [], [], []
    for _ in range(args.rounds):  # interleaved: a slow minute of the host falls on all of them
        acked.append(squall_throughput(sentences, {}, shuffled_sink=True)[0])
        trident.append(trident_word_count(sentences))
        structured.append(structured_streaming(sentences))
        structured_jvm.append(structured_streaming(sentences, python_split=False))
    print(f"core_acked_words_per_second={words / min(acked):.0f}")
    print(f"trident_memory_map_words_per_second={words / min(trident):.0f}")
    print(f"structured_streaming_python_split_words_per_second={words / min(structured):.0f}")
    print(f"structured_streaming_jvm_split_words_per_second={words / min(structured_jvm):.0f}")
    print(f"trident_memory_map_vs_core_acked_throughput={min(acked) / min(trident):.2f}")
    print(f"trident_memory_map_vs_structured_streaming_throughput={min(structured) / min(trident):.2f}")


if __name__ == "__main__":
    main()
