"""Storm's DRPCIntegrationTest for LinearDRPCTopologyBuilder, as users write it: bolts defined here, a
LocalCluster, a LocalDRPC, Storm's expected answers."""

import pytest

from squall import BasicBolt, Bolt, LocalCluster
from squall.drpc import DRPCExecutionException, FinishedCallback, LinearDRPCTopologyBuilder, LocalDRPC
from squall.model.errors import FailedException, InvalidTopologyError


class ExclamationBolt(BasicBolt):
    outputs = ("id", "result")

    def execute(self, tup, collector):
        collector.emit([tup[0], tup[1] + "!!!"])


class CreateTuples(BasicBolt):
    outputs = ("request",)

    def execute(self, tup, collector):
        for _ in range(int(tup[1]) ** 2):
            collector.emit([tup[0]])


class PartialCount(Bolt, FinishedCallback):
    outputs = ("request", "count")

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        self.counts[tup[0]] = self.counts.get(tup[0], 0) + 1
        self.collector.ack(tup)

    def finished_id(self, request_id):
        self.collector.emit([request_id, self.counts.pop(request_id, 0)])


class CountAggregator(Bolt, FinishedCallback):
    outputs = ("request", "total")

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}

    def execute(self, tup):
        self.counts[tup[0]] = self.counts.get(tup[0], 0) + tup[1]
        self.collector.ack(tup)

    def finished_id(self, request_id):
        self.collector.emit([request_id, self.counts.pop(request_id, 0)])


class IdBolt(BasicBolt):
    outputs = ("request", "val")

    def execute(self, tup, collector):
        collector.emit(list(tup.values))


class EmitFinish(Bolt, FinishedCallback):
    outputs = ("request", "result")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)

    def finished_id(self, request_id):
        self.collector.emit([request_id, "done"])


class FailFinish(Bolt, FinishedCallback):
    outputs = ("request", "result")

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)

    def finished_id(self, request_id):
        raise FailedException("no")


class ExclaimBolt(BasicBolt):
    """storm-starter's BasicDRPCTopology."""

    outputs = ("id", "result")

    def execute(self, tup, collector):
        collector.emit([tup[0], tup[1] + "!"])


def test_linear_drpc_answers_as_storm_s_integration_tests_expect():
    with LocalDRPC() as drpc, LocalCluster() as cluster:
        exclaim = LinearDRPCTopologyBuilder("test")
        exclaim.add_bolt(ExclamationBolt(), 3)
        square = LinearDRPCTopologyBuilder("square")
        square.add_bolt(CreateTuples(), 3)
        square.add_bolt(PartialCount(), 3).shuffle_grouping()
        square.add_bolt(CountAggregator(), 3).fields_grouping(["request"])
        tricky = LinearDRPCTopologyBuilder("tricky")
        tricky.add_bolt(IdBolt(), 3)
        tricky.add_bolt(IdBolt(), 3).shuffle_grouping()
        tricky.add_bolt(EmitFinish(), 3).fields_grouping(["request"])
        fail = LinearDRPCTopologyBuilder("fail2")
        fail.add_bolt(FailFinish(), 3)
        basic = LinearDRPCTopologyBuilder("exclamation")
        basic.add_bolt(ExclaimBolt(), 3)
        asked = [
            (exclaim, "test", {"aaa": "aaa!!!", "b": "b!!!", "c": "c!!!"}),
            (square, "square", {"2": "4", "10": "100", "1": "1", "0": "0"}),
            (tricky, "tricky", {"2": "done", "3": "done", "4": "done"}),
            (basic, "exclamation", {"hello": "hello!"}),
        ]
        for builder, function, answers in asked:  # one at a time: each takes the tests' cores
            cluster.submit_topology(function, {}, builder.create_local_topology(drpc))
            assert {args: drpc.execute(function, args) for args in answers} == answers
            cluster.kill_topology(function)
        cluster.submit_topology("fail2", {}, fail.create_local_topology(drpc))
        with pytest.raises(DRPCExecutionException, match="no"):
            drpc.execute("fail2", "2")
        assert not cluster.failures, cluster.failures


def test_the_last_bolt_must_declare_the_id_and_the_result():
    builder = LinearDRPCTopologyBuilder("bad")
    builder.add_bolt(CreateTuples())
    with pytest.raises(InvalidTopologyError, match=r"must output two fields.*\['request'\]"):
        builder.create_local_topology(None)
