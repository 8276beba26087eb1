"""The driver's rules for completing waves, driven as event lists: reports in any order, restarts in between.

``WaveBook`` is pure: these tests hand it ``WaveSent``, ``TaskReported``, ``SpoutsReported`` and
``GenerationStarted`` events and check every instruction it returns against the rules, and that every spout
report delivered counts once: with its completed wave, or as ``SpoutsUncounted``.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from squall.spark.wave_book import (
    CommitDue,
    GenerationStarted,
    SpoutsReported,
    SpoutsUncounted,
    TaskReported,
    WaveBook,
    WaveCompleted,
    WaveSent,
)

TASKS = frozenset({1, 2, 3})


class WaveBookMachine(RuleBasedStateMachine):
    @initialize(spout_workers=st.sets(st.integers(0, 1), max_size=2))
    def start(self, spout_workers: set[int]) -> None:
        self.book = WaveBook()
        self.spout_workers = frozenset(spout_workers)
        self.generation = 0
        self.next_wave = 1
        self.in_flight: dict[int, bool] = {}  # wave -> replay, in the model
        self.reported: dict[int, set] = {}  # wave -> (kind, who) reported in this generation
        self.undelivered: list[TaskReported | SpoutsReported] = []  # reports on the way, any generation
        self.completed: list[int] = []
        self.last_commit = 0
        self.spout_reports_delivered: list[str] = []
        self.spout_reports_counted: list[str] = []  # with a completed wave, or as SpoutsUncounted
        self._restart()

    def _restart(self) -> None:
        self.generation += 1
        self._count(self.book.handle(GenerationStarted(self.generation, TASKS, self.spout_workers)))
        self.in_flight.clear()  # dropped: what runs again is sent again
        self.reported = {}
        # every spout report delivered so far was for a wave now completed or dropped: each counted, once
        assert sorted(self.spout_reports_counted) == sorted(self.spout_reports_delivered)

    def _count(self, due: list) -> None:
        for instruction in due:
            if isinstance(instruction, SpoutsUncounted):
                self.spout_reports_counted += instruction.spout_reports
            elif isinstance(instruction, WaveCompleted):
                self.spout_reports_counted += instruction.spout_reports.values()

    def _reports_for(self, wave: int) -> None:
        self.undelivered += [TaskReported(self.generation, wave, t, f"task {t} of {wave}") for t in TASKS]
        self.undelivered += [
            SpoutsReported(self.generation, wave, w, f"spouts {w} of {wave} in {self.generation}")
            for w in self.spout_workers
        ]

    @rule(replay=st.booleans())
    def send_a_wave(self, replay: bool) -> None:
        wave, self.next_wave = self.next_wave, self.next_wave + 1
        assert self.book.handle(WaveSent(wave, f"flight {wave}", replay)) == []
        self.in_flight[wave] = replay
        self.reported[wave] = set()
        self._reports_for(wave)

    @rule(data=st.data())
    def a_report_arrives(self, data) -> None:
        if not self.undelivered:
            return
        event = self.undelivered.pop(data.draw(st.integers(0, len(self.undelivered) - 1)))
        due = self.book.handle(event)
        self._count(due)
        if isinstance(event, SpoutsReported):
            self.spout_reports_delivered.append(event.report)
        assert len(set(self.spout_reports_counted)) == len(self.spout_reports_counted), "a report counted twice"
        if event.generation != self.generation:
            expected = [SpoutsUncounted([event.report])] if isinstance(event, SpoutsReported) else []
            assert due == expected, "a report of an older generation completed something, or did not count"
            return
        due = [i for i in due if not isinstance(i, SpoutsUncounted)]  # a replayed wave's: counted above
        who = ("task", event.task) if isinstance(event, TaskReported) else ("spouts", event.worker)
        self.reported[event.wave].add(who)
        self._check(due)

    @rule()
    def workers_restart(self) -> None:
        self._restart()

    def _complete(self, wave: int) -> bool:
        wanted = {("task", t) for t in TASKS} | {("spouts", w) for w in self.spout_workers}
        return wanted <= self.reported.get(wave, set())

    def _check(self, due: list) -> None:
        expected = []
        while self.in_flight:
            oldest = min(self.in_flight)
            if not self._complete(oldest):
                break
            replay = self.in_flight.pop(oldest)
            if not replay:
                expected.append(oldest)
        completed = [i for i in due if isinstance(i, WaveCompleted)]
        assert [i.wave for i in completed] == expected, "waves not completed in order as soon as they could"
        for instruction in completed:
            assert instruction.flight == f"flight {instruction.wave}"
            assert set(instruction.reports) == TASKS and set(instruction.spout_reports) == self.spout_workers
            assert all(r.endswith(f" of {instruction.wave}") for r in instruction.reports.values())
            assert all(f" of {instruction.wave} in " in r for r in instruction.spout_reports.values())
        commits = [i for i in due if isinstance(i, CommitDue)]
        assert [c.wave for c in commits] == expected
        assert all(c.generation == self.generation for c in commits)
        for instruction in due:  # each commit right after its wave's completion
            if isinstance(instruction, CommitDue):
                assert self.completed[-1] == instruction.wave
            else:
                self.completed.append(instruction.wave)
        assert self.completed == sorted(self.completed)
        assert len(self.book) == len(self.in_flight)


WaveBookMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
test_wave_book_rules = WaveBookMachine.TestCase


def test_a_peers_reports_before_the_oldest_waves_wait_for_it():
    """Wave 2 has every report before wave 1 does: it completes only after wave 1, in the same step."""
    book = WaveBook()
    book.handle(GenerationStarted(1, frozenset({7}), frozenset()))
    book.handle(WaveSent(1, "one"))
    book.handle(WaveSent(2, "two"))
    assert book.handle(TaskReported(1, 2, 7, "r2")) == []
    assert book.handle(TaskReported(1, 1, 7, "r1")) == [
        WaveCompleted(1, "one", {7: "r1"}, {}),
        CommitDue(1, 1),
        WaveCompleted(2, "two", {7: "r2"}, {}),
        CommitDue(1, 2),
    ]


def test_a_report_twice_is_a_bug_and_one_from_before_a_restart_is_dropped():
    book = WaveBook()
    book.handle(GenerationStarted(1, frozenset({7, 8}), frozenset()))
    book.handle(WaveSent(1, "one"))
    book.handle(TaskReported(1, 1, 7, "r"))
    with pytest.raises(RuntimeError, match="task 7 reported wave 1 twice"):
        book.handle(TaskReported(1, 1, 7, "r"))
    book.handle(GenerationStarted(2, frozenset({7, 8}), frozenset()))  # the waves in flight are dropped
    assert book.oldest_missing() is None
    book.handle(WaveSent(1, "one again", replay=True))  # and what runs again is sent again
    assert book.handle(TaskReported(1, 1, 8, "old")) == []
    assert book.oldest_missing() == (1, [7, 8], [])
    book.handle(TaskReported(2, 1, 7, "r"))
    assert book.handle(TaskReported(2, 1, 8, "r")) == []  # a replayed wave completes with nothing to apply
    assert len(book) == 0
