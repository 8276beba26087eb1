"""Property tests: the XOR acker completes a tree exactly when every tuple in it is acked."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.reliability import AckLedger, IdGenerator, PartitionedLedger, ack_messages, anchor, spout_edges


@dataclass
class Node:
    anchors_to_ids: dict[int, int]
    ack_val: int = 0
    roots: frozenset = field(default_factory=frozenset)


@dataclass
class Msg:
    kind: str  # init | ack | fail
    root: int
    value: int = 0
    task: int = -1


def build_dags(seed: int, n_roots: int, n_steps: int, ack_prob: float, fail_prob: float):
    """Random tuple DAGs over several roots; returns messages, and which roots finished acked/failed."""
    rnd = random.Random(seed)
    ids = IdGenerator(seed)
    messages: list[Msg] = []
    live: list[Node] = []
    tree_tuples: dict[int, int] = {}  # root -> tuples created in its tree
    tree_acked: dict[int, int] = {}
    failed_roots: set[int] = set()
    roots = []
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
                live.append(child)
                for r in child.roots:
                    tree_tuples[r] += 1
        else:
            node = live.pop(rnd.randrange(len(live)))
            if rnd.random() < fail_prob:
                messages.extend(Msg("fail", r) for r in node.roots)
                failed_roots |= node.roots
            elif rnd.random() < ack_prob:
                messages.extend(Msg("ack", r, v) for r, v in ack_messages(node))
                for r in node.roots:
                    tree_acked[r] += 1
            else:
                live.append(node)
    # optionally finish: ack whatever is left
    if rnd.random() < 0.7:
        for node in live:
            messages.extend(Msg("ack", r, v) for r, v in ack_messages(node))
            for r in node.roots:
                tree_acked[r] += 1
        live.clear()
    fully_acked = {r for r in roots if tree_acked[r] == tree_tuples[r] and r not in failed_roots}
    return roots, messages, fully_acked, failed_roots


def reduce_wave(wave: list[Msg]):
    roots, xors, tasks, failed = {}, {}, {}, {}
    for m in wave:
        roots[m.root] = True
        xors[m.root] = xors.get(m.root, 0) ^ m.value
        if m.kind == "init":
            tasks[m.root] = m.task
        if m.kind == "fail":
            failed[m.root] = True
    keys = list(roots)
    return (
        np.array(keys, dtype=np.uint64),
        np.array([xors[k] for k in keys], dtype=np.uint64),
        np.array([tasks.get(k, -1) for k in keys]),
        np.array([failed.get(k, False) for k in keys]),
    )


def expected_settlement(roots, order, messages, fully_acked, failed_roots):
    """For each root, the position in ``order`` at which it must settle, and how."""
    last_msg, init_at, first_fail = {}, {}, {}
    for pos, i in enumerate(order):
        m = messages[i]
        last_msg[m.root] = pos
        if m.kind == "init":
            init_at[m.root] = pos
        if m.kind == "fail":
            first_fail.setdefault(m.root, pos)
    expect = {}
    for r in roots:
        if r in failed_roots:
            expect[r] = ("failed", max(init_at[r], first_fail[r]))
        elif r in fully_acked:
            expect[r] = ("completed", last_msg[r])
    return expect


@settings(max_examples=250, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_roots=st.integers(1, 4),
    n_steps=st.integers(0, 40),
    ack_prob=st.floats(0.3, 1.0),
    fail_prob=st.sampled_from([0.0, 0.0, 0.05, 0.2]),
    wave_cut=st.integers(1, 6),
    partitions=st.integers(1, 3),
)
def test_root_settles_exactly_when_its_tree_is_done(seed, n_roots, n_steps, ack_prob, fail_prob, wave_cut, partitions):
    roots, messages, fully_acked, failed_roots = build_dags(seed, n_roots, n_steps, ack_prob, fail_prob)
    order = list(range(len(messages)))
    random.Random(seed ^ 0x5EED).shuffle(order)  # any delivery order: acks may precede inits
    expect = expected_settlement(roots, order, messages, fully_acked, failed_roots)
    task_of = {m.root: m.task for m in messages if m.kind == "init"}

    cut = random.Random(seed ^ 0xC0DE)
    waves, pos = [], 0
    while pos < len(order):
        waves.append(list(range(pos, min(pos + cut.randint(1, wave_cut), len(order)))))
        pos = waves[-1][-1] + 1
    wave_end = {p: wave[-1] for wave in waves for p in wave}

    ledger = PartitionedLedger(partitions) if partitions > 1 else AckLedger()
    seen: dict[int, tuple[str, int]] = {}
    for wave in waves:
        outcome = ledger.merge(*reduce_wave([messages[order[p]] for p in wave]))
        for kind, settled in (("completed", outcome.completed), ("failed", outcome.failed)):
            for task, root in settled.pairs():
                assert root not in seen, f"root settled twice: {root}"
                assert task == task_of[root]
                seen[root] = (kind, wave[-1])

    assert seen == {root: (kind, wave_end[p]) for root, (kind, p) in expect.items()}


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), n_steps=st.integers(0, 30))
def test_a_fail_anywhere_fails_the_root(seed, n_steps):
    roots, messages, _, _ = build_dags(seed, 1, n_steps, 1.0, 0.0)
    root = roots[0]
    # fail one random message's tuple instead: replace a random ack with a fail of that root
    acks = [i for i, m in enumerate(messages) if m.kind == "ack"]
    if not acks:
        return
    victim = random.Random(seed).choice(acks)
    messages[victim] = Msg("fail", root)
    ledger = AckLedger()
    results = [ledger.merge(*reduce_wave([m])) for m in messages]
    assert [pair for o in results for pair in o.failed.pairs()] == [(0, root)]
    assert sum(len(o.completed) for o in results) == 0
