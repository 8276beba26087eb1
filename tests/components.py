"""Spouts and bolts shared by the runtime tests (imported by Spark's workers by name)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from squall import BasicBolt, Bolt, FailedException, Spout
from squall.testing import FeederSpout


class AckEveryOther(Bolt):
    outputs = ("v",)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = 0

    def execute(self, tup):
        self.seen += 1
        if self.seen % 2 == 1:
            self.collector.ack(tup)


class Identity(BasicBolt):
    outputs = ("v",)

    def execute(self, tup, collector):
        collector.emit(list(tup.values))


class Branch(BasicBolt):
    """Emits two tuples per input, both anchored to it."""

    outputs = ("v",)

    def execute(self, tup, collector):
        collector.emit([f"{tup[0]}-a"])
        collector.emit([f"{tup[0]}-b"])


class Aggregate(Bolt):
    """Holds inputs until it has ``n``, then emits one tuple anchored to all of them and acks them."""

    outputs = ("batch",)

    def __init__(self, n: int) -> None:
        self.n = n

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held = []

    def execute(self, tup):
        self.held.append(tup)
        if len(self.held) == self.n:
            self.collector.emit([tuple(sorted(t[0] for t in self.held))], anchors=self.held)
            for t in self.held:
                self.collector.ack(t)
            self.held = []


class AckAll(Bolt):
    outputs = ("v",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


class FailAll(Bolt):
    outputs = ("v",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.fail(tup)


class AnchorTwice(Bolt):
    outputs = ("v",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit([tup[0]], anchors=[tup, tup])
        self.collector.ack(tup)


class EmitUnanchored(Bolt):
    outputs = ("v",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit([tup[0]])
        self.collector.ack(tup)


class HoldAndRelease(Bolt):
    """Holds every input; on each tick optionally resets their timeouts, and acks them all
    on tick number ``release_on_tick``."""

    outputs = ("v",)

    def __init__(self, reset: bool, release_on_tick: int) -> None:
        self.reset, self.release_on_tick = reset, release_on_tick

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held = []
        self.ticks = 0

    def execute(self, tup):
        if not tup.is_tick:
            self.held.append(tup)
            return
        self.ticks += 1
        if self.ticks == self.release_on_tick:
            for t in self.held:
                self.collector.ack(t)
            self.held = []
        elif self.reset:
            for t in self.held:
                self.collector.reset_timeout(t)


class Hold(Bolt):
    """Holds inputs; acks everything it holds when it receives a tick."""

    outputs = ("v",)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.held = []

    def execute(self, tup):
        if tup.is_tick:
            for t in self.held:
                self.collector.ack(t)
            self.held = []
        else:
            self.held.append(tup)


class TaskRecorder(BasicBolt):
    """Emits ``(task_id, value)`` for every input: where each tuple landed."""

    outputs = ("task", "v")

    def prepare(self, conf, context):
        self.task = context.task_id

    def execute(self, tup, collector):
        collector.emit([self.task, tup[0]])


class NoMsgIdSpout(Spout):
    outputs = ("v",)

    def __init__(self, values):
        self.values = list(values)
        self.acked, self.failed = [], []

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        if self.values:
            self.collector.emit([self.values.pop(0)])

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class SplitSentence(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


class WordCount(BasicBolt):
    outputs = ("word", "count")

    def prepare(self, conf, context):
        self.counts = {}

    def execute(self, tup, collector):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        collector.emit([word, self.counts[word]])


class CrashOnce(BasicBolt):
    """Kills its Python worker (``os._exit``) on the first word ``crash``, once per marker file."""

    outputs = ("word",)

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def execute(self, tup, collector):
        if tup[0] == "crash" and not Path(self.marker).exists():
            Path(self.marker).write_text("crashed")
            os._exit(1)
        collector.emit([tup[0]])


class FailOnWord(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        if tup[0] == "bad":
            raise FailedException("bad word")
        if tup[0] == "boom":
            raise ZeroDivisionError("boom")
        collector.emit([tup[0]])


class DirectEmitter(Bolt):
    """Sends each input to the task named in its second field, with emit_direct."""

    outputs = {"direct": ("v",)}

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit_direct(tup[1], [tup[0]], anchors=tup, stream="direct")
        self.collector.ack(tup)


class Router(BasicBolt):
    """Even numbers to the "even" stream, odd to "odd"."""

    outputs = {"even": ("n",), "odd": ("n", "half")}

    def execute(self, tup, collector):
        n = tup[0]
        if n % 2 == 0:
            collector.emit([n], stream="even")
        else:
            collector.emit([n, n // 2], stream="odd")


class StreamRecorder(BasicBolt):
    outputs = ("stream", "values")

    def execute(self, tup, collector):
        collector.emit([tup.source_stream, tup.values])


class TickCounter(Bolt):
    outputs = ("ticks",)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.ticks = 0

    def execute(self, tup):
        if tup.is_tick:
            self.ticks += 1
            self.collector.emit([self.ticks])
        else:
            self.collector.ack(tup)


class PrepareCounter(BasicBolt):
    """Counts how often prepare ran and how many tuples this instance has seen."""

    outputs = ("task", "prepares", "seen")

    def prepare(self, conf, context):
        self.task = context.task_id
        self.prepares = getattr(self, "prepares", 0) + 1
        self.seen = 0
        self.connection = open(os.devnull)  # noqa: SIM115 - unpicklable: rebuilt by prepare, never snapshotted

    def execute(self, tup, collector):
        self.seen += 1
        assert not self.connection.closed
        collector.emit([self.task, self.prepares, self.seen])


class Unserializable(BasicBolt):
    outputs = ("v",)

    def execute(self, tup, collector):
        if tup[0] == "lock":
            collector.emit([threading.Lock()])  # values travel by value, but a lock cannot travel at all
        elif tup[0] == "wrong-arity":
            collector.emit([1, 2])
        elif tup[0] == "undeclared":
            collector.emit([1], stream="nope")
        else:
            collector.emit([tup[0]])


class ReplayingSpout(Spout):
    """Emits queued values with msg ids; a failed message goes back on the queue."""

    outputs = ("v",)

    def __init__(self, values):
        self.queue = list(values)
        self.acked, self.fail_calls = [], []

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        if self.queue:
            v = self.queue.pop(0)
            self.collector.emit([v], msg_id=v)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.fail_calls.append(msg_id)
        self.queue.append(msg_id)


class TaskTaggedSpout(Spout):
    """Each task emits msg ids tagged with its own task id and records the acks it receives."""

    outputs = ("v",)
    received: dict = {}  # task id -> msg ids acked on that task (driver side)

    def open(self, conf, context, collector):
        self.collector, self.task, self.n = collector, context.task_id, 0
        TaskTaggedSpout.received[self.task] = []

    def next_tuple(self):
        if self.n < 10:
            self.n += 1
            self.collector.emit([self.n], msg_id=(self.task, self.n))

    def ack(self, msg_id):
        TaskTaggedSpout.received[self.task].append(msg_id)


class FailFirstDelivery(BasicBolt):
    """Fails the first delivery of each value listed, then lets it through."""

    outputs = ("word",)

    def __init__(self, marker_dir: str, words) -> None:
        self.marker_dir, self.words = marker_dir, set(words)

    def execute(self, tup, collector):
        marker = Path(self.marker_dir, f"seen-{tup[0]}")
        if tup[0] in self.words and not marker.exists():
            marker.write_text("")
            raise FailedException("first delivery")
        collector.emit([tup[0]])


class SpoutRecorder:
    """The collector as a spout sees it, recording what the spout emits and sets aside."""

    def __init__(self):
        self.emitted = []
        self.malformed = []

    def emit(self, values, msg_id=None, stream="default"):
        self.emitted.append((tuple(values), msg_id))
        return []

    def report_malformed(self, what):
        self.malformed.append(what)


def opened(spout, conf=None, component="s") -> SpoutRecorder:
    """``spout`` opened outside any topology run, with a recording collector."""
    from squall.model import TopologyBuilder
    from squall.model.topology import TopologyContext

    b = TopologyBuilder()
    b.set_spout(component, spout)
    b.set_bolt("sink", AckAll()).shuffle_grouping(component)
    recorder = SpoutRecorder()
    spout.open(conf or {}, TopologyContext(b.build(), component, 1), recorder)
    return recorder


class RecordValues(BasicBolt):
    """Records the first value of each tuple in the SQLite table ``seen``, before the tuple is acked; with
    ``pause``, it then sleeps that many seconds, as a bolt that calls a slow service does."""

    outputs = ()

    def __init__(self, db_path, pause: float = 0.0) -> None:
        self.db_path = str(db_path)
        self.pause = pause

    def prepare(self, conf, context):
        self.db = sqlite3.connect(self.db_path, timeout=30)
        with self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS seen (value)")

    def execute(self, tup, collector):
        with self.db:
            self.db.execute("INSERT INTO seen (value) VALUES (?)", (tup[0],))
        if self.pause:
            time.sleep(self.pause)


def recorded(db_path) -> list:
    """What ``RecordValues`` recorded so far (nothing yet if its table is not there)."""
    try:
        with sqlite3.connect(db_path, timeout=30) as db:
            return [v for (v,) in db.execute("SELECT value FROM seen")]
    except sqlite3.OperationalError:
        return []


class RequeueingFeeder(FeederSpout):
    """A ``FeederSpout`` whose failed messages go back on its queue, as a broker redelivers what was not acked."""

    def __init__(self, fields):
        super().__init__(fields)
        self._state.sent = {}

    def __deepcopy__(self, memo):
        twin = super().__deepcopy__(memo)
        twin.__class__ = RequeueingFeeder
        return twin

    def next_tuple(self):
        with self._state.lock:
            if not self._state.queue:
                return
            values, msg_id = self._state.queue.popleft()
            self._state.sent[msg_id] = values
        self._collector.emit(values, msg_id=msg_id)

    def fail(self, msg_id):
        super().fail(msg_id)
        with self._state.lock:
            self._state.queue.append((self._state.sent[msg_id], msg_id))
