"""Stream groupings: which task(s) of a bolt receive each tuple.

Each grouping is pure and deterministic. ``router(source_task, targets, fields)``
returns a function from a tuple's values to the list of target task ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cython
import numpy as np

from squall.model.fields import Fields
from squall.model.hashing import _PREFIXES, stable_hash, stable_str_hash

try:  # a lone string key's target in one C call (setup.py builds it where a compiler is)
    from squall.model._keyhash import str_pick as _str_pick
except ImportError:
    _str_pick = None

Router = Callable[[Sequence[Any]], list[int]]
Picker = Callable[[Sequence[Any]], int]
RING_DRAW = 1024  # a shuffled ring's picks drawn at once
_KNOWN_KEYS = 1 << 16  # keys a fields grouping router remembers the target of; past them, it hashes


class Grouping:
    name = "grouping"
    is_direct = False

    def router(self, source_task: int, targets: Sequence[int], fields: Fields) -> Router:
        pick = self.picker(source_task, targets, fields)
        if pick is None:
            raise NotImplementedError
        return lambda values: [pick(values)]

    def picker(self, source_task: int, targets: Sequence[int], fields: Fields) -> Picker | None:
        """For a grouping that sends each tuple to exactly one task: a function from values to that task."""
        return None

    def __repr__(self) -> str:
        return f"{self.name}_grouping"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(type(self))


@cython.cclass
class ShuffledRing:
    """Picks that go round ``ring`` in a fresh random order each pass, seeded by ``seed`` (or drawn from a
    generator): reproducible, and each pass of ``len(ring)`` picks holds every entry of the ring once. Passes are
    drawn many at a time."""

    _rng = cython.declare(object)
    _ring = cython.declare(object)
    _passes = cython.declare(cython.Py_ssize_t)
    _picks = cython.declare(list)
    _position = cython.declare(cython.Py_ssize_t)

    def __init__(self, seed: int | np.random.Generator, ring: Sequence[int]) -> None:
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self._ring = np.asarray(ring, dtype=np.int64)
        self._passes = max(1, RING_DRAW // len(self._ring))
        self._picks: list[int] = []
        self._position = 0

    def __call__(self, values: Any = None) -> int:
        if self._position >= len(self._picks):
            self._draw()
        self._position += 1
        return self._picks[self._position - 1]

    def take(self, n: int) -> list[int]:
        """The next ``n`` picks, as ``n`` calls would give them."""
        taken: list[int] = []
        while len(taken) < n:
            if self._position >= len(self._picks):
                self._draw()
            end = min(len(self._picks), self._position + n - len(taken))
            taken.extend(self._picks[self._position : end])
            self._position = end
        return taken

    def _draw(self) -> None:
        order = np.argsort(self._rng.random((self._passes, len(self._ring))), axis=1)
        self._picks = self._ring[order].ravel().tolist()
        self._position = 0


class ShuffleGrouping(Grouping):
    """Round-robin over a shuffled order of the targets, reshuffled each cycle.

    Each source task's sequence is seeded by its task id, so it is reproducible,
    and any run of ``len(targets)`` tuples from the start of a cycle reaches every target exactly once.
    """

    name = "shuffle"

    def picker(self, source_task: int, targets: Sequence[int], fields: Fields) -> Picker:
        if len(targets) == 1:
            (only,) = targets
            return lambda values: only
        return ShuffledRing(source_task, targets)


class NoneGrouping(ShuffleGrouping):
    """Storm's "don't care" grouping; it shuffles."""

    name = "none"


class LocalOrShuffleGrouping(ShuffleGrouping):
    """Prefer a target in the emitter's worker, else shuffle.

    The runtime hands the router only the targets hosted by the emitter's worker when there are any
    (between components of equal parallelism, task ``i`` and task ``i`` share a worker); the driver's
    spouts have none, so they shuffle over all.
    """

    name = "local_or_shuffle"


class FieldsGrouping(Grouping):
    """``stable_hash(selected values) mod len(targets)``: equal keys, same task."""

    name = "fields"

    def __init__(self, fields: Fields) -> None:
        self.fields = fields

    def picker(self, source_task: int, targets: Sequence[int], fields: Fields) -> Picker:
        positions = [fields.index(name) for name in self.fields]
        targets = list(targets)
        n = len(targets)
        if len(positions) != 1:

            def pick(values: Sequence[Any]) -> int:
                return targets[stable_hash([values[p] for p in positions]) % n]

            return pick
        (position,) = positions
        known: dict[Any, int] = {}  # str or (type, value) -> target: 1, 1.0 and True hash apart
        misses_when_full = 0  # once as many keys missed a full memory as it holds, keys are only hashed

        def pick_one(values: Sequence[Any]) -> int:
            nonlocal misses_when_full
            value = values[position]
            is_str = type(value) is str  # no other type equals a str
            if is_str and _str_pick is not None:  # hashed as quickly as it is looked up: nothing to remember
                target = _str_pick(value, _PREFIXES, targets)
                if target is not None:
                    return target
            if misses_when_full >= _KNOWN_KEYS:  # more distinct keys than the memory holds
                return targets[(stable_str_hash(value) if is_str else stable_hash([value])) % n]
            key = value if is_str else (type(value), value)
            try:
                target = known.get(key)
            except TypeError:  # unhashable: hash it every time
                return targets[stable_hash([value]) % n]
            if target is None:
                target = targets[(stable_str_hash(value) if is_str else stable_hash([value])) % n]
                if len(known) < _KNOWN_KEYS:
                    known[key] = target
                else:
                    misses_when_full += 1
            return target

        return pick_one

    def __repr__(self) -> str:
        return f"fields_grouping({list(self.fields)})"

    def __hash__(self) -> int:
        return hash((type(self), self.fields))


class GlobalGrouping(Grouping):
    """Every tuple to the lowest-numbered task."""

    name = "global"

    def picker(self, source_task: int, targets: Sequence[int], fields: Fields) -> Picker:
        lowest = min(targets)
        return lambda values: lowest


class AllGrouping(Grouping):
    """Every tuple to every task."""

    name = "all"

    def router(self, source_task: int, targets: Sequence[int], fields: Fields) -> Router:
        everyone = sorted(targets)
        return lambda values: list(everyone)


class DirectGrouping(Grouping):
    """The emitter picks the task with ``emit_direct``; plain emits are refused."""

    name = "direct"
    is_direct = True

    def router(self, source_task: int, targets: Sequence[int], fields: Fields) -> Router:
        def route(values: Sequence[Any]) -> list[int]:
            raise ValueError("a direct stream takes emit_direct(task, ...), not emit(...)")

        return route
