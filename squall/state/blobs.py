"""``StateBlobs``: values a stateful task writes once beside its checkpointed state, and reads back on demand.

A task's ``KeyValueState`` lives in memory and goes whole into snapshots and checkpoints. A value too large for
that (a persistent window's sealed partition of tuples) is written here instead, under a name, and the state
holds only the name. A blob never changes once written, so any state that names it reads the same value.

A blob the task no longer needs is *released*, not deleted: a snapshot or a checkpoint taken before the release
may still name it, and a task may be restored from either. The runtime tags each release with the wave it
happened in (``end_wave``) and deletes it once the last complete snapshot and the last complete checkpoint are
both as of that wave or later (``collect``): no state that could be restored names it any more.
"""

from __future__ import annotations

import pickle
from typing import Any

from pyspark import cloudpickle  # values of classes shipped by value, as bolts' tasks send them

from squall.state.providers import FileStateProvider, RedisStateProvider, StateStoreSpec

_OPEN: dict[tuple[StateStoreSpec, str | None], FileStateProvider | RedisStateProvider] = {}


class StateBlobs:
    """One task's blobs in its state provider (``owner`` is ``<component>.<task>``)."""

    def __init__(self, provider: FileStateProvider | RedisStateProvider, component: str, task: int) -> None:
        self.provider, self.owner = provider, f"{component}.{task}"
        self._released: list[str] = []  # since the last end_wave
        self._waiting: list[tuple[int, list[str]]] = []  # (wave, names) released, not yet deleted

    @classmethod
    def open(cls, spec: StateStoreSpec, component: str, task: int) -> StateBlobs:
        """The task's blobs in the store ``spec`` names, sealed with its sealer: one provider per store and key."""
        found = (spec, spec.sealer.fingerprint if spec.sealer is not None else None)
        provider = _OPEN.get(found)
        if provider is None:
            provider = _OPEN[found] = spec.open()
        return cls(provider, component, task)

    def put(self, name: str, value: Any) -> None:
        """Write ``value`` (durably) under ``name``, before any state names it."""
        self.provider.put_blob(self.owner, name, cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def get(self, name: str) -> Any:
        return pickle.loads(self.provider.get_blob(self.owner, name))

    def names(self) -> list[str]:
        """Every blob of this task in the store."""
        return self.provider.blob_names(self.owner)

    def release(self, name: str) -> None:
        """The live state no longer names ``name``; it goes once no restorable state does."""
        self._released.append(name)

    # -- what the runtime calls -------------------------------------------------------------------------
    def end_wave(self, wave: int) -> None:
        """The releases since the last call happened in ``wave``."""
        if self._released:
            self._waiting.append((wave, self._released))
            self._released = []

    def collect(self, restorable_from: int) -> int:
        """Delete the blobs released in waves up to ``restorable_from``, the oldest wave any task may yet be
        restored as of; returns how many went."""
        due = [names for wave, names in self._waiting if wave <= restorable_from]
        if not due:
            return 0
        self._waiting = [(wave, names) for wave, names in self._waiting if wave > restorable_from]
        doomed = [name for names in due for name in names]
        self.provider.delete_blobs(self.owner, doomed)
        return len(doomed)

    @property
    def waiting(self) -> int:
        """Blobs released and not yet deleted."""
        return len(self._released) + sum(len(names) for _, names in self._waiting)
