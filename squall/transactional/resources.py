"""Objects that outlive a try: one ``WorkerResources`` per worker and generation of a transactional topology.

A batch bolt gets a fresh instance for every try, as Storm makes one per batch. What must live longer (a state and
its cache, a window manager, a prepared operation) is kept here, keyed by whoever makes it, and closed when the
generation ends: a relaunched worker starts with none, as a restarted Storm executor does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("squall.transactional")


class WorkerResources:
    """Long-lived objects of one worker and generation, shared by every try's bolt instances there.

    A bolt that defines ``use_worker_resources(resources)`` is handed this object before its ``prepare``, on the
    try's thread. ``get(key, make)`` is thread-safe and calls ``make`` at most once per key. ``close()`` runs once
    the generation ends, and calls each object's ``close()`` (or ``cleanup()``) in the reverse order of making."""

    def __init__(self) -> None:
        self._objects: dict[Any, Any] = {}
        self._lock = threading.RLock()  # what ``make`` makes may get other resources
        self.closed = False
        self.committed = 0  # the latest txid this worker knows committed (``saw_committed``)

    def saw_committed(self, txid: int) -> None:
        if txid > self.committed:
            self.committed = txid

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        found = self._objects.get(key)
        if found is not None:
            return found
        with self._lock:
            if self.closed:  # a try still running as its generation ended: nothing new is made for it
                raise RuntimeError("this worker's generation ended")
            found = self._objects.get(key)
            if found is None:
                found = self._objects[key] = make()
            return found

    def close(self) -> None:
        with self._lock:
            objects, self._objects, self.closed = list(self._objects.values()), {}, True
        for obj in reversed(objects):
            end = getattr(obj, "close", None) or getattr(obj, "cleanup", None)
            if end is None:
                continue
            try:
                end()
            except Exception:
                log.warning("closing %r failed", obj, exc_info=True)
