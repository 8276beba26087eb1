import json
import signal
import subprocess
import sys
import textwrap

import pytest

from squall.connectors.queue import MalformedMessage, ReliableQueue, decode_values
from squall.model import Fields


@pytest.fixture
def path(tmp_path):
    return tmp_path / "queue.sqlite"


def test_put_open_ack_abort(path):
    q = ReliableQueue(path, "q")
    ids = q.put_many([["a"], ["b"], ["c"]])
    first = q.open()
    assert first == (ids[0], json.dumps(["a"]))
    second = q.open()
    assert second[0] == ids[1]
    assert q.counts() == {"ready": 1, "pending": 2, "dead": 0}
    q.ack(first[0])
    q.abort(second[0])  # back at the head
    assert q.open()[0] == ids[1]
    assert q.open()[0] == ids[2]
    assert q.open() is None
    assert q.counts() == {"ready": 0, "pending": 2, "dead": 0}


def test_pending_messages_are_invisible_to_other_consumers_and_return_on_close(path):
    a, b = ReliableQueue(path, "q"), ReliableQueue(path, "q")
    a.put_many([1, 2])
    got_a = a.open()
    got_b = b.open()
    assert got_a[0] != got_b[0]
    assert b.open() is None
    a.close()
    assert b.open()[0] == got_a[0]


def test_queues_are_separate(path):
    q1, q2 = ReliableQueue(path, "one"), ReliableQueue(path, "two")
    q1.put("x")
    assert q2.open() is None and q1.open()[1] == '"x"'


def test_a_dead_consumers_pending_messages_go_back(path):
    q = ReliableQueue(path, "q")
    ids = q.put_many(["m1", "m2", "m3"])
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys, time
                from squall.connectors.queue import ReliableQueue
                q = ReliableQueue({str(path)!r}, "q")
                print(q.open()[0], q.open()[0], flush=True)
                time.sleep(60)
            """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    taken = [int(x) for x in child.stdout.readline().split()]
    assert taken == ids[:2]
    assert q.open()[0] == ids[2]
    assert q.open() is None  # the child holds the others while it lives
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert q.reclaim() == 2
    assert [q.open()[0], q.open()[0]] == ids[:2]


def test_decode_values():
    f = Fields("a", "b")
    assert decode_values('[1, "x"]', f) == (1, "x")
    assert decode_values('{"b": 2, "a": 1}', f) == (1, 2)
    assert decode_values('"s"', Fields("only")) == ("s",)
    for body, message in [
        ("{nope", "invalid JSON"),
        ("[1]", "1 value(s) for 2 field(s) ['a', 'b']"),
        ('{"a": 1}', "object lacks field(s) ['b']"),
        ("3", "a lone value for 2 fields"),
    ]:
        with pytest.raises(MalformedMessage) as info:
            decode_values(body, f)
        assert message in str(info.value)


def test_open_many_claims_the_oldest_in_one_go_and_ack_many_and_abort_many_settle_them(path):
    a, b = ReliableQueue(path, "q"), ReliableQueue(path, "q")
    ids = a.put_many(["m1", "m2", "m3", "m4", "m5"])
    assert [i for i, _ in a.open_many(3)] == ids[:3]
    assert b.open_many(10) == [(ids[3], '"m4"'), (ids[4], '"m5"')]
    a.ack_many(ids[:2])
    a.abort_many([ids[2]])
    b.ack_many(ids[:2])  # not b's: nothing happens
    assert a.counts() == {"ready": 1, "pending": 2, "dead": 0}
    assert b.open_many(10) == [(ids[2], '"m3"')]


class RecordingCollector:
    """What a spout emits and reports, as a unit test of a Storm spout records it."""

    def __init__(self) -> None:
        self.emitted: list[tuple[tuple, object]] = []
        self.malformed: list[str] = []

    def emit(self, values, stream="default", msg_id=None):
        self.emitted.append((tuple(values), msg_id))

    def report_malformed(self, text: str) -> None:
        self.malformed.append(text)


def test_queue_spout_claims_in_batches_removes_acks_together_and_gives_back_what_it_did_not_emit(path):
    from squall.connectors import QueueSpout

    producer = ReliableQueue(path, "q")
    ids = producer.put_many([[f"s{i}"] for i in range(5)])
    spout, collector = QueueSpout(path, "q", fields=["sentence"], prefetch=2), RecordingCollector()
    spout.open({}, None, collector)

    spout.next_tuple()
    assert collector.emitted == [(("s0",), ids[0])]
    assert producer.counts() == {"ready": 3, "pending": 2, "dead": 0}  # two claimed at once

    spout.ack(ids[0])
    assert producer.counts()["pending"] == 2  # removed at the spout's next call
    spout.next_tuple()
    spout.next_tuple()
    assert [msg_id for _, msg_id in collector.emitted] == ids[:3]
    assert producer.counts() == {"ready": 1, "pending": 3, "dead": 0}  # s0 removed; s1, s2 emitted, s3 claimed

    spout.fail(ids[1])  # back on the queue at once
    spout.ack(ids[2])
    spout.deactivate()  # s2's removal, and s3 (claimed, never emitted) back on the queue
    assert producer.counts() == {"ready": 3, "pending": 0, "dead": 0}
    assert [i for i, _ in producer.open_many(5)] == [ids[1], ids[3], ids[4]]

    spout.close()


def test_queue_spout_emits_what_failed_before_the_newer_messages_it_had_claimed(path):
    """After a loss a spout fails its pending messages back: they come out again before the newer ones it had
    claimed and not emitted yet, so a replay keeps the queue's order."""
    from squall.connectors import QueueSpout

    producer = ReliableQueue(path, "q")
    ids = producer.put_many([[i] for i in range(6)])
    spout, collector = QueueSpout(path, "q", fields=["n"], prefetch=4), RecordingCollector()
    spout.open({}, None, collector)
    spout.next_tuple()
    spout.next_tuple()  # 0 and 1 emitted; 2 and 3 claimed
    spout.fail(ids[0])
    spout.fail(ids[1])
    assert producer.counts() == {"ready": 6, "pending": 0, "dead": 0}
    for _ in range(6):
        spout.next_tuple()
    assert [msg_id for _, msg_id in collector.emitted] == [ids[0], ids[1], *ids]
    spout.close()


def test_a_spout_tasks_next_instance_emits_what_the_last_one_left_pending_before_anything_newer(path):
    """A spout task's process dies with messages emitted and claimed; the task's next instance (a new process,
    the old one perhaps not yet seen gone) puts them back as it opens and emits them first, in the queue's
    order, so an event-time window downstream does not take them for late ones."""
    from squall import TopologyBuilder
    from squall.connectors import QueueSpout
    from squall.model.topology import TopologyContext

    producer = ReliableQueue(path, "q")
    ids = producer.put_many([[i] for i in range(8)])
    builder = TopologyBuilder()
    builder.set_spout("numbers", QueueSpout(path, "q", fields=["n"], prefetch=4), 2)
    topology = builder.build()
    first_task, second_task = topology.task_ids("numbers")
    conf = {"topology.name": "numbers"}

    lost, lost_emits = QueueSpout(path, "q", fields=["n"], prefetch=4), RecordingCollector()
    lost.open(conf, TopologyContext(topology, "numbers", first_task), lost_emits)
    lost.next_tuple()
    lost.next_tuple()  # 0 and 1 emitted, 2 and 3 claimed: then its process is lost (no close, no fail)
    other, other_emits = QueueSpout(path, "q", fields=["n"], prefetch=4), RecordingCollector()
    other.open(conf, TopologyContext(topology, "numbers", second_task), other_emits)
    other.next_tuple()  # the other task goes on with the newer messages
    assert [msg_id for _, msg_id in other_emits.emitted] == [ids[4]]

    again, again_emits = QueueSpout(path, "q", fields=["n"], prefetch=4), RecordingCollector()
    again.open(conf, TopologyContext(topology, "numbers", first_task), again_emits)
    for _ in range(4):
        again.next_tuple()
    assert [msg_id for _, msg_id in again_emits.emitted] == ids[:4]
    again.close()
    other.close()


def test_queue_spout_refuses_a_prefetch_below_one(path):
    from squall.connectors import QueueSpout

    with pytest.raises(ValueError, match="QueueSpout prefetch must be an int >= 1, got 0"):
        QueueSpout(path, "q", prefetch=0)
