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
import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from word_count import SOURCES, WORDS_PER_SENTENCE, Submitted, make_sentences, squall_throughput

from squall import LocalCluster
from squall.connectors.local_redis import LocalRedisServer
from squall.connectors.trident_state import RedisMapState
from squall.drpc import DRPCClient, DRPCServer
from squall.model.fields import Fields
from squall.spark.context import spark_context
from squall.transactional import PartitionedTransactionalSpout
from squall.transactional.spouts import DEFAULT_TAKE_PER_BATCH
from squall.trident import BaseFunction, StateFactory, TridentTopology
from squall.trident.builtin import Count, MapGet, TupleCollectionGet
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


def trident_word_count(
    sentences: list[str], server: DRPCServer, factory: StateFactory | None = None, requests: int = 0
) -> tuple[float, list[float]]:
    """Seconds from submitting to every sentence committed into the state ``factory`` makes (an in-memory map
    state by default), and, with ``requests``, the milliseconds of as many DRPC round trips of 4 words each,
    through ``server``, against the idle topology's counts. The in-memory counts are checked here (through DRPC);
    a stored state's, by the caller."""
    spout = FileSentences(sentences)
    exact = Counter(w for s in sentences for w in s.split(" "))
    conf = {
        "topology.max.spout.pending": 4,
        "drpc.servers": [server.host],
        "drpc.port": server.port,
        "squall.drpc.token": server.token,
    }
    with DRPCClient(server.host, server.port, token=server.token) as client:
        topology = TridentTopology()
        counts = (
            topology.new_stream("trident-words", spout)
            .parallelism_hint(2)
            .each(["sentence"], Split(), ["word"])
            .group_by(["word"])
            .persistent_aggregate(factory or MemoryMapState.Factory(), Count(), ["count"])
            .parallelism_hint(2)
        )
        if factory is None:  # the in-memory state lists itself; the caller reads a stored one
            topology.new_drpc_stream("all").broadcast().state_query(
                counts, ["args"], TupleCollectionGet(), ["word", "count"]
            ).project(["word", "count"])
        (
            topology.new_drpc_stream("words")
            .each(["args"], Split(), ["word"])
            .group_by(["word"])
            .state_query(counts, ["word"], MapGet(), ["count"])
            .project(["word", "count"])
        )
        started = time.perf_counter()
        with Submitted(conf, topology.build()) as run:
            while sum(tuples for _, tuples, _ in list(run.commits)) < len(sentences):
                Submitted.check()
                time.sleep(0.005)
            seconds = time.perf_counter() - started
            if factory is None and dict(json.loads(client.execute("all", ""))) != exact:
                raise RuntimeError("the Trident word count is not exact")
            latencies, vocabulary = [], sorted(exact)
            rng = random.Random(7)
            for _ in range(requests):
                asked = rng.sample(vocabulary, 4)
                begun = time.perf_counter()
                answer = client.execute("words", " ".join(asked))
                latencies.append((time.perf_counter() - begun) * 1000)
                if dict(json.loads(answer)) != {w: exact[w] for w in asked}:
                    raise RuntimeError(f"DRPC answered {answer} for {asked}")
    return seconds, latencies


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
    parser.add_argument("--requests", type=int, default=1000, help="DRPC round trips timed, in the first round")
    args = parser.parse_args()
    sentences = make_sentences(args.words)
    words = len(sentences) * WORDS_PER_SENTENCE
    sc, _ = spark_context(args.master)
    from pyspark.sql import SparkSession

    # Structured Streaming as a Spark user tunes it on this many cores: a shuffle partition per core (Spark's
    # default of 200 made the same query 7 to 13 times slower here)
    SparkSession.builder.getOrCreate().conf.set("spark.sql.shuffle.partitions", sc.defaultParallelism)
    structured_streaming(sentences[:10_000])  # its first query in a process sets up its Python workers: not timed
    redis_dir = tempfile.mkdtemp(prefix="squall-trident-redis-")
    redis_server = LocalRedisServer(Path(redis_dir))
    acked, memory, opaque_redis, structured, structured_jvm = [], [], [], [], []
    latencies: list[float] = []
    try:
        with LocalCluster() as cluster, DRPCServer(port=0) as server:
            Submitted.cluster = cluster  # every topology of the benchmark, one after another
            for round_ in range(args.rounds):  # interleaved: a slow minute of the host falls on all of them
                acked.append(squall_throughput(sentences, {})[0])
                seconds, asked = trident_word_count(sentences, server, requests=args.requests if round_ == 0 else 0)
                memory.append(seconds)
                latencies += asked
                factory = RedisMapState.opaque(redis_server.url, f"counts-{round_}")
                opaque_redis.append(trident_word_count(sentences, server, factory)[0])
                if RedisMapState.read(redis_server.url, f"counts-{round_}") != {
                    (w,): n for w, n in Counter(w for s in sentences for w in s.split(" ")).items()
                }:
                    raise RuntimeError("the opaque Redis word count is not exact")
                structured.append(structured_streaming(sentences))
                structured_jvm.append(structured_streaming(sentences, python_split=False))
    finally:
        redis_server.stop()
        shutil.rmtree(redis_dir, ignore_errors=True)
    print(f"core_acked_words_per_second={words / min(acked):.0f}")
    print(f"trident_memory_map_words_per_second={words / min(memory):.0f}")
    print(f"trident_opaque_redis_words_per_second={words / min(opaque_redis):.0f}")
    print(f"structured_streaming_python_split_words_per_second={words / min(structured):.0f}")
    print(f"structured_streaming_jvm_split_words_per_second={words / min(structured_jvm):.0f}")
    print(f"trident_memory_map_vs_core_acked_throughput={min(acked) / min(memory):.2f}")
    print(f"trident_opaque_redis_vs_core_acked_throughput={min(acked) / min(opaque_redis):.2f}")
    print(f"trident_memory_map_vs_structured_streaming_throughput={min(structured) / min(memory):.2f}")
    if latencies:
        ordered = sorted(latencies)
        print(f"drpc_requests={len(ordered)}")
        print(f"drpc_round_trip_p50_ms={ordered[len(ordered) // 2]:.2f}")
        print(f"drpc_round_trip_p99_ms={ordered[int(len(ordered) * 0.99) - 1]:.2f}")


if __name__ == "__main__":
    main()
