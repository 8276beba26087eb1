"""Storm's windows of the web UI's figures (``squall.ui.history``), on simulated time: a ring of per-interval
buckets per window sums exactly what was added within it, and the charts get one point per interval."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from squall.ui.history import ALL_TIME, RunHistory, WindowRing


def test_a_window_sums_its_buckets_and_forgets_what_is_older_than_its_span():
    ring = WindowRing(600, 60)  # buckets of 10 s
    ring.add(0, {"acked": 5})
    ring.add(9.9, {"acked": 1, "failed": 2})  # the same bucket
    ring.add(10, {"acked": 3})
    assert ring.sums(10) == {"acked": 9, "failed": 2}
    assert ring.sums(599.9) == {"acked": 9, "failed": 2}  # bucket 0 is still within the window
    assert ring.sums(600) == {"acked": 3}  # bucket 0 ended 600 s before the current one does
    assert ring.sums(610) == {}
    ring.add(1000, {"acked": 7, "failed": 0})  # a zero changes nothing
    assert ring.sums(1000) == {"acked": 7}


def test_time_going_back_adds_to_the_newest_bucket():
    ring = WindowRing(60, 6)
    ring.add(100, {"n": 1})
    ring.add(50, {"n": 2})
    assert ring.sums(100) == {"n": 3}


events = st.lists(
    st.tuples(st.floats(min_value=0, max_value=400, allow_nan=False), st.integers(min_value=0, max_value=1000)),
    max_size=80,
)


@given(events, st.floats(min_value=0, max_value=200, allow_nan=False))
def test_a_window_holds_exactly_what_was_added_in_its_buckets(steps, then):
    """Whatever the times: the sum is that of every add in the last ``buckets`` buckets, so it holds all that was
    added within ``span - width`` seconds and nothing older than ``span``."""
    span, buckets = 120.0, 12  # width 10 s
    ring = WindowRing(span, buckets)
    now, added = 0.0, []
    for gap, n in steps:
        now += gap
        ring.add(now, {"n": n})
        added.append((now, n))
    now += then
    current = int(now // 10)
    expected = sum(n for at, n in added if int(at // 10) > current - buckets)
    assert ring.sums(now).get("n", 0) == expected
    assert expected >= sum(n for at, n in added if at > now - (span - 10))
    assert expected <= sum(n for at, n in added if at > now - span)


def chart(growth, seconds):
    return {"acked": growth.get("acked", 0) / seconds}


def test_a_run_history_keeps_every_window_all_time_and_a_chart_point_per_second():
    history = RunHistory(chart, points=3)
    history.sample(1000.0, {"acked": 10}, {"pendingTrees": 4})  # the first: the charts start here
    assert history.points_after() == []
    history.sample(1000.5, {"acked": 12}, {"pendingTrees": 3})  # too soon for a point; the windows take it
    history.sample(1002.0, {"acked": 30}, {"pendingTrees": 1})
    assert history.points_after() == [{"time": 1002.0, "acked": 10.0, "pendingTrees": 1}]
    windows = history.windows(1002.0)
    assert windows["600"] == windows["10800"] == windows["86400"] == {"acked": 30}
    assert windows[ALL_TIME.key] == {"acked": 30}

    history.sample(1700.0, {"acked": 31}, {"pendingTrees": 0})  # 11 minutes on: the 10-minute window moved
    windows = history.windows(1700.0)
    assert (windows["600"], windows["10800"], windows["all"]) == ({"acked": 1}, {"acked": 31}, {"acked": 31})
    assert history.points_after(1002.0) == [{"time": 1700.0, "acked": 1 / 698, "pendingTrees": 0}]
    for t in (1701.0, 1702.0, 1703.0):  # only the last 3 points are kept
        history.sample(t, {"acked": 31}, {"pendingTrees": 0})
    assert [p["time"] for p in history.points_after()] == [1701.0, 1702.0, 1703.0]


@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=100))
def test_the_windows_of_samples_a_second_apart_add_up_to_the_totals(growths):
    """Cumulative totals sampled once a second for less than 10 minutes: every window holds them all."""
    history, total = RunHistory(chart), 0
    for second, grown in enumerate(growths):
        total += grown
        history.sample(float(second), {"acked": total}, {})
    windows = history.windows(float(len(growths)))
    assert {key: sums.get("acked", 0) for key, sums in windows.items()} == dict.fromkeys(windows, total)
    assert len(history.points_after()) == len(growths) - 1
