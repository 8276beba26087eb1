"""KafkaSpout with storm-kafka-client's semantics, against a real Apache Kafka broker (KRaft)."""

import json
import re
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from squall import BasicBolt, Bolt, LocalCluster, TopologyBuilder
from squall.connectors.common import BrokerUnavailable
from squall.connectors.kafka import (
    FirstPollOffsetStrategy,
    KafkaSpout,
    OffsetManager,
    ProcessingGuarantee,
    RetryExponentialBackoff,
    Routed,
    add_partitions,
    committed_offsets,
    create_topic,
    end_offsets,
    produce,
)
from squall.model import TopologyBuilder as ModelBuilder
from squall.model.topology import TopologyContext
from squall.testing import TestCluster
from squall.time import simulated_time

SENTENCES = ["the cow jumped over the moon", "an apple a day", "four score and seven years ago", "snow white"]


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


class Recorder:
    """A spout's collector outside a topology: what it emitted, set aside and reported."""

    def __init__(self):
        self.emitted, self.malformed, self.errors, self.streams = [], [], [], []

    def emit(self, values, stream="default", msg_id=None):
        self.emitted.append((tuple(values), msg_id))
        self.streams.append((stream, msg_id))
        return []

    def report_malformed(self, what):
        self.malformed.append(what)

    def report_error(self, error):
        self.errors.append(str(error))


class Sink(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def open_task(spout, index=0, tasks=1, conf=None):
    """Open ``spout`` as task ``index`` of ``tasks``, outside a run; returns its recording collector."""
    b = ModelBuilder()
    b.set_spout("kafka", spout, tasks)
    b.set_bolt("sink", Sink()).shuffle_grouping("kafka")
    topology = b.build()
    recorder = Recorder()
    spout.open(conf or {}, TopologyContext(topology, "kafka", topology.task_ids("kafka")[index]), recorder)
    return recorder


def drain(spout, recorder, calls=200):
    before = len(recorder.emitted)
    for _ in range(calls):
        spout.next_tuple()
    return recorder.emitted[before:]


# -- the pure parts ---------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), unique=True, max_size=40), st.sampled_from([0, 3]))
def test_a_commit_covers_exactly_the_contiguous_acked_prefix(acked, gap):
    manager = OffsetManager(committed=0)
    emitted = [o for o in range(41) if o < 10 or o >= 10 + gap]  # offsets 10.. 10+gap are not in the log
    for offset in emitted:
        manager.emitted(offset)
    for offset in acked:
        if offset in emitted:
            manager.acked(offset)
    prefix = 0
    for offset in emitted:
        if offset not in acked:
            break
        prefix = offset + 1
    assert manager.next_commit() == (prefix or None)
    assert manager.committed == prefix
    assert manager.uncommitted == len(emitted) - sum(1 for o in emitted if o < prefix)


def test_retry_delays_follow_storms_exponential_backoff():
    backoff = RetryExponentialBackoff(initial_delay=0.5, delay_period=0.1, max_retries=5, max_delay=1.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 0.2, 0.4, 0.8, 1.0]
    with pytest.raises(ValueError, match="max_retries"):
        RetryExponentialBackoff(max_retries=-1)


# -- against the broker ---------------------------------------------------------------------------------------
def test_partitions_go_round_robin_over_the_tasks_and_new_partitions_are_picked_up(kafka_server):
    topic = unique("rr")
    create_topic(kafka_server.servers, topic, 3)
    tasks = [KafkaSpout(topic, kafka_server.servers, unique("g"), partition_refresh_period_ms=1) for _ in range(2)]
    for i, spout in enumerate(tasks):
        open_task(spout, i, 2)
    assert [sorted(s._offsets) for s in tasks] == [[(topic, 0), (topic, 2)], [(topic, 1)]]
    add_partitions(kafka_server.servers, topic, 5)
    for spout in tasks:
        spout._refresh_assignment()
    assert [sorted(s._offsets) for s in tasks] == [[(topic, 0), (topic, 2), (topic, 4)], [(topic, 1), (topic, 3)]]
    for spout in tasks:
        spout.close()


def test_a_pattern_subscribes_every_matching_topic(kafka_server):
    prefix = unique("pat")
    for suffix in ("a", "b"):
        create_topic(kafka_server.servers, f"{prefix}.{suffix}", 1)
        produce(kafka_server.servers, f"{prefix}.{suffix}", [suffix])
    create_topic(kafka_server.servers, f"other-{prefix}", 1)
    spout = KafkaSpout(re.compile(re.escape(prefix) + r"\..*"), kafka_server.servers, unique("g"), fields=["v"])
    recorder = open_task(spout)
    assert sorted(v for (v,), _ in drain(spout, recorder, 50)) == ["a", "b"]
    spout.close()


def test_commits_stop_at_the_first_unacked_offset_and_a_restart_resumes_there(kafka_server):
    topic, group = unique("commit"), unique("g")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, list(range(10)))
    spout = KafkaSpout(topic, kafka_server.servers, group, fields=["n"])
    recorder = open_task(spout)
    got = drain(spout, recorder, 50)
    assert [v for (v,), _ in got] == list(range(10))
    for (n,), msg_id in got:
        if n not in (4, 7):
            spout.ack(msg_id)
    spout.fail(got[4][1])  # a failed offset holds the commit back as a pending one does
    spout._commit(final=True)
    assert committed_offsets(kafka_server.servers, group, topic) == {0: 4}
    spout.close()

    again = KafkaSpout(topic, kafka_server.servers, group, fields=["n"])
    seen = open_task(again)
    assert [v for (v,), _ in drain(again, seen, 50)] == [4, 5, 6, 7, 8, 9]  # nothing unacked is skipped
    again.close()


def test_a_failed_record_is_emitted_again_no_sooner_than_its_backoff(kafka_server):
    topic = unique("retry")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, ["x"])
    backoff = RetryExponentialBackoff(initial_delay=2.0, delay_period=1.5, max_retries=2, max_delay=60.0)
    spout = KafkaSpout(topic, kafka_server.servers, unique("g"), fields=["v"], retry=backoff, poll_timeout_ms=50)
    with simulated_time(100.0):
        recorder = open_task(spout)
        [(_, msg_id)] = drain(spout, recorder, 5)
        spout.fail(msg_id)
    emitted_at = {}
    for t in (101.0, 101.9, 102.0, 103.0, 104.9, 105.0, 106.0):
        with simulated_time(t):
            if drain(spout, recorder, 3):
                emitted_at[t] = msg_id
                spout.fail(msg_id)
    assert sorted(emitted_at) == [102.0, 105.0]  # 2.0 s after the first failure, then 1.5 * 2 = 3.0 s
    with simulated_time(200.0):
        assert drain(spout, recorder, 3) == []  # a third failure is past max_retries: given up, and acked
    assert spout.given_up == 1 and "given up" in recorder.errors[0]
    spout._commit(final=True)
    assert committed_offsets(kafka_server.servers, spout.group_id, topic) == {0: 1}
    spout.close()


def test_a_malformed_record_is_counted_acked_and_copied_to_the_dead_letter_topic(kafka_server):
    topic, dead, group = unique("bad"), unique("dead"), unique("g")
    create_topic(kafka_server.servers, topic, 1)
    create_topic(kafka_server.servers, dead, 1)
    producer = Producer({"bootstrap.servers": kafka_server.servers})
    for raw in (b'["ok"]', b"{not json", b'["a", "b"]', b'["fine"]'):
        producer.produce(topic, raw)
    producer.flush(30)
    spout = KafkaSpout(topic, kafka_server.servers, group, fields=["v"], dead_letter_topic=dead)
    recorder = open_task(spout)
    got = drain(spout, recorder, 20)
    assert [v for v, _ in got] == [("ok",), ("fine",)]
    assert len(recorder.malformed) == 2 and "offset 1" in recorder.malformed[0]
    for _, msg_id in got:
        spout.ack(msg_id)
    spout.close()
    assert committed_offsets(kafka_server.servers, group, topic) == {0: 4}  # the poison never blocks the partition
    from squall.connectors.kafka import read_all

    assert [m.value() for m in read_all(kafka_server.servers, dead, idle=1.0)] == [b"{not json", b'["a", "b"]']


def test_the_first_poll_strategies(kafka_server):
    topic, group = unique("first"), unique("g")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, [0, 1, 2, 3])
    first = KafkaSpout(topic, kafka_server.servers, group, fields=["n"])
    recorder = open_task(first, conf={"squall.run.id": "run-1"})
    got = drain(first, recorder, 10)
    for _, msg_id in got[:2]:
        first.ack(msg_id)
    first.close()  # commits offset 2

    def starts(strategy, run):
        spout = KafkaSpout(topic, kafka_server.servers, group, fields=["n"], first_poll_offset_strategy=strategy)
        seen = open_task(spout, conf={"squall.run.id": run})
        values = [n for (n,), _ in drain(spout, seen, 10)]
        spout.close()
        return values

    assert starts(FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST, "run-2") == [2, 3]
    assert starts(FirstPollOffsetStrategy.UNCOMMITTED_LATEST, "run-2") == [2, 3]
    assert starts(FirstPollOffsetStrategy.EARLIEST, "run-2") == [0, 1, 2, 3]  # a new submission: from the start
    assert starts(FirstPollOffsetStrategy.EARLIEST, "run-1") == [2, 3]  # the run that committed: resumes
    assert starts(FirstPollOffsetStrategy.LATEST, "run-2") == []
    fresh = KafkaSpout(
        topic, kafka_server.servers, unique("g"), fields=["n"], first_poll_offset_strategy="UNCOMMITTED_LATEST"
    )
    recorder = open_task(fresh)
    assert drain(fresh, recorder, 5) == []
    fresh.close()


def test_at_most_once_commits_before_emitting_and_does_not_track(kafka_server):
    topic, group = unique("amo"), unique("g")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, [0, 1, 2])
    spout = KafkaSpout(
        topic, kafka_server.servers, group, fields=["n"], processing_guarantee=ProcessingGuarantee.AT_MOST_ONCE
    )
    recorder = open_task(spout)
    spout.next_tuple()
    assert committed_offsets(kafka_server.servers, group, topic) == {0: 3}  # the whole poll, before any ack
    assert recorder.emitted == [((0,), None)]
    spout.close()


def test_no_guarantee_emits_unanchored_and_commits_the_position(kafka_server):
    topic, group = unique("nog"), unique("g")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, [0, 1, 2, 3, 4])
    spout = KafkaSpout(topic, kafka_server.servers, group, fields=["n"], processing_guarantee="NO_GUARANTEE")
    recorder = open_task(spout)
    assert drain(spout, recorder, 10) == [((n,), None) for n in range(5)]
    spout.close()  # nothing was acked: the position is committed all the same
    assert committed_offsets(kafka_server.servers, group, topic) == {0: 5}


def test_max_uncommitted_offsets_stops_polling_a_partition_until_it_commits(kafka_server):
    topic, group = unique("max"), unique("g")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, list(range(10)))
    spout = KafkaSpout(
        topic, kafka_server.servers, group, fields=["n"], max_uncommitted_offsets=3, poll_records=2,
        offset_commit_period_ms=1,
    )  # fmt: skip
    recorder = open_task(spout)
    got = drain(spout, recorder, 30)
    assert [n for (n,), _ in got] == [0, 1, 2, 3]  # two polls of 2; a third would pass 3 uncommitted
    for _, msg_id in got:
        spout.ack(msg_id)
    time.sleep(0.01)
    got += drain(spout, recorder, 30)  # committed: the partition is polled again
    assert [n for (n,), _ in got][:8] == list(range(8))
    spout.close()


def test_a_translator_function_routes_streams_and_null_tuples_are_acked_or_emitted(kafka_server):
    topic = unique("route")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, ["keep", "skip", "other"])

    def translate(record):
        value = json.loads(record.value())
        if value == "skip":
            return None
        return Routed(("side", [value])) if value == "other" else [value, record.offset()]

    streams = {"default": ["v", "offset"], "side": ["v"]}
    for emit_null_tuples, expected in (
        (False, [("keep", 0), ("other",)]),
        (True, [("keep", 0), (None, None), ("other",)]),
    ):
        group = unique("g")
        spout = KafkaSpout(topic, kafka_server.servers, group, translator=translate, streams=streams,
                           emit_null_tuples=emit_null_tuples)  # fmt: skip
        assert spout.outputs == {"default": ("v", "offset"), "side": ("v",)}
        recorder = open_task(spout)
        got = drain(spout, recorder, 10)
        assert [values for values, _ in got] == expected
        assert [s for s, _ in recorder.streams] == (
            ["default", "default", "side"] if emit_null_tuples else ["default", "side"]
        )
        for _, msg_id in got:
            spout.ack(msg_id)
        spout.close()
        assert committed_offsets(kafka_server.servers, group, topic) == {0: 3}  # the skipped record counts as acked


def test_a_broker_that_cannot_be_reached_is_named():
    from servers import free_port

    servers = f"127.0.0.1:{free_port()}"
    spout = KafkaSpout("t", servers, "g", consumer_config={"socket.connection.setup.timeout.ms": 1000})
    with pytest.raises(BrokerUnavailable, match=f"spout kafka task 1: cannot reach Kafka at {servers}"):
        open_task(spout)


# -- in a topology -------------------------------------------------------------------------------------------------
class Split(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


class FailEveryTenthOnce(Bolt):
    """Fails each 10th sentence id on its first delivery."""

    outputs = ("sentence",)

    def prepare(self, conf, context, collector):
        self.collector, self.failed = collector, set()

    def execute(self, tup):
        n = tup[0]
        if n % 10 == 0 and n not in self.failed:
            self.failed.add(n)
            self.collector.fail(tup)
            return
        self.collector.emit([tup[1]], anchors=[tup])
        self.collector.ack(tup)


class Count(BasicBolt):
    outputs = ()

    def prepare(self, conf, context):
        self.counts = Counter()

    def execute(self, tup, collector):
        self.counts[tup[0]] += 1


def test_word_count_through_kafka_commits_every_offset_with_failures_replayed(kafka_server):
    topic, group = unique("words"), unique("g")
    create_topic(kafka_server.servers, topic, 4)
    produce(kafka_server.servers, topic, [[i, SENTENCES[i % 4]] for i in range(400)], partitions=4)
    retry = RetryExponentialBackoff(initial_delay=0.0, delay_period=0.001, max_delay=0.01)
    spout = KafkaSpout(topic, kafka_server.servers, group, fields=["n", "sentence"], retry=retry, poll_timeout_ms=20)
    b = TopologyBuilder()
    b.set_spout("kafka", spout, 2)
    b.set_bolt("flaky", FailEveryTenthOnce(), 2).fields_grouping("kafka", ["n"])
    b.set_bolt("split", Split(), 2).shuffle_grouping("flaky")
    with TestCluster() as cluster:
        run = cluster.submit_for_capture("kafka-words", {"topology.max.spout.pending": 100}, b.build())
        stats = run.stats.of("kafka")
        while stats.acked < 400:
            cluster.advance_time(0.05)  # failed records wait out their backoff on the topology's clock
        assert (stats.acked, stats.failed) == (400, 40)
        cluster.kill_topology("kafka-words")  # deactivate and close: the last commits
    expected = Counter(w for i in range(400) for w in SENTENCES[i % 4].split())
    assert Counter(w for (w,) in run.captured["split"]) == expected
    assert committed_offsets(kafka_server.servers, group, topic) == end_offsets(kafka_server.servers, topic)
    emitted = Counter(n for n, _ in run.captured["kafka"])
    assert emitted == Counter({n: 2 if n % 10 == 0 else 1 for n in range(400)})  # each failed record once more
    assert json.loads(json.dumps(sorted(emitted))) == list(range(400))


def test_a_translated_row_the_stream_does_not_take_is_set_aside_and_the_rest_of_the_poll_goes_on(kafka_server):
    topic, group = unique("badrow"), unique("g")
    create_topic(kafka_server.servers, topic, 1)
    produce(kafka_server.servers, topic, [1, 2, 3, 4, 5])

    def translate(record):
        value = json.loads(record.value())
        return [value, "extra"] if value == 3 else [value]  # 3 has a value too many for the stream

    spout = KafkaSpout(topic, kafka_server.servers, group, translator=translate, fields=["n"], poll_timeout_ms=50)
    b = TopologyBuilder()
    b.set_spout("kafka", spout)
    b.set_bolt("sink", Sink()).shuffle_grouping("kafka")
    with TestCluster() as cluster:
        run = cluster.submit_for_capture("bad-row", {}, b.build())
        stats = run.stats.of("kafka")
        deadline = time.monotonic() + 30
        while stats.acked + stats.malformed < 5:
            assert time.monotonic() < deadline, (stats.acked, stats.malformed)
            run.step()
        cluster.kill_topology("bad-row")  # the last commit
    assert sorted(run.captured["kafka"]) == [(1,), (2,), (4,), (5,)]
    assert (stats.acked, stats.malformed) == (4, 1)
    assert committed_offsets(kafka_server.servers, group, topic) == {0: 5}  # the bad record does not hold it back


def test_a_spout_task_whose_partitions_are_all_read_does_not_hold_up_the_other_waves_on_end(kafka_server):
    """Two spout tasks, each with a partition of its own; every record is in one of them. The other task's polls
    come back empty, and in a run a poll does not wait ``poll_timeout_ms`` (200) for records: the waves, which
    call every spout task, do not each take that long and shrink to a record or two, so 20,000 records are read
    in a few dozen waves, not thousands."""
    topic, group = unique("oneidle"), unique("g")
    create_topic(kafka_server.servers, topic, 2)
    records = 20_000
    produce(kafka_server.servers, topic, [[n, "x"] for n in range(records)], keys=[1] * records)
    ends = end_offsets(kafka_server.servers, topic)
    assert sorted(ends.values()) == [0, records]  # one partition has them all
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(topic, kafka_server.servers, group, fields=["n", "word"]), 2)
    b.set_bolt("count", Count(), 2).shuffle_grouping("kafka")
    with LocalCluster() as cluster:
        run = cluster.submit_topology("one-idle", {}, b.build())
        stats, deadline = run.stats.of("kafka"), time.monotonic() + 120
        while stats.acked < records and time.monotonic() < deadline:
            time.sleep(0.05)
        acked, waves = stats.acked, run.stats.waves
        print(f"\nrecords={records} acked={acked} waves={waves}")
        assert acked == records and stats.failed == 0
        assert waves < 500
        cluster.kill_topology("one-idle")
    full = max(ends, key=ends.get)
    assert committed_offsets(kafka_server.servers, group, topic)[full] == records
