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
