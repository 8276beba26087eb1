"""Failures no retry can fix: how a worker marks them, and when the driver stops a topology.

A task that cannot be set up (its component does not unpickle, its ``prepare()``
raises) raises ``TaskSetupError``, whose message carries ``FATAL_MARK``. Spark
retries the task; when every attempt fails, the job's error holds the worker's
traceback, and ``stop_reason`` finds the mark in it. Failures without the mark
are retried by the caller until ``limit`` of them come in a row.
"""

from __future__ import annotations

import traceback

from squall.model.errors import FATAL_MARK, SquallError


class TaskSetupError(SquallError):
    """A task that cannot be set up on a worker; its message names the component, the task and the cause."""

    def __init__(self, component: str, task: int, what: str, cause: BaseException) -> None:
        lines = [line.strip() for line in "".join(traceback.format_exception_only(cause)).splitlines()]
        cause_text = " | ".join(line for line in lines if line)  # one line: the mark is read back line by line
        super().__init__(f"{FATAL_MARK} component {component!r} task {task}: {what}: {cause_text}")


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
