"""The seed's failure cases, at the level of the whole system."""

import time
from collections import Counter

from components import CrashOnce, Hold, ReplayingSpout, RequeueingFeeder, WordCount, recorded
from drivers import finish_driver, kill_driver, start_driver

from squall import TopologyBuilder
from squall.connectors import ReliableQueue


def test_a_python_worker_that_dies_mid_wave_loses_nothing(cluster, tmp_path):
    """A bolt kills its Python worker (os._exit); Spark retries the task from the last snapshot, the waves
    completed since run again from the spout task's log, and the trees in flight fail back to the spout, whose
    source redelivers them: each message is acked once, and no word is counted twice."""
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
    assert feeder.failed <= set(sent) and feeder.failed  # the trees in flight failed back, and were redelivered
    counted = {}
    for word, n in run.captured["count"]:
        counted[word] = max(counted.get(word, 0), n)
    expected = Counter([*words, *words, "crash", *words])
    assert counted == dict(expected)  # the restarted tasks' state holds no trace of the lost attempt


def test_lost_acker_state_replays_through_timeout(cluster):
    spout = ReplayingSpout(list(range(12)))
    b = TopologyBuilder()
    b.set_spout("s", spout)
    b.set_bolt("hold", Hold()).shuffle_grouping("s").add_configuration("topology.tick.tuple.freq.secs", 3)
    conf = {"topology.acker.executors": 2, "topology.message.timeout.secs": 10}
    run = cluster.submit_topology("lost-acker", conf, b.build())
    cluster.wait_idle()
    (spout,) = cluster.spout_instances("lost-acker").values()
    trees = run.scheduler.worker_here.worker.spouts.trees  # the acker tasks, on the test's process's worker
    lost_roots = trees.ledger.partitions[0].pending_roots().tolist()
    lost = {trees.get(r).msg_id for r in lost_roots}
    assert 0 < len(lost) < 12
    assert trees.ledger.lose_partition(0) == len(lost)

    cluster.advance_time(3)  # the tick acks every held tuple; only partition 1's trees can complete
    assert sorted(spout.acked) == sorted(set(range(12)) - lost) and spout.fail_calls == []
    cluster.advance_time(17)  # t = 20: the spout's own timeout fails the lost trees, which replay
    assert sorted(spout.fail_calls) == sorted(lost)
    assert run.stats.of("s").timed_out == len(lost)
    cluster.advance_time(3)  # the replays are held, then acked at the next tick
    assert sorted(spout.acked) == list(range(12)) and sorted(spout.fail_calls) == sorted(lost)


def test_a_driver_that_dies_is_restarted_and_the_queue_redelivers(tmp_path):
    """SIGKILL the whole driver process group mid-run; restart it; nothing is lost."""
    queue_path, sink = tmp_path / "queue.sqlite", tmp_path / "sink.sqlite"
    producer = ReliableQueue(queue_path, "q")
    values = [f"m{i}" for i in range(400)]
    producer.put_many([v] for v in values)
    conf = {"test.queue": queue_path, "test.sink": sink}

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
