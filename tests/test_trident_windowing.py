"""Trident windows: Storm's TridentWindowingTest (configs and the in-memory store), the windows a partition fires
for any sequence of batches (no Spark), and a tumbling count window through the runtime."""

from hypothesis import given
from hypothesis import strategies as st
from test_trident_operations import recorded, settle

from squall import Duration, LocalCluster
from squall.trident import TridentTopology
from squall.trident.testing import CountAsAggregator, FixedBatchSpout, Split
from squall.trident.windowing import (
    InMemoryWindowsStore,
    InMemoryWindowsStoreFactory,
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    Windows,
)


def test_window_configs_have_storm_s_lengths():
    assert (TumblingCountWindow.of(9).window_length, TumblingCountWindow.of(9).sliding_length) == (9, 9)
    assert (SlidingCountWindow.of(10, 2).get_window_length(), SlidingCountWindow.of(10, 2).get_sliding_length()) == (
        10,
        2,
    )
    tumbling = TumblingDurationWindow.of(Duration.seconds(20))
    assert (tumbling.window_length, tumbling.sliding_length, tumbling.kind) == (20000, 20000, "duration")
    sliding = SlidingDurationWindow.of(Duration.seconds(50), Duration.seconds(10))
    assert (sliding.window_length, sliding.sliding_length) == (50000, 10000)


def test_the_in_memory_store_keeps_what_is_put_until_it_is_removed():
    store = InMemoryWindowsStoreFactory().create({})
    for i in range(10):
        store.put(f"key{i}", f"valuePrefix{i}")
    assert [store.get(f"key{i}") for i in range(10)] == [f"valuePrefix{i}" for i in range(10)]
    store.remove("key1")
    assert store.get("key1") is None
    assert isinstance(store, InMemoryWindowsStore)


@given(st.lists(st.integers(min_value=0, max_value=7), max_size=12), st.integers(1, 6), st.integers(1, 6))
def test_a_count_window_fires_every_slide_with_the_last_length_tuples(batch_sizes, length, slide):
    slide = min(slide, length)
    windows = Windows(SlidingCountWindow.of(length, slide), InMemoryWindowsStore())
    fired, seen = [], []
    for size in batch_sizes:
        batch = [(len(seen) + i,) for i in range(size)]
        seen.extend(batch)
        fired.extend(windows.add(batch, 0))
    expected = [seen[max(0, end - length) : end] for end in range(slide, len(seen) + 1, slide)]
    assert fired == expected


def test_a_tumbling_duration_window_fires_once_its_time_has_passed():
    windows = Windows(TumblingDurationWindow.of(Duration.milliseconds(100)), InMemoryWindowsStore())
    assert windows.add([("a",), ("b",)], 1000) == []
    assert windows.add([("c",)], 1050) == []
    assert windows.add([("d",)], 1110) == [[("a",), ("b",), ("c",)]]
    assert windows.add([], 1300) == [[("d",)]]


def test_a_tumbling_count_window_through_the_runtime(tmp_path):
    sentences = ["a b c d", "e f g", "h i", "j k l m n"]  # 14 words: windows of 3 fire four times
    topology = TridentTopology()
    (
        topology.new_stream("windowed", FixedBatchSpout(["sentence"], 1, *sentences))
        .each(["sentence"], Split(), ["word"])
        .tumbling_window(3, InMemoryWindowsStoreFactory(), ["word"], CountAsAggregator(), ["count"])
        .partition_persist(*_recorder(tmp_path / "windows.sqlite"))
    )
    with LocalCluster() as cluster:
        run = cluster.submit_topology("windows", {}, topology.build())
        settle(cluster, run)
    rows = [row for txid, rows in sorted(recorded(tmp_path / "windows.sqlite").items()) for row in rows]
    assert rows == [[3], [3], [3], [3]]


def _recorder(path):
    from test_trident_operations import RecordFactory, RecordRows

    return RecordFactory(path), ["count"], RecordRows()
