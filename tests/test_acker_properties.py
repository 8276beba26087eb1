"""Property tests: the XOR acker completes a tree exactly when every tuple in it is acked.

Messages reach the acker tasks in waves, in any order but one: a tuple's enter message
(sent with the wave that emitted it) is never applied after its parent's ack, as a
task reports a wave's emits and acks together and whole waves are applied. Each wave's
inits reach their acker before its acks, as the spout tasks' host sends them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from squall.reliability import (
    ACKED,
    FAILED,
    AckBatch,
    Acker,
    Acks,
    IdGenerator,
    Init,
    ack_messages,
    acker_partition,
    anchor,
    enter_messages,
    spout_edges,
)
from squall.reliability.acks import ACK, FAIL


@dataclass
class Node:
    anchors_to_ids: dict[int, int]
    roots: frozenset = field(default_factory=frozenset)
    child_enters: list[int] = field(default_factory=list)  # message indexes of its children's enter messages


@dataclass
class Msg:
    kind: str  # init | enter | ack | fail
    root: int
    value: int = 0
    task: int = -1


def build_dags(seed: int, n_roots: int, n_steps: int, ack_prob: float, fail_prob: float):
    """Random tuple DAGs over several roots; returns messages in the order they were sent, which roots finished
    acked/failed, and ``(enter, parent's ack)`` message index pairs: one for each root a parent's ack is sent to."""
    rnd = random.Random(seed)
    ids = IdGenerator(seed)
    messages: list[Msg] = []
    live: list[Node] = []
    tree_tuples: dict[int, int] = {}  # root -> tuples created in its tree
    tree_acked: dict[int, int] = {}
    failed_roots: set[int] = set()
    roots = []
    precedes: list[tuple[int, int]] = []
    for i in range(n_roots):
        root = ids.next_id()
        roots.append(root)
        init_value, copies = spout_edges(root, rnd.randint(1, 3), ids.next_id)
        messages.append(Msg("init", root, init_value, task=i % 5))
        for copy in copies:
            live.append(Node(copy, roots=frozenset([root])))
        tree_tuples[root] = len(copies)
        tree_acked[root] = 0
    for _ in range(n_steps):
        if not live:
            break
        if rnd.random() < 0.5:
            # emit a child anchored to 1-3 live tuples, duplicates allowed, trees may mix
            anchors = [rnd.choice(live) for _ in range(rnd.randint(1, 3))]
            for _copy in range(rnd.randint(1, 2)):
                child = Node(anchor(anchors, ids.next_id))
                child.roots = frozenset().union(*(a.roots for a in anchors))
                for r, v in enter_messages(child.anchors_to_ids):
                    for parent in anchors:
                        parent.child_enters.append(len(messages))
                    messages.append(Msg("enter", r, v))
                live.append(child)
                for r in child.roots:
                    tree_tuples[r] += 1
        else:
            node = live.pop(rnd.randrange(len(live)))
            if rnd.random() < fail_prob:
                messages.extend(Msg("fail", r) for r in node.roots)
                failed_roots |= node.roots
            elif rnd.random() < ack_prob:
                first = len(messages)
                messages.extend(Msg("ack", r, v) for r, v in ack_messages(node))
                precedes.extend((enter, ack) for enter in node.child_enters for ack in range(first, len(messages)))
                for r in node.roots:
                    tree_acked[r] += 1
            else:
                live.append(node)
    # optionally finish: ack whatever is left
    if rnd.random() < 0.7:
        for node in live:
            first = len(messages)
            messages.extend(Msg("ack", r, v) for r, v in ack_messages(node))
            precedes.extend((enter, ack) for enter in node.child_enters for ack in range(first, len(messages)))
            for r in node.roots:
                tree_acked[r] += 1
        live.clear()
    fully_acked = {r for r in roots if tree_acked[r] == tree_tuples[r] and r not in failed_roots}
    return roots, messages, fully_acked, failed_roots, precedes


def deliver(ackers: list[Acker], wave: list[Msg]):
    """One wave's messages to their acker tasks (``root mod len(ackers)``): its inits, then its acks and fails,
    folded per root. Returns what they settled."""
    inits = [m for m in wave if m.kind == "init"]
    rest = [m for m in wave if m.kind != "init"]
    roots = np.array([m.root for m in inits], np.uint64)
    values = np.array([m.value for m in inits], np.uint64)
    tasks = np.array([m.task for m in inits])
    acks = AckBatch.from_messages(
        [m.root for m in rest], [m.value for m in rest], [FAIL if m.kind == "fail" else ACK for m in rest]
    )
    settled = []
    for task, acker in enumerate(ackers):
        mine = acker_partition(roots, len(ackers)) == task
        settled.append(acker.handle(Init(roots[mine], values[mine], tasks[mine])))
        settled.append(acker.handle(Acks(acks.by_partition(len(ackers))[task])))
    return settled


def expected_settlement(roots, wave_of, messages, fully_acked, failed_roots):
    """For each root, the wave in which it must settle, and how."""
    last_wave, init_wave, first_fail = {}, {}, {}
    for i, m in enumerate(messages):
        last_wave[m.root] = max(last_wave.get(m.root, 0), wave_of[i])
        if m.kind == "init":
            init_wave[m.root] = wave_of[i]
        if m.kind == "fail":
            first_fail[m.root] = min(first_fail.get(m.root, wave_of[i]), wave_of[i])
    expect = {}
    for r in roots:
        if r in failed_roots:
            expect[r] = ("failed", max(init_wave[r], first_fail[r]))
        elif r in fully_acked:
            expect[r] = ("completed", last_wave[r])
    return expect


@settings(max_examples=250, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_roots=st.integers(1, 4),
    n_steps=st.integers(0, 40),
    ack_prob=st.floats(0.3, 1.0),
    fail_prob=st.sampled_from([0.0, 0.0, 0.05, 0.2]),
    waves=st.integers(1, 8),
    partitions=st.integers(1, 3),
)
# A parent in two trees acks in both; each ack waits for its children's enters, not only the first.
@example(seed=23, n_roots=4, n_steps=23, ack_prob=0.5625, fail_prob=0.0, waves=2, partitions=1)
def test_root_settles_exactly_when_its_tree_is_done(seed, n_roots, n_steps, ack_prob, fail_prob, waves, partitions):
    roots, messages, fully_acked, failed_roots, precedes = build_dags(seed, n_roots, n_steps, ack_prob, fail_prob)
    pick = random.Random(seed ^ 0x5EED)
    wave_of = [pick.randrange(waves) for _ in messages]  # any order: acks may precede inits
    for enter, parent_ack in precedes:  # but an enter never after its parent's ack
        wave_of[enter] = min(wave_of[enter], wave_of[parent_ack])
    expect = expected_settlement(roots, wave_of, messages, fully_acked, failed_roots)
    task_of = {m.root: m.task for m in messages if m.kind == "init"}

    ackers = [Acker(task) for task in range(partitions)]
    seen: dict[int, tuple[str, int]] = {}
    for wave in range(waves):
        delivered = [m for i, m in enumerate(messages) if wave_of[i] == wave]
        pick.shuffle(delivered)
        if not delivered:
            continue
        for settlement in deliver(ackers, delivered):
            for kind, how in (("completed", ACKED), ("failed", FAILED)):
                for task, root in settlement.pairs(how):
                    assert root not in seen, f"root settled twice: {root}"
                    assert task == task_of[root]
                    seen[root] = (kind, wave)

    assert seen == expect


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), n_steps=st.integers(0, 30))
def test_a_fail_anywhere_fails_the_root(seed, n_steps):
    roots, messages, _, _, _ = build_dags(seed, 1, n_steps, 1.0, 0.0)
    root = roots[0]
    # fail one random message's tuple instead: replace a random ack with a fail of that root
    acks = [i for i, m in enumerate(messages) if m.kind == "ack"]
    if not acks:
        return
    victim = random.Random(seed).choice(acks)
    messages[victim] = Msg("fail", root)
    ackers = [Acker()]
    results = [settlement for m in messages for settlement in deliver(ackers, [m])]
    assert [pair for s in results for pair in s.pairs(FAILED)] == [(0, root)]
    assert sum(len(s.where(ACKED)) for s in results) == 0
