"""squall's ``WindowManager`` finds windows by position; Storm's scans its queue. On any in-order stream of
events, firings and watermarks, both hand the listener the same windows, new and expired events and expiries."""

from __future__ import annotations

import sys

from hypothesis import event as note_event
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.time import simulated_time
from squall.windowing import (
    Action,
    CountEvictionPolicy,
    CountTriggerPolicy,
    Event,
    TimeEvictionPolicy,
    TimeTriggerPolicy,
    WatermarkCountEvictionPolicy,
    WatermarkCountTriggerPolicy,
    WatermarkEvent,
    WatermarkTimeEvictionPolicy,
    WatermarkTimeTriggerPolicy,
    WindowManager,
)


class StormWindowManager:
    """Storm's ``WindowManager``, line by line: a queue in arrival order, scanned on each firing."""

    def __init__(self, listener):
        self.listener, self.queue, self.expired, self.previous, self.since = listener, [], [], set(), 0

    def set_eviction_policy(self, policy):
        self.eviction_policy = policy

    def set_trigger_policy(self, policy):
        self.trigger_policy = policy

    def add_event(self, event):
        if not event.is_watermark:
            self.queue.append(event)
        self.eviction_policy.track(event)
        self.trigger_policy.track(event)
        self.since += 1
        if self.since >= 100:  # Storm's EXPIRE_EVENTS_THRESHOLD
            self.scan(False)

    def on_trigger(self):
        window = self.scan(True)
        expired, self.expired = self.expired, []
        events = [e.value for e in window]
        new = [e.value for e in window if e not in self.previous]
        self.previous = set(window) if events else set()
        if events:
            self.listener.on_activation(events, new, expired, self.eviction_policy.context.reference_time)
        self.trigger_policy.reset()
        return bool(events)

    def scan(self, full):
        to_expire, to_process, kept = [], [], []
        for i, event in enumerate(self.queue):
            action = self.eviction_policy.evict(event)
            if action is Action.EXPIRE:
                to_expire.append(event.value)
                continue
            kept.append(event)
            if not full or action is Action.STOP:
                kept.extend(self.queue[i + 1 :])
                break
            if action is Action.PROCESS:
                to_process.append(event)
        self.queue = kept
        self.expired.extend(to_expire)
        self.since = 0
        if to_expire:
            self.listener.on_expiry(to_expire)
        return to_process

    def get_event_count(self, reference_time):
        return sum(1 for e in self.queue if e.timestamp <= reference_time)

    def get_earliest_event_ts(self, start, end):
        return min((e.timestamp for e in self.queue if start < e.timestamp <= end), default=sys.maxsize)

    def get_sliding_count_timestamps(self, start, end, sliding_count):
        timestamps, count, ts = [], 0, -sys.maxsize
        if end > start:
            for e in self.queue:
                if start < e.timestamp <= end:
                    ts = max(ts, e.timestamp)
                    count += 1
                    if count % sliding_count == 0:
                        timestamps.append(ts)
        return timestamps


class Log:
    def __init__(self):
        self.calls = []

    def on_expiry(self, events):
        self.calls.append(("expiry", list(events)))

    def on_activation(self, events, new, expired, reference_time):
        self.calls.append(("activation", list(events), list(new), list(expired), reference_time))


def policies(kind, manager, length, slide, lag):
    if kind == "count/count":
        eviction = CountEvictionPolicy(length)
        return eviction, CountTriggerPolicy(slide, manager, eviction)
    if kind == "time/count":
        eviction = TimeEvictionPolicy(length * 10)
        return eviction, CountTriggerPolicy(slide, manager, eviction)
    if kind == "count/time":
        eviction = CountEvictionPolicy(length)
        return eviction, TimeTriggerPolicy(slide * 10, manager, eviction)
    if kind == "time/time":
        eviction = TimeEvictionPolicy(length * 10)
        return eviction, TimeTriggerPolicy(slide * 10, manager, eviction)
    if kind == "event-time/time":
        eviction = WatermarkTimeEvictionPolicy(length * 10, lag)
        return eviction, WatermarkTimeTriggerPolicy(slide * 10, manager, eviction, manager)
    eviction = WatermarkCountEvictionPolicy(length)
    return eviction, WatermarkCountTriggerPolicy(slide, manager, eviction, manager)


def replay(manager_class, kind, length, slide, lag, steps):
    log = Log()
    manager = manager_class(log)
    eviction, trigger = policies(kind, manager, length, slide, lag)
    manager.set_eviction_policy(eviction)
    manager.set_trigger_policy(trigger)
    trigger.start()
    now, value = 1000, 0
    for step, amount in steps:
        with simulated_time(now / 1000):
            if step == "add":
                now += amount
                value += 1
                manager.add_event(Event(value, now))
            elif step == "fire" and isinstance(trigger, TimeTriggerPolicy):
                trigger.run(now)
            elif step == "watermark":
                manager.add_event(WatermarkEvent(now - amount))
    return log.calls


KINDS = ["count/count", "time/count", "count/time", "time/time", "event-time/time", "event-time/count"]


STEP = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 40)),
    st.tuples(st.just("add"), st.integers(0, 5)),
    st.tuples(st.just("fire"), st.just(0)),
    st.tuples(st.just("watermark"), st.integers(0, 120)),
)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    length=st.integers(1, 30),
    slide=st.one_of(st.integers(1, 12), st.integers(90, 150)),  # a long slide: expiries between firings
    lag=st.integers(0, 100),
    steps=st.lists(STEP, min_size=150, max_size=500),
)
def test_windows_match_storms_scanning_window_manager(kind, length, slide, lag, steps):
    calls = replay(WindowManager, kind, length, slide, lag, steps)
    assert calls == replay(StormWindowManager, kind, length, slide, lag, steps)
    note_event(f"{kind}: {'windows fired' if any(c[0] == 'activation' for c in calls) else 'no window'}")
