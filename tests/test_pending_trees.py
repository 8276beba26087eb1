"""PendingTrees keeps trees in columns: every tree settles exactly once, as acked, failed or timed out, with the
spout task and message id it started with, as a plain dict of pending trees would say."""

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from squall.reliability.acker import ACKED, FAILED, TIMED_OUT
from squall.reliability.acks import ACK, FAIL, RESET, AckBatch
from squall.spark.trees import PendingTrees


class PendingTreesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.trees = PendingTrees(num_ackers=2)
        self.pending: dict[int, dict] = {}  # root -> the model's view of the tree
        self.next_msg_id = 0
        self.epoch = 0
        self.settled: dict[str, set[int]] = {"acked": set(), "failed": set(), "timed_out": set()}
        self.expected: dict[str, set[int]] = {"acked": set(), "failed": set(), "timed_out": set()}

    def _record(self, settlement) -> None:
        if not len(settlement):
            return
        assert len(settlement.emitted_at) == len(settlement.tasks) == len(settlement.msg_ids) == len(settlement.how)
        for kind, how in (("acked", ACKED), ("failed", FAILED), ("timed_out", TIMED_OUT)):
            finished = settlement.where(how)
            assert finished.emitted_at.tolist() == [float(m) for m in finished.msg_ids]
            for task, msg_id in zip(finished.tasks.tolist(), finished.msg_ids, strict=True):
                assert task == msg_id % 3  # the spout task the tree started from
                assert msg_id not in self.settled["acked"] | self.settled["failed"] | self.settled["timed_out"]
                self.settled[kind].add(msg_id)

    @rule(copies=st.lists(st.integers(1, 3), min_size=1, max_size=6))
    def start_a_wave_of_trees(self, copies):
        sent_roots, sent_edges = [], []  # every copy sent, as the spout host seals a wave's batches
        for n in copies:
            msg_id = self.next_msg_id
            self.next_msg_id += 1
            root = self.trees.start(msg_id % 3, msg_id, float(msg_id))
            edges = self.trees.new_edges(n).tolist()
            assert len(edges) == n and all(edges) and root not in self.pending
            self.pending[root] = {"msg_id": msg_id, "edges": edges, "stamp": self.epoch}
            sent_roots += [root] * n
            sent_edges += edges
        self._record(self.trees.merge_inits(np.array(sent_roots, np.uint64), np.array(sent_edges, np.uint64)))

    def _acks(self, rows):
        return AckBatch.from_messages([r for r, _, _ in rows], [v for _, v, _ in rows], [k for _, _, k in rows])

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def ack_some_trees_whole(self, data):
        roots = data.draw(st.lists(st.sampled_from(sorted(self.pending)), unique=True, min_size=1))
        rows = [(root, edge, ACK) for root in roots for edge in self.pending[root]["edges"]]
        for root in roots:
            self.expected["acked"].add(self.pending.pop(root)["msg_id"])
        self._record(self.trees.merge_acks(self._acks(rows)))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def ack_part_of_a_tree(self, data):
        root = data.draw(st.sampled_from(sorted(self.pending)))
        tree = self.pending[root]
        if len(tree["edges"]) > 1:  # the rest of its copies are still out: it stays pending
            edge = tree["edges"].pop()
            self._record(self.trees.merge_acks(self._acks([(root, edge, ACK)])))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def fail_a_tree(self, data):
        root = data.draw(st.sampled_from(sorted(self.pending)))
        self.expected["failed"].add(self.pending.pop(root)["msg_id"])
        self._record(self.trees.merge_acks(self._acks([(root, 0, FAIL)])))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def reset_a_trees_timeout(self, data):
        root = data.draw(st.sampled_from(sorted(self.pending)))
        self.pending[root]["stamp"] = self.epoch
        self._record(self.trees.merge_acks(self._acks([(root, 0, RESET)])))

    @rule()
    def rotate(self):
        self.epoch += 1
        for root in [r for r, tree in self.pending.items() if tree["stamp"] < self.epoch - 1]:
            self.expected["timed_out"].add(self.pending.pop(root)["msg_id"])
        self._record(self.trees.rotate())

    @invariant()
    def settles_as_a_dict_would(self):
        assert self.settled == self.expected
        assert len(self.trees) == len(self.pending)
        per_task = {task: 0 for task in range(3)}
        for tree in self.pending.values():
            per_task[tree["msg_id"] % 3] += 1
        assert {task: self.trees.per_task[task] for task in range(3)} == per_task
        for root, tree in self.pending.items():
            assert self.trees.get(root).msg_id == tree["msg_id"]


PendingTreesMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_pending_trees_settle_like_a_dict = PendingTreesMachine.TestCase


class LocalAckersMachine(PendingTreesMachine):
    """The trees of a worker hosting acker tasks 1 and 3 of 5: every root goes to one of them by mod hashing,
    and everything else holds as above."""

    def __init__(self) -> None:
        super().__init__()
        self.trees = PendingTrees(num_ackers=5, ackers=[1, 3])

    @invariant()
    def roots_go_to_the_ackers_here(self):
        assert {root % 5 for root in self.pending} <= {1, 3}


LocalAckersMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
test_trees_of_a_worker_with_some_acker_tasks_settle_like_a_dict = LocalAckersMachine.TestCase


def test_roots_alternate_over_the_acker_tasks_here_and_a_root_from_elsewhere_is_not_found():
    trees = PendingTrees(num_ackers=4, ackers=[0, 2])
    roots = [trees.start(7, i, 0.0) for i in range(6)]
    residues = [r % 4 for r in roots]
    assert residues[0::2] in ([0] * 3, [2] * 3) and sorted(residues) == [0, 0, 0, 2, 2, 2]
    trees.merge_inits(np.array(roots, dtype=np.uint64), np.arange(1, 7, dtype=np.uint64))
    assert [trees.get(r).msg_id for r in roots] == list(range(6))
    assert trees.get(roots[0] + 1) is None  # acker 1 is not here


def test_acks_withdrawn_after_a_loss_leave_the_trees_pending_for_the_run_again_and_spare_the_settled_ones():
    """Wave 3 was in flight at a worker loss: one bolt task's acks of it had been applied, acking tree 0 and
    halfway through tree 1. Withdrawn, they leave tree 0 acked and tree 1 waiting, with nothing of a settled or
    unknown root left behind; the run again's acks (both tasks') then complete tree 1."""
    trees = PendingTrees(num_ackers=2)
    trees.wave = 3
    roots = [trees.start(0, i, 0.0) for i in range(2)]
    first, second, child = trees.new_edges(2), trees.new_edges(2), trees.new_edges(1)
    trees.merge_inits(np.array(roots, np.uint64), first)
    # Task A acks both spout tuples; tree 0 is done, tree 1 gets a child edge, which task B acks.
    task_a = AckBatch.reduce(np.array([roots[0], roots[1], roots[1]], np.uint64), np.r_[first, child])
    assert trees.merge_acks(task_a).where(ACKED).msg_ids == [0]
    assert not len(trees.withdraw_acks(task_a)) and len(trees) == 1
    stray = AckBatch.reduce(np.array([roots[0] + 2], np.uint64), second[:1])  # a root no acker here has
    assert not len(trees.withdraw_acks(stray)) and len(trees) == 1
    task_b = AckBatch.reduce(np.array([roots[1]], np.uint64), child)
    assert not len(trees.merge_acks(task_b))  # half of the run again
    assert trees.merge_acks(task_a).where(ACKED).msg_ids == [1] and len(trees) == 0
