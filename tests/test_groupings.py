import subprocess
import sys
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from squall.model import (
    AllGrouping,
    DirectGrouping,
    Fields,
    FieldsGrouping,
    GlobalGrouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from squall.model.hashing import stable_hash

TARGETS = [7, 8, 9, 10]
WORD = Fields("word", "n")


def test_fields_grouping_is_stable_hash_mod_tasks():
    route = FieldsGrouping(Fields("word")).router(1, TARGETS, WORD)
    for word in ["cat", "dog", "apple", "ünïcode", ""]:
        assert route((word, 3)) == [TARGETS[stable_hash([word]) % 4]]
        assert route((word, 99)) == route((word, 3))


def test_fields_grouping_past_its_memory_of_keys_routes_the_same():
    # more distinct keys than the picker remembers: it stops remembering and hashes, and no key moves
    pick = FieldsGrouping(Fields("word")).picker(1, TARGETS, WORD)
    words = [f"word{i}" for i in range(200_000)] + ["x" * 300, "ü" * 200, "lone \ud800"]
    for _ in range(2):
        assert [pick((w, 0)) for w in words] == [TARGETS[stable_hash([w]) % 4] for w in words]
    numbers = FieldsGrouping(Fields("n")).picker(1, TARGETS, WORD)
    assert [numbers(("", i)) for i in range(70_000)] == [TARGETS[stable_hash([i]) % 4] for i in range(70_000)]


def test_fields_grouping_exact_assignments():
    # pinned values: a change here would re-route every user's keys
    # (the CRC-32 of the canonical encoding b"s3:cat", and so on)
    assert stable_hash(["cat"]) == 612146917
    assert stable_hash(["dog", 2]) == 503147180
    route = FieldsGrouping(Fields("word")).router(1, TARGETS, WORD)
    words = ["cat", "dog", "chicken", "apple", "banana"]
    assert [route((w, 0))[0] for w in words] == [8, 7, 8, 8, 7]


def test_equal_values_hash_alike():
    assert stable_hash([1]) == stable_hash([1.0]) == stable_hash([True])
    assert stable_hash([(1, "a")]) == stable_hash([[1, "a"]])
    assert stable_hash(["1"]) != stable_hash([1])
    assert stable_hash([frozenset({"a", "b"})]) == stable_hash([frozenset({"b", "a"})])


def test_stable_hash_is_the_same_in_another_process():
    values = ["cat", 12, 3.5, None, (b"x", "y")]
    code = f"from squall.model.hashing import stable_hash; print(stable_hash({values!r}))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "random")
    }
    assert outs == {str(stable_hash(values))}


def test_global_grouping_goes_to_lowest_task():
    route = GlobalGrouping().router(1, [9, 7, 8], WORD)
    assert route(("a", 1)) == [7] and route(("b", 2)) == [7]


def test_all_grouping_goes_to_every_task():
    assert AllGrouping().router(1, [9, 7, 8], WORD)(("a", 1)) == [7, 8, 9]


def test_direct_grouping_refuses_plain_emits():
    route = DirectGrouping().router(1, TARGETS, WORD)
    try:
        route(("a", 1))
    except ValueError as exc:
        assert "emit_direct" in str(exc)
    else:
        raise AssertionError("direct grouping accepted a plain emit")


@given(source=st.integers(1, 1000), n=st.integers(1, 200))
def test_shuffle_is_balanced_and_reproducible(source, n):
    for grouping in (ShuffleGrouping(), NoneGrouping(), LocalOrShuffleGrouping()):
        route = grouping.router(source, TARGETS, WORD)
        picks = [route(("w", i))[0] for i in range(n)]
        counts = Counter(picks)
        assert set(counts) <= set(TARGETS)
        full, rest = divmod(n, len(TARGETS))
        assert sorted(counts.get(t, 0) for t in TARGETS) == sorted([full + 1] * rest + [full] * (len(TARGETS) - rest))
        again = grouping.router(source, TARGETS, WORD)
        assert [again(("w", i))[0] for i in range(n)] == picks


def test_a_strings_quick_hash_is_the_crc_of_its_canonical_encoding():
    import zlib

    from squall.model.hashing import stable_bytes

    for word in ["cat", "", "ünïcode", "\ud800lone surrogate", "x" * 255, "y" * 256, "z" * 1000]:
        assert stable_hash([word]) == zlib.crc32(stable_bytes([word])), word
