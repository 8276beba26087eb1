"""The topology's clock, as Storm's ``Time``: ``squall.time.now()`` in seconds.

Bolts and spouts read it instead of ``time.time()``. Under ``TestCluster`` it
follows simulated time (``advance_time``), as Storm's ``Time.currentTimeMillis()``
does under simulated time; otherwise it is the wall clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SIMULATED: ContextVar[float | None] = ContextVar("squall_simulated_time", default=None)


def now() -> float:
    """Seconds on the topology's clock: simulated under ``TestCluster``, else ``time.time()``."""
    simulated = _SIMULATED.get()
    return time.time() if simulated is None else simulated


def time_reader() -> Callable[[], float]:
    """A function that reads ``now()`` while this thread's time stays as it is now: ``time.time`` itself under
    the wall clock, which a caller reading the time per tuple calls with nothing in between."""
    return time.time if _SIMULATED.get() is None else now


def use_simulated_time(seconds: float | None) -> None:
    """Set the simulated time that ``now()`` returns in this thread (``None``: the wall clock).

    The runtime calls it before running spouts and bolts; user code has no need to.
    """
    _SIMULATED.set(seconds)


@contextmanager
def simulated_time(seconds: float | None) -> Iterator[None]:
    """``now()`` returns ``seconds`` (or the wall clock for ``None``) inside the block, in this thread."""
    token = _SIMULATED.set(seconds)
    try:
        yield
    finally:
        _SIMULATED.reset(token)
