import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rotating_map import RotatingMap


def test_needs_two_buckets():
    with pytest.raises(ValueError, match="num_buckets must be an int >= 2"):
        RotatingMap(1)


def test_put_get_contains_remove_size():
    m = RotatingMap(3)
    m.put("a", 1)
    m.put("b", 2)
    assert m.get("a") == 1 and m.contains("b") and "b" in m and m.size() == 2
    assert m.remove("a") == 1
    assert m.get("a") is None and not m.contains("a") and len(m) == 1
    assert m.remove("missing") is None


def test_entry_expires_on_the_num_buckets_th_rotate_after_its_last_put():
    m = RotatingMap(3)
    m.put("k", "v")
    assert m.rotate() == {}
    assert m.rotate() == {}
    assert m.rotate() == {"k": "v"}
    assert "k" not in m


def test_put_moves_key_to_newest_bucket_and_out_of_the_others():
    m = RotatingMap(2)
    m.put("k", 1)
    m.rotate()
    assert m.bucket_of("k") == 1
    m.put("k", 2)
    assert m.bucket_of("k") == 0 and m.size() == 1
    assert m.rotate() == {}
    assert m.rotate() == {"k": 2}


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 9)),
        st.tuples(st.just("remove"), st.integers(0, 9)),
        st.tuples(st.just("rotate"), st.just(0)),
    ),
    max_size=200,
)


@settings(max_examples=300)
@given(num_buckets=st.integers(2, 6), ops=ops)
def test_expiry_follows_storms_schedule(num_buckets, ops):
    """Against a reference: a key expires exactly num_buckets rotations after its last put."""
    m = RotatingMap(num_buckets)
    last_put: dict[int, int] = {}
    rotations = 0
    for op, key in ops:
        if op == "put":
            m.put(key, rotations)
            last_put[key] = rotations
        elif op == "remove":
            assert m.remove(key) == last_put.pop(key, None)
        else:
            rotations += 1
            expected = {k: v for k, v in last_put.items() if rotations - v == num_buckets}
            assert m.rotate() == expected
            for k in expected:
                del last_put[k]
        assert m.size() == len(last_put)
        for k, v in last_put.items():
            assert m.get(k) == v and m.bucket_of(k) == rotations - v
