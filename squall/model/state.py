"""The state of a stateful bolt's task: Storm's ``KeyValueState``, with the changes since the last checkpoint.

A ``StatefulBolt`` task is handed its ``KeyValueState`` in ``init_state``.
Every ``put`` and ``delete`` is remembered, so that what a task's state costs
to save follows what changed, not what it holds: ``take_changes`` returns a
``StateDelta`` (the keys put, with their values, and the keys deleted) and
starts over. A base map with deltas applied in order gives the state back.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from squall.model.errors import SquallError


class UnpicklableState(SquallError):
    """A state key or value that cannot be pickled; the message names the component and the key."""


@dataclass(slots=True)
class StateDelta:
    """What one task's state changed: keys put, with their new values, and keys deleted."""

    puts: dict[Any, Any] = field(default_factory=dict)
    deletes: list[Any] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes)

    def apply(self, data: dict[Any, Any]) -> None:
        """Apply this delta to ``data`` in place."""
        for key in self.deletes:
            data.pop(key, None)
        data.update(self.puts)

    def absorb(self, later: StateDelta) -> None:
        """Become this delta followed by ``later``, in place. ``apply`` deletes before it puts, so a key deleted
        and then put again may stay among the deletes."""
        if later.deletes:
            puts = self.puts
            for key in later.deletes:
                puts.pop(key, None)
            self.deletes = list(dict.fromkeys([*self.deletes, *later.deletes]))
        self.puts.update(later.puts)


class KeyValueState:
    """A task's keys and values (Storm's ``KeyValueState``); keys and values must be picklable.

    A ``StatefulBolt`` task is handed its state by ``init_state``, once per task instance, and uses it from its
    own calls (``execute``, ``pre_commit``) on the task's thread: it is not thread-safe. ``put``, ``get``,
    ``delete``, ``in``, iteration over the keys and ``len`` work as on a dict.

    What is guaranteed: the acks of a stateful task reach the spouts only once a checkpoint holds the state as
    it was after those tuples. A topology restarted under the same name and ``squall.checkpoint.dir`` gets back
    the last complete checkpoint, and its spouts replay what was not acked (at least once: an update may be
    applied twice); a task restarted after a lost worker gets back its last saved state, and the tuples since
    are delivered again. Only ``put`` and ``delete`` mark a key changed, and a checkpoint may save only the
    keys changed since the last one: after changing a value in place, ``put`` it again. A key or value that
    cannot be pickled stops the topology when the state is next saved, with a message naming the component.

    ``blobs``, where the runtime gives one (``squall.state.blobs.StateBlobs``), keeps values written once beside
    the state, which the state names instead of holding them (``None`` under ``TestCluster``).
    """

    def __init__(self, component: str = "", data: dict[Any, Any] | None = None, blobs: Any = None) -> None:
        self.component = component
        self.blobs = blobs
        self._data: dict[Any, Any] = dict(data) if data else {}
        # Since the last take_changes(): keys put, with their values, and keys deleted (a key deleted and then
        # put again is in both, and comes out put).
        self._puts: dict[Any, Any] = {}
        self._deletes: dict[Any, None] = {}

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``; saved with the task's next snapshot or checkpoint."""
        self._data[key] = value
        self._puts[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key``, or ``default``: the object held, not a copy."""
        return self._data.get(key, default)

    def delete(self, key: Any) -> None:
        """Remove ``key``; a key that is not there is no error."""
        if key in self._data:
            del self._data[key]
            self._puts.pop(key, None)
            self._deletes[key] = None

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def items(self):
        """``(key, value)`` pairs, as a dict's ``items()``."""
        return self._data.items()

    def __repr__(self) -> str:
        return f"KeyValueState({self.component!r}, {len(self._data)} keys, {self.changed} changed)"

    # -- checkpoints ------------------------------------------------------------------
    @property
    def changed(self) -> int:
        """Keys put or deleted since the last ``take_changes``."""
        return len(self._puts) + sum(1 for key in self._deletes if key not in self._puts)

    def take_changes(self) -> StateDelta:
        """The changes since the last call, which start over."""
        puts, deletes = self._puts, self._deletes
        self._puts, self._deletes = {}, {}
        return StateDelta(puts, [key for key in deletes if key not in puts])


def dump_delta(component: str, delta: StateDelta, dumps: Callable[..., bytes] = pickle.dumps) -> bytes:
    """``delta`` pickled by ``dumps``; a key or value that cannot be pickled raises ``UnpicklableState`` naming it."""
    try:
        return dumps(delta, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        for key, value in delta.puts.items():
            try:
                dumps((key, value), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as cause:
                raise UnpicklableState(
                    f"bolt {component!r}: state key {key!r} or its value ({type(value).__name__}) cannot be pickled:"
                    f" {cause}; keys and values of a KeyValueState must be picklable"
                ) from cause
        raise UnpicklableState(f"bolt {component!r}: its state changes cannot be pickled: {exc}") from exc
