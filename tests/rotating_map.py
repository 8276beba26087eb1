"""Storm's RotatingMap: a map whose entries expire after a fixed number of rotations.

A test oracle: squall's acker (``squall/reliability/acker.py``) keeps its timeout buckets in columns, and
``tests/test_ledger.py`` checks that they expire entry for entry as this map does.

The map holds ``num_buckets`` dicts. ``put`` places a key in the newest bucket
(the nursery) and removes it from every other one. ``rotate`` drops the oldest
bucket (death row), adds a fresh nursery and returns what was dropped. An entry
therefore expires on the ``num_buckets``-th rotation after its last ``put``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RotatingMap(Generic[K, V]):
    def __init__(self, num_buckets: int = 2) -> None:
        if not isinstance(num_buckets, int) or isinstance(num_buckets, bool) or num_buckets < 2:
            raise ValueError(f"RotatingMap num_buckets must be an int >= 2, got {num_buckets!r}")
        self.num_buckets = num_buckets
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(num_buckets))

    def put(self, key: K, value: V) -> None:
        """Store ``key`` in the newest bucket, restarting its countdown to expiry."""
        newest = self._buckets[0]
        for bucket in self._buckets:
            if bucket is not newest:
                bucket.pop(key, None)
        newest[key] = value

    def get(self, key: K, default: V | None = None) -> V | None:
        for bucket in self._buckets:
            if key in bucket:
                return bucket[key]
        return default

    def contains(self, key: K) -> bool:
        return any(key in bucket for bucket in self._buckets)

    __contains__ = contains

    def remove(self, key: K) -> V | None:
        """Remove ``key`` wherever it is and return its value (None if absent)."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket.pop(key)
        return None

    def size(self) -> int:
        return sum(len(bucket) for bucket in self._buckets)

    __len__ = size

    def rotate(self) -> dict[K, V]:
        """Advance every cohort one step; return the entries that expired."""
        expired = self._buckets.pop()
        self._buckets.appendleft({})
        return expired

    def bucket_of(self, key: K) -> int | None:
        """Age of ``key`` in rotations since its last put (0 = newest), or None."""
        for age, bucket in enumerate(self._buckets):
            if key in bucket:
                return age
        return None
