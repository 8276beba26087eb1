"""Declared field names of a stream."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any


class Fields(Sequence[str]):
    """An ordered list of unique field names, as Storm's ``Fields``.

    ``Fields("word", "count")`` and ``Fields(["word", "count"])`` are the same.
    """

    __slots__ = ("_index", "_names")

    def __init__(self, *names: str | Iterable[str]) -> None:
        if len(names) == 1 and not isinstance(names[0], str):
            names = tuple(names[0])
        for name in names:
            if not isinstance(name, str) or not name:
                raise TypeError(f"field names must be non-empty strings, got {name!r}")
        self._names: tuple[str, ...] = tuple(names)  # type: ignore[arg-type]
        self._index = {name: i for i, name in enumerate(self._names)}
        if len(self._index) != len(self._names):
            dupes = sorted({n for n in self._names if self._names.count(n) > 1})
            raise ValueError(f"duplicate field name(s) {dupes} in Fields{self._names}")

    def __getitem__(self, i):  # type: ignore[override]
        return self._names[i]

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fields):
            return self._names == other._names
        if isinstance(other, (tuple, list)):
            return self._names == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields{self._names!r}"

    def index(self, name: str) -> int:  # type: ignore[override]
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no field {name!r} in {self!r}") from None

    def select(self, selector: Fields | Sequence[str], values: Sequence[Any]) -> tuple:
        """The values of the ``selector`` fields, picked out of ``values``."""
        return tuple(values[self._index[name]] for name in selector)

    def to_list(self) -> list[str]:
        return list(self._names)


def as_fields(value: Fields | str | Iterable[str]) -> Fields:
    if isinstance(value, Fields):
        return value
    if isinstance(value, str):
        return Fields(value)
    return Fields(*value)
