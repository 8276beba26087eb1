"""A spout that emits in bulk: ``collector.emit_many`` within the collector's ``emit_budget``.

Every row is tracked, acked and failed as if emitted alone; ``topology.max.spout.pending`` and the wave's share
bound the budget, so a spout that keeps to it never has more trees pending than the limit. A bad row fails the
whole call before anything of it is emitted.
"""

from __future__ import annotations

from squall import BasicBolt, Bolt, Spout, TopologyBuilder

SEEN: dict[str, dict] = {}  # per test: what its spout saw (spouts run in the test's process under TestCluster)


class BulkSpout(Spout):
    """Emits the numbers below ``total`` in bulk, as many per call as its budget allows."""

    outputs = ("n",)

    def __init__(self, name: str, total: int, bad_at: int | None = None, ids_short: bool = False) -> None:
        self.name, self.total, self.bad_at, self.ids_short = name, total, bad_at, ids_short

    def open(self, conf, context, collector):
        self.collector, self.next = collector, 0
        self.seen = SEEN[self.name] = {"acked": set(), "failed": set(), "budgets": [], "most_pending": 0}
        self.pending = set()

    def next_tuple(self):
        budget = self.collector.emit_budget
        self.seen["budgets"].append(budget)
        numbers = list(range(self.next, min(self.total, self.next + budget)))
        if not numbers:
            return
        rows = [[n] for n in numbers]
        if self.bad_at in numbers:
            rows[numbers.index(self.bad_at)] = [self.bad_at, "extra"]
        ids = numbers[:-1] if self.ids_short else numbers
        self.next = numbers[-1] + 1  # a raising call's numbers are not emitted again
        self.collector.emit_many(rows, ids)
        self.pending.update(numbers)
        self.seen["most_pending"] = max(self.seen["most_pending"], len(self.pending))

    def ack(self, msg_id):
        self.pending.discard(msg_id)
        self.seen["acked"].add(msg_id)

    def fail(self, msg_id):
        self.pending.discard(msg_id)
        self.seen["failed"].add(msg_id)


class FailMultiplesOf7(Bolt):
    outputs = ("n",)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup[0] % 7 == 0:
            self.collector.fail(tup)
        else:
            self.collector.emit([tup[0]], tup)
            self.collector.ack(tup)


class Drop(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def test_rows_emitted_in_bulk_are_acked_and_failed_one_by_one_within_max_spout_pending(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", BulkSpout("bulk", 1000))
    b.set_bolt("check", FailMultiplesOf7(), 2).shuffle_grouping("numbers")
    b.set_bolt("drop", Drop(), 2).fields_grouping("check", ["n"])
    conf = {"topology.max.spout.pending": 64, "squall.wave.spout.batch": 100}
    cluster.submit_topology("bulk", conf, b.build())
    for _ in range(100):
        cluster.wait_idle()
        if len(SEEN["bulk"]["acked"]) + len(SEEN["bulk"]["failed"]) == 1000:
            break
    seen = SEEN["bulk"]
    assert seen["failed"] == {n for n in range(1000) if n % 7 == 0}
    assert seen["acked"] == {n for n in range(1000) if n % 7}
    assert seen["most_pending"] == 64  # the budget keeps the spout to max.spout.pending, and lets it reach it
    assert max(seen["budgets"]) == 64 and min(seen["budgets"]) >= 1
    stats = cluster.stats("bulk").of("numbers")
    assert (stats.emitted, stats.acked, stats.failed) == (1000, 857, 143)


def test_a_bad_row_fails_the_whole_call_naming_the_component_and_the_topology_goes_on(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", BulkSpout("bad", 100, bad_at=10))
    b.set_bolt("drop", Drop()).shuffle_grouping("numbers")
    cluster.submit_topology("bad", {"squall.wave.spout.batch": 20}, b.build())
    for _ in range(20):
        cluster.wait_idle()
    seen = SEEN["bad"]
    assert seen["acked"] == set(range(100)) - set(range(0, 20))  # the call holding row 10 emitted nothing
    stats = cluster.stats("bad")
    assert stats.of("numbers").errors == 1
    (error,) = [e.text for e in stats.errors]
    assert "component 'numbers' emitted 2 value(s) on stream 'default', which declares 1 field(s) ['n']" in error


def test_one_msg_id_per_row_is_required(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", BulkSpout("short", 10, ids_short=True))
    b.set_bolt("drop", Drop()).shuffle_grouping("numbers")
    cluster.submit_topology("short", {}, b.build())
    cluster.wait_idle()
    (error,) = [e.text for e in cluster.stats("short").errors]
    assert "component 'numbers' emitted 10 rows with 9 msg ids on stream 'default'" in error
    assert SEEN["short"]["acked"] == set()


def test_emit_many_reaches_every_subscriber_of_the_stream(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", BulkSpout("two", 300))
    b.set_bolt("check", FailMultiplesOf7(), 2).shuffle_grouping("numbers")
    b.set_bolt("all", Drop(), 2).all_grouping("numbers")
    cluster.submit_topology("two", {}, b.build())
    for _ in range(50):
        cluster.wait_idle()
    seen = SEEN["two"]
    assert seen["failed"] == {n for n in range(300) if n % 7 == 0}
    assert seen["acked"] == {n for n in range(300) if n % 7}
    assert cluster.stats("two").of("all").executed == 600  # every row to both of its tasks


class SomeUntracked(Spout):
    outputs = ("n",)

    def open(self, conf, context, collector):
        self.collector, self.done = collector, False
        self.seen = SEEN["untracked"] = {"acked": set(), "failed": set()}

    def next_tuple(self):
        if not self.done:
            self.done = True
            self.collector.emit_many([[1], [2], [3]], [None, 2, None])  # None: untracked, as for emit

    def ack(self, msg_id):
        self.seen["acked"].add(msg_id)


def test_a_row_with_no_msg_id_is_untracked(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", SomeUntracked())
    b.set_bolt("drop", Drop()).shuffle_grouping("numbers")
    cluster.submit_topology("untracked", {}, b.build())
    cluster.wait_idle()
    assert SEEN["untracked"]["acked"] == {2}
    stats = cluster.stats("untracked").of("numbers")
    assert (stats.emitted, stats.acked, stats.failed) == (3, 1, 0)
