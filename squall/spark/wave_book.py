"""The driver's book of waves in flight: a pure state machine, events in and instructions out.

A wave completes when every bolt task of the current generation has reported it, and every worker hosting
spout tasks has reported its spouts' part; waves complete strictly in the order they were sent, whatever order
their reports come in. The rules:

* a report of an older generation is dropped: its wave runs again under the new one. What a spout worker's
  report says its spout tasks did (emits, acks, fails) happened all the same, and counts (``SpoutsUncounted``);
* a second report of the same wave from the same task (or spout worker) is a bug, and raises;
* a wave that had completed and is sent again only to rebuild the tasks' state (``replay``) completes silently:
  it was counted the first time, but for the trees its spout reports say were settled meanwhile
  (``SpoutsUncounted``);
* when the ackers live on the workers, each completed wave makes its ``Commit`` due (``CommitDue``; the scheduler
  sends the latest one with the next wave), which tells the workers the last complete snapshot;
* a new generation drops the waves in flight with their reports: the scheduler sends them again. The spout
  reports among them count (``SpoutsUncounted``): every spout report counts once, with its wave or without it.

``WaveBook.handle`` takes one event and returns the instructions it makes due, in order. The waves themselves
(what was sent) are opaque here; the scheduler (``scheduler.py``) does the sending and the bookkeeping of what
a completed wave changes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WaveSent:
    """``wave`` (its number, one more than the last) went out, or waits for the workers to be ready."""

    wave: int
    flight: Any  # what was sent, handed back when it completes
    replay: bool = False


@dataclass(frozen=True)
class TaskReported:
    generation: int
    wave: int
    task: int
    report: Any


@dataclass(frozen=True)
class SpoutsReported:
    generation: int
    wave: int
    worker: int
    report: Any


@dataclass(frozen=True)
class GenerationStarted:
    """The workers (re)started as ``generation``, hosting ``tasks`` and spout tasks on ``spout_workers``. The
    waves in flight are dropped: what runs again is sent again."""

    generation: int
    tasks: frozenset[int]
    spout_workers: frozenset[int]


WaveEvent = WaveSent | TaskReported | SpoutsReported | GenerationStarted


@dataclass(frozen=True)
class WaveCompleted:
    """Instruction: apply the completed wave: what was sent, and every task's and spout worker's report."""

    wave: int
    flight: Any
    reports: dict[int, Any]
    spout_reports: dict[int, Any]


@dataclass(frozen=True)
class CommitDue:
    """Instruction: tell the workers that waves up to ``wave`` (of ``generation``) completed."""

    generation: int
    wave: int


@dataclass(frozen=True)
class SpoutsUncounted:
    """Instruction: spout reports that no completed wave carries (their wave was dropped by a new generation, or
    replayed): what their spout tasks did still counts in the run's stats."""

    spout_reports: list[Any]


@dataclass
class _Entry:
    flight: Any
    replay: bool
    reports: dict[int, Any] = field(default_factory=dict)
    spout_reports: dict[int, Any] = field(default_factory=dict)


class WaveBook:
    """The waves in flight, oldest first. Each completed wave makes a ``CommitDue``: the workers learn the last
    complete snapshot from it."""

    def __init__(self) -> None:
        self.generation = 0
        self.tasks: frozenset[int] = frozenset()
        self.spout_workers: frozenset[int] = frozenset()
        self._waves: OrderedDict[int, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._waves)

    def flights(self) -> list[Any]:
        """What each wave in flight sent, oldest first."""
        return [entry.flight for entry in self._waves.values()]

    def oldest_missing(self) -> tuple[int, list[int], list[int]] | None:
        """The oldest wave in flight, and the tasks and spout workers it still waits for."""
        if not self._waves:
            return None
        wave, entry = next(iter(self._waves.items()))
        tasks = sorted(self.tasks - entry.reports.keys())
        return wave, tasks, sorted(self.spout_workers - entry.spout_reports.keys())

    def clear(self) -> list[Any]:
        """Forget every wave in flight (the run has no workers); returns what they sent."""
        flights = self.flights()
        self._waves.clear()
        return flights

    def handle(self, event: WaveEvent) -> list[WaveCompleted | CommitDue | SpoutsUncounted]:
        if isinstance(event, WaveSent):
            self._waves[event.wave] = _Entry(event.flight, event.replay)
            return []
        if isinstance(event, GenerationStarted):
            self.generation, self.tasks, self.spout_workers = event.generation, event.tasks, event.spout_workers
            dropped = [report for entry in self._waves.values() for report in entry.spout_reports.values()]
            self._waves.clear()
            return [SpoutsUncounted(dropped)] if dropped else []
        if event.generation != self.generation:  # from before a restart: that wave runs again
            return [SpoutsUncounted([event.report])] if isinstance(event, SpoutsReported) else []
        entry = self._waves.get(event.wave)
        if isinstance(event, TaskReported):
            if entry is None or event.task in entry.reports:
                raise RuntimeError(f"task {event.task} reported wave {event.wave} twice")
            entry.reports[event.task] = event.report
        elif isinstance(event, SpoutsReported):
            if entry is None or event.worker in entry.spout_reports:
                raise RuntimeError(f"worker {event.worker} reported the spouts of wave {event.wave} twice")
            entry.spout_reports[event.worker] = event.report
        else:
            raise TypeError(f"WaveBook: unexpected event {event!r}")
        return self._complete_in_order()

    def _complete_in_order(self) -> list[WaveCompleted | CommitDue | SpoutsUncounted]:
        due: list[WaveCompleted | CommitDue | SpoutsUncounted] = []
        while self._waves:
            wave, first = next(iter(self._waves.items()))
            if not (self.tasks <= first.reports.keys() and self.spout_workers <= first.spout_reports.keys()):
                break
            del self._waves[wave]
            if first.replay:
                if first.spout_reports:
                    due.append(SpoutsUncounted(list(first.spout_reports.values())))
                continue
            due.append(WaveCompleted(wave, first.flight, first.reports, first.spout_reports))
            due.append(CommitDue(self.generation, wave))
        return due
