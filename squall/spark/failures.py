"""Failures no retry can fix: how a worker marks them, and when the driver stops a topology.

A task that cannot be set up (its component does not unpickle, its ``prepare()``
raises) raises ``TaskSetupError``, whose message carries ``FATAL_MARK``. Spark
retries the task; when every attempt fails, the job's error holds the worker's
traceback, and ``stop_reason`` finds the mark in it. Failures without the mark
are retried by the caller until ``limit`` of them come in a row.

A task's same uncaught error, again and again with no progress in between
(``ErrorStreak``, ``squall.max.repeated.errors``), stops the topology too: as
an uncaught exception kills a Storm worker, rather than run on forever.
"""

from __future__ import annotations

import ast
import re
import traceback
from collections.abc import Callable

from squall.model.errors import FATAL_MARK, SquallError


class TaskSetupError(SquallError):
    """A task that cannot be set up on a worker. Its message's first line names the component, the task and the
    cause (the mark is read back line by line); the cause's traceback follows, for the run's errors and its log."""

    def __init__(self, component: str, task: int, what: str, cause: BaseException) -> None:
        lines = [line.strip() for line in "".join(traceback.format_exception_only(cause)).splitlines()]
        cause_text = " | ".join(line for line in lines if line)
        trace = "".join(traceback.format_exception(cause)).rstrip()
        super().__init__(f"{FATAL_MARK} component {component!r} task {task}: {what}: {cause_text}\n{trace}")


_ORIGIN = re.compile(r"component ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") task (\d+): ")


def setup_error_origin(message: str) -> tuple[str, int, str] | None:
    """``(component, task, text)`` of a ``TaskSetupError``'s message (as a worker's ``WorkerFailed`` carries it):
    the text without the mark, its traceback included; None for a message of another kind."""
    at = message.find(FATAL_MARK)
    if at < 0:
        return None
    text = message[at + len(FATAL_MARK) :].strip()
    found = _ORIGIN.match(text)
    if found is None:
        return None
    return ast.literal_eval(found.group(1)), int(found.group(2)), text


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")  # an object's address in its repr: not part of what makes errors the same


class ErrorStreak:
    """One task's run of the same uncaught error with no progress in between (``squall.max.repeated.errors``).

    An error extends the run when it has the same type and message (memory addresses such as ``0x7f3a...`` in an
    object's repr aside) as the one before it and the task made no progress since (``contiguous``); any other
    error starts a new run at 1, and ``progressed()`` ends the run. What counts as an error and as progress is
    the caller's: a bolt task's ``execute`` that raises, and one that returns (or raises ``FailedException``); a
    spout task's ``next_tuple``, ``ack``, ``fail``, ``activate`` or ``deactivate`` that raises, and an emit.
    ``raised`` says True, and ``stop`` why, when the run has reached ``limit`` (None: never). ``failed`` counts a
    failure known only by its traceback's text (a transactional batch's), the same when its last error line is.
    ``subject`` names who raised, in ``stop``."""

    __slots__ = ("component", "count", "key", "limit", "stop", "subject", "task")

    def __init__(self, component: str, task: int, limit: int | None, subject: str | None = None) -> None:
        self.component, self.task, self.limit = component, task, limit
        self.subject = subject or f"component {component!r} task {task} raised"
        self.key: tuple[str, str] | None = None
        self.count = 0
        self.stop: str | None = None

    def raised(self, error: BaseException, contiguous: bool = True) -> bool:
        try:
            message = str(error)
        except Exception:  # an exception whose __str__ raises is still the same kind of error
            message = ""
        kind = type(error)
        key = (f"{kind.__module__}.{kind.__qualname__}", _ADDRESS.sub("0x", message))
        return self._counted(key, contiguous, lambda: "".join(traceback.format_exception(error)).rstrip())

    def failed(self, text: str) -> bool:
        line = python_error_line(text) or (text.strip().splitlines() or [""])[0]
        return self._counted(("", _ADDRESS.sub("0x", line)), True, text.rstrip)

    def _counted(self, key: tuple[str, str], contiguous: bool, trace: Callable[[], str]) -> bool:
        if contiguous and key == self.key:
            self.count += 1
        else:
            self.key, self.count = key, 1
        if self.limit is None or self.count < self.limit:
            return False
        self.stop = (
            f"{self.subject} the same error {self.count} times in a row with no progress in between"
            f" (squall.max.repeated.errors is {self.limit}); the last one:\n{trace()}"
        )
        return True

    def progressed(self) -> None:
        self.key, self.count = None, 0


def python_error_line(text: str) -> str | None:
    """The last ``SomeError: message`` line of a Python traceback inside a failed Spark job's text."""
    found = None
    for line in text.splitlines():
        line = line.strip()
        head = line.split(":", 1)[0]
        python_error = head.rsplit(".", 1)[-1].endswith(("Error", "Exception", "Exit", "Interrupt"))
        if head and " " not in head and python_error and not head.startswith(("org.", "java.", "py4j.", "scala.")):
            found = line
    return found


def failure_cause(error: BaseException) -> str:
    """One line saying what failed: the Python error inside a Spark job's text, else the error's first line."""
    text = str(error).strip()
    first = text.splitlines()[0][:500] if text else ""
    return python_error_line(text) or f"{type(error).__name__}: {first}"


def fatal_message(error: BaseException) -> str | None:
    """The ``TaskSetupError`` message inside a failed Spark job's error, if that is what failed it."""
    text = str(error)
    at = text.rfind(FATAL_MARK)
    if at < 0:
        return None
    return text[at + len(FATAL_MARK) :].strip().splitlines()[0]


def stop_reason(error: BaseException, in_a_row: int, limit: int, what: str) -> str | None:
    """Why ``error`` stops the topology, or None to retry: a fatal mark, or ``limit`` failures of ``what`` in a row."""
    fatal = fatal_message(error)
    if fatal is not None:
        return fatal
    if in_a_row < limit:
        return None
    return f"{limit} {what} in a row failed; the last with {failure_cause(error)}"
