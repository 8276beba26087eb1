"""What ``KafkaSpout`` decides without a broker: which offsets may be committed, and when a failed record is
emitted again. Pure state, as storm-kafka-client's ``OffsetManager`` and ``KafkaSpoutRetryExponentialBackoff``.
"""

from __future__ import annotations

import heapq
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any


class OffsetManager:
    """One partition's offsets from poll to commit.

    Offsets are emitted in the order they were polled; a commit covers only the contiguous acked prefix, so a
    failed or pending offset holds the partition's commit back. Offsets the log does not hold (compacted away,
    transaction markers) are never emitted, so they hold nothing back.
    """

    def __init__(self, committed: int) -> None:
        self.committed = committed  # Kafka's convention: the next offset to consume after a restart
        self._emitted: deque[int] = deque()  # polled and emitted offsets not yet committed, in order
        self._acked: set[int] = set()

    def emitted(self, offset: int) -> None:
        if not self._emitted or offset > self._emitted[-1]:
            self._emitted.append(offset)

    def emitted_many(self, offsets: list[int]) -> None:
        """``emitted`` for each of ``offsets``, in increasing order."""
        if offsets and self._emitted and offsets[0] <= self._emitted[-1]:
            last = self._emitted[-1]
            offsets = [o for o in offsets if o > last]
        self._emitted.extend(offsets)

    def acked(self, offset: int) -> None:
        if offset >= self.committed:
            self._acked.add(offset)

    @property
    def uncommitted(self) -> int:
        """Offsets emitted and not yet committed: what ``max_uncommitted_offsets`` bounds."""
        return len(self._emitted)

    def next_commit(self) -> int | None:
        """The offset to commit now (one past the contiguous acked prefix), or None when it has not moved."""
        emitted, acked, last = self._emitted, self._acked, None
        while emitted and emitted[0] in acked:
            last = emitted.popleft()
            acked.discard(last)
        if last is None:
            return None
        self.committed = last + 1
        return self.committed


@dataclass(frozen=True)
class RetryExponentialBackoff:
    """storm-kafka-client's ``KafkaSpoutRetryExponentialBackoff``, in seconds.

    After the first failure a record waits ``initial_delay``; after the n-th, ``delay_period * 2**(n-1)``; never
    longer than ``max_delay``. A record that fails more than ``max_retries`` times is given up.
    """

    initial_delay: float = 0.0
    delay_period: float = 0.002
    max_retries: int = sys.maxsize
    max_delay: float = 10.0

    def __post_init__(self) -> None:
        for name in ("initial_delay", "delay_period", "max_delay"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"RetryExponentialBackoff {name} must be a number of seconds >= 0, got {value!r}")
        if not isinstance(self.max_retries, int) or isinstance(self.max_retries, bool) or self.max_retries < 0:
            raise ValueError(f"RetryExponentialBackoff max_retries must be an int >= 0, got {self.max_retries!r}")

    def delay(self, fails: int) -> float:
        """Seconds before a record that has failed ``fails`` times (1, 2, ...) is emitted again."""
        wait = self.initial_delay if fails == 1 else self.delay_period * 2.0 ** (fails - 1)
        return min(wait, self.max_delay)


class RetrySchedule:
    """Failed records waiting for their backoff: ``schedule`` on a failure, ``due`` for those whose time came."""

    def __init__(self, backoff: RetryExponentialBackoff) -> None:
        self.backoff = backoff
        self.fails: dict[Any, int] = {}  # msg id -> failures so far
        self.queue: list[tuple[float, int, Any]] = []  # (due time, order, msg id), a heap
        self._order = 0

    def schedule(self, msg_id: Any, now: float) -> bool:
        """Count a failure; False when the record has now failed more than ``max_retries`` times (give it up)."""
        fails = self.fails.get(msg_id, 0) + 1
        self.fails[msg_id] = fails
        if fails > self.backoff.max_retries:
            return False
        self._order += 1
        heapq.heappush(self.queue, (now + self.backoff.delay(fails), self._order, msg_id))
        return True

    def due(self, now: float) -> list[Any]:
        """The records whose backoff has passed, earliest first; they leave the schedule."""
        ready = []
        while self.queue and self.queue[0][0] <= now:
            ready.append(heapq.heappop(self.queue)[2])
        return ready

    def forget(self, msg_id: Any) -> None:
        """The record was acked or given up: its failure count goes."""
        self.fails.pop(msg_id, None)

    def forget_where(self, keep: Any) -> None:
        """Drop every record for which ``keep(msg_id)`` is false (its partition was revoked)."""
        self.queue = [entry for entry in self.queue if keep(entry[2])]
        heapq.heapify(self.queue)
        self.fails = {m: n for m, n in self.fails.items() if keep(m)}
