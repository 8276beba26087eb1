"""``TridentTuple``: a Trident operation's input, a plain ``tuple`` that also knows its field names.

Each set of fields gets a subclass of its own (``tuple_type``), so making a tuple costs one tuple allocation and
reading a field by position costs what it costs on a tuple.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, ClassVar

from squall.model.fields import Fields


class TridentTuple(tuple):
    """The values a Trident operation sees, in its input fields' order: Storm's ``TridentTuple``.

    It is a ``tuple``: ``tup[0]``, ``len(tup)``, unpacking and ``==`` work as on one. Storm's accessors are here
    in snake case, by position (``get_value(i)``, ``get_string(i)``, ...) and by name
    (``get_value_by_field("word")``, ``get("word")``)."""

    __slots__ = ()
    fields: ClassVar[Fields] = Fields()
    _positions: ClassVar[dict[str, int]] = {}

    def __reduce__(self) -> tuple:
        return make_tuple, (tuple(self.fields), tuple(self))

    def get_fields(self) -> Fields:
        return self.fields

    def field_index(self, name: str) -> int:
        try:
            return self._positions[name]
        except KeyError:
            raise KeyError(f"no field {name!r}: the tuple has fields {list(self.fields)}") from None

    def get_value(self, i: int) -> Any:
        return self[i]

    get_string = get_integer = get_long = get_double = get_boolean = get_binary = get_value

    def get_value_by_field(self, name: str) -> Any:
        return self[self.field_index(name)]

    get_string_by_field = get_integer_by_field = get_long_by_field = get_double_by_field = get_value_by_field
    get_boolean_by_field = get_value_by_field

    def get(self, name: str, default: Any = None) -> Any:
        i = self._positions.get(name)
        return default if i is None else self[i]

    def contains(self, name: str) -> bool:
        return name in self._positions

    def select(self, fields: Iterable[str]) -> list[Any]:
        return [self[self.field_index(f)] for f in fields]

    def get_values(self) -> list[Any]:
        return list(self)

    values = property(get_values)

    def __repr__(self) -> str:
        return f"TridentTuple({dict(zip(self.fields, self, strict=False))!r})"


@cache
def _type_of(names: tuple[str, ...]) -> type[TridentTuple]:
    return type(
        "TridentTuple",
        (TridentTuple,),
        {"__slots__": (), "fields": Fields(*names), "_positions": {n: i for i, n in enumerate(names)}},
    )


def tuple_type(fields: Sequence[str]) -> type[TridentTuple]:
    """The ``TridentTuple`` subclass for ``fields``: calling it on a sequence of values makes a tuple."""
    return _type_of(tuple(fields))


def make_tuple(fields: Sequence[str], values: Iterable[Any]) -> TridentTuple:
    return _type_of(tuple(fields))(values)
