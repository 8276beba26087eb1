"""How waves size themselves: toward the target time at the rate the last waves ran, growing only after full
waves and at most fourfold, shrinking after long ones and at most by half, never past the cap, and small enough
that the workers' inboxes stay under ``squall.worker.inbox.max.bytes``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from squall.spark.sizing import BUFFER_HEADROOM, BYTES_WINDOW, INITIAL_CALLS, WaveSizer

TARGET = 0.2


def complete(sizer: WaveSizer, wave: int, emits: int, seconds: float, inbox_peak: int = 0) -> int:
    sizer.sent(wave, emits)
    sizer.completed(wave, seconds, inbox_peak)
    return sizer.calls_per_spout_task()


def test_it_starts_small_and_never_above_the_cap():
    assert WaveSizer(TARGET, 20_000).calls_per_spout_task() == INITIAL_CALLS == 64
    assert WaveSizer(TARGET, 10).calls_per_spout_task() == 10


def test_a_full_quick_wave_grows_the_size_at_most_fourfold():
    sizer = WaveSizer(TARGET, 20_000)
    assert complete(sizer, 1, 64, 0.001) == 256  # at its rate the target holds 12,800 calls
    assert complete(sizer, 2, 256, 0.001) == 1024


def test_a_full_wave_grows_toward_what_the_target_holds_at_its_rate():
    sizer = WaveSizer(TARGET, 20_000)
    assert complete(sizer, 1, 64, 0.1) == 128  # 64 in 0.1 s: 128 in the target


def test_growth_stops_at_the_cap():
    sizer = WaveSizer(TARGET, 1000)
    sizes = [complete(sizer, wave, sizer.calls_per_spout_task(), 0.001) for wave in range(1, 6)]
    assert sizes == [256, 1000, 1000, 1000, 1000]


def test_a_wave_that_is_not_full_does_not_grow_it():
    sizer = WaveSizer(TARGET, 20_000)
    assert complete(sizer, 1, 10, 0.001) == 64  # the spouts had no more to give


def test_a_long_wave_shrinks_it_at_most_by_half():
    sizer = WaveSizer(TARGET, 20_000, window=1)
    sizer.size = 1000
    assert complete(sizer, 1, 1000, 10.0) == 500  # at its rate the target holds 20: halved, no more
    assert complete(sizer, 2, 500, 0.5) == 250
    assert complete(sizer, 3, 250, 0.25) == 200  # 250 in 0.25 s: 200 in the target


def test_two_waves_in_flight_together_count_as_one_run_of_work():
    """The first of two waves run together completes after their whole time, the second just after it: their
    rate is the two together, so a pair within the target keeps the cap."""
    sizer = WaveSizer(TARGET, 20_000)
    sizer.size = 20_000
    sizes = []
    for wave in range(1, 13, 2):
        sizes.append(complete(sizer, wave, 20_000, 0.27))
        sizes.append(complete(sizer, wave + 1, 20_000, 0.017))
    assert sizes[0] == 14_814  # the first long wave alone: 20,000 in 0.27 s
    assert sizes[1:] == [20_000] * 11


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=50_000), st.floats(min_value=1e-4, max_value=5.0)),
        max_size=40,
    ),
    st.integers(min_value=1, max_value=30_000),
)
def test_each_wave_moves_the_size_within_its_bounds(waves, cap):
    sizer = WaveSizer(TARGET, cap)
    for wave, (emits, seconds) in enumerate(waves, 1):
        before = sizer.calls_per_spout_task()
        after = complete(sizer, wave, emits, seconds)
        assert 1 <= after <= max(cap, before)
        if seconds > TARGET:
            assert before // 2 <= after <= before
        elif emits >= before:
            assert before <= after <= max(before, min(cap, 4 * before))
        else:
            assert after == before


def test_a_wave_whose_inboxes_held_too_much_shrinks_the_next_to_fit_the_bound():
    """A bolt that emits a megabyte for each spout call: two waves of 64 calls in flight held 128 MB, against a
    bound of 16 MB; the next waves get 80% of 16 MB's worth, 6 calls (two in flight: 12 MB)."""
    sizer = WaveSizer(TARGET, 20_000, inbox_max_bytes=16_000_000)
    assert complete(sizer, 1, 64, 0.001, inbox_peak=2 * 64 * 1_000_000) == 6
    assert complete(sizer, 2, 6, 0.001, inbox_peak=2 * 6 * 1_000_000) == 6  # full and quick: no growth past it
    # Calls that bring half as much: the most a call brought in the last waves still holds it, then it grows.
    sizes = [complete(sizer, wave, 6, 0.001, inbox_peak=2 * 6 * 500_000) for wave in range(3, 3 + BYTES_WINDOW)]
    assert sizes == [6] * (BYTES_WINDOW - 1) + [12]  # the first two waves out of the window: 12


def test_under_the_bound_the_inboxes_do_not_change_the_size():
    sizer, bounded = WaveSizer(TARGET, 20_000), WaveSizer(TARGET, 20_000, inbox_max_bytes=10**9)
    for wave in range(1, 8):
        emits = sizer.calls_per_spout_task()
        assert complete(sizer, wave, emits, 0.05) == complete(bounded, wave, emits, 0.05, inbox_peak=emits * 100)


def test_one_spout_call_is_the_least_a_wave_gets():
    sizer = WaveSizer(TARGET, 20_000, inbox_max_bytes=1_000_000)
    assert complete(sizer, 1, 64, 0.001, inbox_peak=10**12) == 1


@given(
    st.lists(st.integers(min_value=1, max_value=5_000_000), min_size=1, max_size=30),
    st.integers(min_value=1024, max_value=10**9),
    st.integers(min_value=1, max_value=30_000),
)
def test_waves_size_so_that_inboxes_that_scale_with_them_stay_under_the_bound(bytes_per_call, bound, cap):
    """Whatever each spout call brings to the inboxes (two waves in flight), the size after a wave is such that
    two waves of it at that wave's bytes a call fit in the bound's headroom, unless it is a single call."""
    sizer = WaveSizer(TARGET, cap, inbox_max_bytes=bound)
    for wave, per_call in enumerate(bytes_per_call, 1):
        size = sizer.calls_per_spout_task()
        after = complete(sizer, wave, size, 0.001, inbox_peak=2 * size * per_call)
        assert 1 <= after <= max(1, cap)
        assert after == 1 or 2 * after * per_call <= bound * BUFFER_HEADROOM


def test_a_waves_bytes_a_call_are_counted_over_the_calls_it_went_out_with():
    """Waves 1 and 2 go out with 64 calls; wave 1 completes full and quick, so the size grows, before wave 2
    completes. The bytes wave 2 brought are a megabyte over its own 64 calls, not over the grown size, which would
    have understated them fourfold and let the next waves overfill the inboxes."""
    sizer = WaveSizer(TARGET, 20_000, inbox_max_bytes=16_000_000)
    sizer.sized(1, 64)
    sizer.sized(2, 64)
    assert complete(sizer, 1, 64, 0.001) == 256  # full and quick: the size grows
    sizer.sized(3, 256)
    assert complete(sizer, 2, 64, 0.001, inbox_peak=64 * 1_000_000) == int(16_000_000 * BUFFER_HEADROOM / 1_000_000)


def test_a_wave_whose_spouts_emitted_less_than_their_calls_is_dry():
    """The loop pauses ``squall.wave.dry.pause.ms`` after such a wave, as Storm's spout waits when ``next_tuple``
    emits nothing; a full wave goes on at once."""
    sizer = WaveSizer(TARGET, 20_000)
    sizer.sized(1, INITIAL_CALLS)
    complete(sizer, 1, INITIAL_CALLS - 1, 0.01)
    assert sizer.dry
    sizer.sized(2, INITIAL_CALLS)
    complete(sizer, 2, INITIAL_CALLS, 0.01)
    assert not sizer.dry
