"""The four C helpers (``_keyhash``, ``_atomic``, ``_xor_fold``, ``_acker_merge``) and the plain Python that runs
where they are not built (a pure-Python install) give identical results.

Each caller imports its helper in a ``try``, and takes its Python path when the name is None: the tests compare
the caller's results with the helper, then with the name set to None."""

import json
import subprocess
import sys
import zlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.model import groupings, hashing
from squall.model.fields import Fields
from squall.reliability import acker, acks
from squall.reliability.acker import Acker, Acks, Init, Rotate, Withdraw
from squall.reliability.acks import AckBatch
from squall.spark import bolt_task

HELPERS = [
    "squall.model._keyhash",
    "squall.spark._atomic",
    "squall.reliability._xor_fold",
    "squall.reliability._acker_merge",
]

KEYS = [
    "",
    "a",
    "the cow jumped over the moon",
    "naïve café",
    "日本語のテキスト",
    "emoji 🐄",
    "\ud800",  # a lone surrogate: no UTF-8 form
    "lone \udfff in the middle",
    "x" * 255,  # the longest key whose length prefix is looked up
    "x" * 256,
    "é" * 127 + "a",  # 255 UTF-8 bytes in 128 characters
    "é" * 128,  # 256 UTF-8 bytes
    "y" * 10_000,
]


def hashes_and_targets(keys: list[str]) -> tuple[list[int], list[int]]:
    """Each key's ``stable_str_hash``, and its task under a fields grouping over 7 tasks."""
    pick = groupings.FieldsGrouping(Fields(["word"])).picker(0, [3, 5, 8, 13, 21, 34, 55], Fields(["word"]))
    return [hashing.stable_str_hash(k) for k in keys], [pick([k]) for k in keys]


def test_key_hashes_and_fields_grouping_picks_match_without_the_keyhash_helper(monkeypatch):
    pytest.importorskip("squall.model._keyhash")
    assert hashing._str_crc is not None and groupings._str_pick is not None
    compiled = hashes_and_targets(KEYS)
    monkeypatch.setattr(hashing, "_str_crc", None)
    monkeypatch.setattr(groupings, "_str_pick", None)
    assert hashes_and_targets(KEYS) == compiled
    assert compiled[0] == [zlib.crc32(hashing.stable_bytes([k])) for k in KEYS]  # the hash stable_hash defines


@given(st.lists(st.text(max_size=300), max_size=20))
def test_any_string_hashes_alike_with_and_without_the_keyhash_helper(keys):
    pytest.importorskip("squall.model._keyhash")
    compiled = hashes_and_targets(keys)
    saved = hashing._str_crc, groupings._str_pick
    hashing._str_crc = groupings._str_pick = None
    try:
        assert hashes_and_targets(keys) == compiled
    finally:
        hashing._str_crc, groupings._str_pick = saved


class Word(str):
    pass


CONTAINERS = [
    {},
    [],
    set(),
    {"a": 1, "b": 2.5, "c": None, "d": b"x", "e": True},
    {1: "one", 2.0: "two", None: 3, b"k": False},
    Counter({"the": 3, "cow": 1}),
    Counter({"the": 3, "cow": (1, 2)}),
    {"a": [1]},
    {("a", "b"): 1},
    {"a": 1, "b": 2, "c": {"nested": 1}},
    {Word("subclass"): 1},
    {"a": Word("subclass")},
    {"a": np.int64(1)},
    {"a": bytearray(b"x")},
    ["a", 1, 2.0, None, b"x", False],
    ["a", [1]],
    ["a", Word("b")],
    [np.float64(1.0)],
    {"a", 1, 2.5, None, b"x"},
    {"a", (1, 2)},
    {"a", frozenset([1])},
    dict.fromkeys(map(str, range(5000)), 1),
    [*range(5000), "last", object()],
]


def plain_flags() -> list[bool]:
    return [bolt_task._plain(value) for value in CONTAINERS]


def test_a_snapshots_atomic_scan_matches_without_the_atomic_helper(monkeypatch):
    pytest.importorskip("squall.spark._atomic")
    assert bolt_task._dict_atomic is not None and bolt_task._items_atomic is not None
    compiled = plain_flags()
    monkeypatch.setattr(bolt_task, "_dict_atomic", None)
    monkeypatch.setattr(bolt_task, "_items_atomic", None)
    assert plain_flags() == compiled
    assert compiled == [True] * 6 + [False] * 8 + [True] + [False] * 3 + [True] + [False] * 2 + [True, False]


def ack_batches() -> list[tuple[list[int], list[int]]]:
    """Folded roots and values of ack rows: a few rows, many repeated roots, runs of one root, and more distinct
    roots than the C table holds at first (it grows), one size after another (it keeps its table between calls)."""
    rng = np.random.default_rng(7)
    batches = []
    for rows, distinct in [(1, 1), (10, 3), (1000, 200), (5000, 5000), (100_000, 60_000), (3000, 2000), (8, 8)]:
        roots = rng.integers(1, 2**64, distinct, dtype=np.uint64, endpoint=False)[rng.integers(0, distinct, rows)]
        xors = rng.integers(0, 2**64, rows, dtype=np.uint64, endpoint=False)
        batches.append((roots, xors))
    runs = np.repeat(np.array([5, 9, 5, 2**63 + 1], np.uint64), [4, 3, 2, 5])  # runs fold first, then by root
    batches.append((runs, np.arange(1, len(runs) + 1, dtype=np.uint64)))
    folded = []
    for roots, xors in batches:
        batch = AckBatch.reduce(roots, xors)
        assert batch.roots.dtype == batch.xors.dtype == np.uint64
        assert not batch.failed.any() and not batch.reset.any()
        folded.append((batch.roots.tolist(), batch.xors.tolist()))
    return folded


def test_acks_fold_per_root_alike_without_the_xor_fold_helper(monkeypatch):
    pytest.importorskip("squall.reliability._xor_fold")
    assert acks._xor_fold is not None
    compiled = ack_batches()
    monkeypatch.setattr(acks, "_xor_fold", None)
    assert ack_batches() == compiled
    assert compiled[-1] == ([5, 9, 2**63 + 1], [1 ^ 2 ^ 3 ^ 4 ^ 8 ^ 9, 5 ^ 6 ^ 7, 10 ^ 11 ^ 12 ^ 13 ^ 14])
    assert [len(roots) for roots, _ in compiled[:2]] == [1, 3]


def test_acks_split_by_acker_task_alike_without_the_split_helper(monkeypatch):
    pytest.importorskip("squall.reliability._xor_fold")
    rng = np.random.default_rng(3)
    roots = rng.integers(1, 2**64, 500, dtype=np.uint64, endpoint=False)
    kinds = rng.integers(0, 3, 500)
    batch = AckBatch.from_messages(roots, rng.integers(0, 2**64, 500, dtype=np.uint64, endpoint=False), kinds)
    one_acker = AckBatch.reduce((roots >> np.uint64(2)) * np.uint64(3), np.ones(500, np.uint64))  # multiples of 3

    # columns of other dtypes, as a batch built by hand may hold: read as the fallback reads them
    loose = AckBatch(
        batch.roots[::-1].astype(np.int64) & 0xFFFF, batch.xors[::-1], batch.failed.astype(int), batch.reset[::-1]
    )

    def parts() -> list:
        return [
            [(p.roots.tolist(), p.xors.tolist(), p.failed.tolist(), p.reset.tolist()) for p in b.by_partition(n)]
            for b, n in [(batch, 2), (batch, 3), (one_acker, 3), (AckBatch.empty(), 2), (loose, 2)]
        ]

    compiled = parts()
    assert [len(p[0]) for p in compiled[2]] == [len(one_acker), 0, 0]
    empty_part = one_acker.by_partition(3)[1]  # shared by every empty part: nobody may write into it
    assert not any(c.flags.writeable for c in (empty_part.roots, empty_part.xors, empty_part.failed, empty_part.reset))
    with pytest.raises(ValueError, match="0 acker tasks"):
        batch.by_partition(0)
    monkeypatch.setattr(acks, "_split_by_partition", None)
    assert parts() == compiled


ROOTS = st.integers(1, 24).map(lambda r: r * 0x9E3779B97F4A7C15 % 2**64)  # few, so that entries meet again
MANY_ROOTS = st.integers(1, 400).map(lambda r: r * 0x9E3779B97F4A7C15 % 2**64)
# (root, value, spout task or -1 for none, failed, reset): few rows, or more than the C merge sorts by qsort
ROWS = st.lists(st.tuples(ROOTS, st.integers(0, 3), st.integers(-1, 2), st.booleans(), st.booleans()), max_size=12)
MANY_ROWS = st.lists(
    st.tuples(MANY_ROOTS, st.integers(0, 3), st.integers(-1, 2), st.booleans(), st.booleans()),
    min_size=65,
    max_size=150,
)
ACKER_EVENTS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["init", "acks", "withdraw"]), ROWS | MANY_ROWS),
        st.tuples(st.just("rotate"), st.just([])),
    ),
    max_size=40,
)


def run_acker(events: list, compiled: bool) -> list:
    """Everything an acker says and holds as ``events`` go in: each event's settlement (its roots, tasks and how,
    in order), and after each, the acker's two runs, column for column."""
    saved = acker._merge_in_c
    if not compiled:
        acker._merge_in_c = None
    try:
        subject, seen = Acker(num_buckets=2), []
        for kind, rows in events:
            unique = list(
                {root: (root, value, task, failed, reset) for root, value, task, failed, reset in rows}.values()
            )
            roots = np.array([r[0] for r in unique], np.uint64)
            values = np.array([r[1] for r in unique], np.uint64)
            if kind == "init":
                event = Init(roots, values, np.array([r[2] for r in unique], np.int64))
            elif kind == "rotate":
                event = Rotate()
            else:
                batch = AckBatch(
                    roots, values, np.array([r[3] for r in unique], bool), np.array([r[4] for r in unique], bool)
                )
                event = Acks(batch) if kind == "acks" else Withdraw(batch)
            out = subject.handle(event)
            seen.append((out.roots.tolist(), out.tasks.tolist(), out.how.tolist(), len(subject)))
            seen.append([[c.tolist() for c in run.columns()] for run in (subject._main, subject._delta)])
        return seen
    finally:
        acker._merge_in_c = saved


@settings(max_examples=300, deadline=None)
@given(ACKER_EVENTS)
def test_an_acker_settles_and_holds_alike_without_the_merge_helper(events):
    pytest.importorskip("squall.reliability._acker_merge")
    saved = acker._MIN_COMPACTION
    acker._MIN_COMPACTION = 2  # the runs compact often, so both paths meet fresh mains, tombstones and deltas
    try:
        assert run_acker(events, compiled=True) == run_acker(events, compiled=False)
    finally:
        acker._MIN_COMPACTION = saved


def test_the_merge_helper_rejects_what_the_numpy_path_rejects(monkeypatch):
    pytest.importorskip("squall.reliability._acker_merge")
    twice = Init(np.array([5, 5], np.uint64), np.array([1, 2], np.uint64), np.array([0, 0]))
    bad_task = Init(np.array([5, 6], np.uint64), np.array([1, 2], np.uint64), np.array([0, 70_000]))
    short = Init(np.array([5, 6], np.uint64), np.array([1], np.uint64), np.array([0, 0]))
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(acker, "_merge_in_c", None)
        with pytest.raises(ValueError, match="one row per root"):
            Acker().handle(twice)
        with pytest.raises(ValueError, match="spout task id 70000 is outside"):
            Acker().handle(bad_task)
        with pytest.raises(ValueError, match="differ in length"):
            Acker().handle(short)


PROBE = """
import json, sys
for name in {helpers!r}:
    sys.modules[name] = None  # an import of it raises ImportError, as where it was never built
from squall.model import groupings, hashing
from squall.model.fields import Fields
from squall.reliability.acks import AckBatch, _xor_fold
from squall.reliability.acker import ACKED, Acker, Acks, Init, _merge_in_c
from squall.spark import bolt_task
import numpy as np
assert hashing._str_crc is None and groupings._str_pick is None and _xor_fold is None and _merge_in_c is None
assert bolt_task._dict_atomic is None and bolt_task._items_atomic is None
pick = groupings.FieldsGrouping(Fields(["w"])).picker(0, [1, 2, 3], Fields(["w"]))
batch = AckBatch.reduce(np.array([4, 6, 4, 8], np.uint64), np.array([1, 2, 4, 8], np.uint64))
tree = Acker()
tree.handle(Init(batch.roots, batch.xors, np.array([0, 1, 2])))
settled = tree.handle(Acks(batch))
assert settled.pairs(ACKED) == [(0, 4), (1, 6), (2, 8)] and len(tree) == 0
print(json.dumps([
    [hashing.stable_str_hash(k) for k in {keys!r}], [pick([k]) for k in {keys!r}],
    bolt_task._plain({{"a": 1}}), bolt_task._plain(["a", [1]]), batch.roots.tolist(), batch.xors.tolist(),
]))
"""


def test_squall_imports_and_runs_where_the_helpers_were_never_built():
    keys = ["the", "naïve", "\ud800", "z" * 300]
    pick = groupings.FieldsGrouping(Fields(["w"])).picker(0, [1, 2, 3], Fields(["w"]))
    probe = PROBE.format(helpers=HELPERS, keys=keys)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [
        [hashing.stable_str_hash(k) for k in keys],
        [pick([k]) for k in keys],
        True,
        False,
        [4, 6, 8],
        [1 ^ 4, 2, 8],
    ]
