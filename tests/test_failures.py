"""The seed's failure cases, at the level of the whole system."""

import os
import time
from collections import Counter

from components import CrashOnce, Hold, RequeueingFeeder, WordCount, recorded
from drivers import finish_driver, kill_driver, start_driver

from squall import TopologyBuilder
from squall.connectors import QueueSpout, ReliableQueue


def test_a_python_worker_that_dies_mid_wave_loses_nothing(cluster, tmp_path):
    """A bolt kills its Python worker (os._exit); Spark retries the task from the last snapshot, and every wave
    sent since runs again from the spout task's log, the one in flight too. Its trees, some acked before the loss,
    the rest completed by the run again, never fail: each message is acked once, and no word is counted twice."""
    marker = tmp_path / "crashed"
    feeder = RequeueingFeeder(["word"])
    b = TopologyBuilder()
    b.set_spout("s", feeder)
    b.set_bolt("crasher", CrashOnce(str(marker)), 2).shuffle_grouping("s")
    b.set_bolt("count", WordCount(), 2).fields_grouping("crasher", ["word"])
    run = cluster.submit_for_capture("crash", {"squall.checkpoint.dir": str(tmp_path / "checkpoints")}, b.build())
    words = ["a", "b", "a", "c"] * 5
    for w in words:
        feeder.feed([w])
    cluster.wait_idle()
    sent = [feeder.feed([w]) for w in [*words, "crash", *words]]  # a wave of these loses a worker
    cluster.wait_idle()
    assert marker.read_text() == "crashed"

    acks = Counter(m for kind, m in feeder.calls if kind == "ack")
    assert len(acks) == 3 * len(words) + 1 and set(acks.values()) == {1}  # each acked exactly once
    assert set(sent) <= set(acks) and feeder.failed == set()  # the trees in flight were completed by the run again
    counted = {}
    for word, n in run.captured["count"]:
        counted[word] = max(counted.get(word, 0), n)
    expected = Counter([*words, *words, "crash", *words])
    assert counted == dict(expected)  # the restarted tasks' state holds no trace of the lost attempt


class DyingQueueSpout(QueueSpout):
    """A queue's spout whose process dies (``SystemExit``) once, at its first call after emitting ``die_after``
    messages: its acker task, in the same process, dies with it. A dead process closes nothing."""

    def __init__(self, path, marker, die_after):
        super().__init__(path, "q")
        self.marker, self.die_after = marker, die_after

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.emitted, self.acked, self.failed, self.died = [], [], [], False
        self.collector, self._collector = collector, self  # its emits pass through ``emit`` below

    def emit(self, values, msg_id=None):
        self.emitted.append(msg_id)
        return self.collector.emit(values, msg_id=msg_id)

    def next_tuple(self):
        if len(self.emitted) >= self.die_after and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            self.died = True
            raise SystemExit("the spout's process dies")
        super().next_tuple()

    def ack(self, msg_id):
        self.acked.append(msg_id)
        super().ack(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)
        super().fail(msg_id)

    def close(self):
        if not self.died:
            super().close()


def test_an_acker_task_that_dies_with_its_worker_has_its_trees_replayed_by_the_source(cluster, tmp_path):
    """Storm's "acker task dies" case. The acker task tracking the held trees lives in the spout task's process,
    which dies: the spout task opens again, its queue puts back what the dead one left pending, and those
    messages are emitted again and acked. Nothing is lost, and nothing is acked that was not processed."""
    queue = ReliableQueue(tmp_path / "queue.sqlite", "q")
    ids = queue.put_many([v] for v in range(12))
    marker = tmp_path / "died"
    b = TopologyBuilder()
    b.set_spout("s", DyingQueueSpout(str(tmp_path / "queue.sqlite"), str(marker), die_after=12))
    b.set_bolt("hold", Hold()).shuffle_grouping("s").add_configuration("topology.tick.tuple.freq.secs", 3)
    cluster.submit_topology("lost-acker", {"topology.message.timeout.secs": 30}, b.build())
    cluster.wait_idle()
    assert marker.exists()  # the first instance emitted all twelve, none acked (held), and died
    (spout,) = cluster.spout_instances("lost-acker").values()
    assert not spout.died and sorted(spout.emitted) == sorted(ids)  # the queue handed them out again
    assert queue.counts() == {"ready": 0, "pending": 12, "dead": 0}
    cluster.advance_time(3)  # the tick acks every held tuple
    cluster.wait_idle()
    assert sorted(spout.acked) == sorted(ids) and spout.failed == []
    assert queue.counts() == {"ready": 0, "pending": 0, "dead": 0}


def test_a_driver_that_dies_is_restarted_and_the_queue_redelivers(tmp_path):
    """SIGKILL the whole driver process group mid-run; restart it; nothing is lost."""
    queue_path, sink = tmp_path / "queue.sqlite", tmp_path / "sink.sqlite"
    producer = ReliableQueue(queue_path, "q")
    values = [f"m{i}" for i in range(400)]
    producer.put_many([v] for v in values)
    # Each message takes the sink 5 ms: the 400 take a second or more, so the kill comes with messages pending.
    conf = {"test.queue": queue_path, "test.sink": sink, "test.record.pause.secs": 0.005}

    first = start_driver("queue_sink.py", conf)
    deadline = time.monotonic() + 240
    while len(recorded(sink)) < 60:
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "the first driver made no progress"
        time.sleep(0.2)
    kill_driver(first)
    left = producer.counts()
    assert left["pending"] > 0  # the dead driver held messages
    assert left["ready"] + left["pending"] < len(values)

    second = start_driver("queue_sink.py", conf)
    finish_driver(second, timeout=300)
    seen = Counter(recorded(sink))
    assert set(seen) == set(values)  # every message processed at least once
    assert producer.counts() == {"ready": 0, "pending": 0, "dead": 0}
    duplicates = sum(n - 1 for n in seen.values())
    print(f"messages={len(values)} processed_twice={duplicates}")
