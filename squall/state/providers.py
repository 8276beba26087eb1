"""Where stateful bolts' checkpoints go (``topology.state.provider``).

``FileStateProvider`` (``file``, the default) keeps a topology's checkpoints
under ``<squall.checkpoint.dir>/<topology name>/state/``:

* ``delta-<id>.pickle``: what every stateful task's state changed since the
  checkpoint before, with the tasks each stateful component had;
* ``base-<id>.pickle``: every task's whole state as of checkpoint ``id``,
  written every ``COMPACT_EVERY`` checkpoints, after which older files go.

A file is written under a temporary name, flushed to disk and renamed, so a
checkpoint is there whole or not at all: one cut off midway (the driver killed
during the write) is ignored on restart, never half-applied. Restoring reads
the newest base and applies the deltas after it in order. The files are
written and read by the driver only, so they may live on its local disk.
"""

from __future__ import annotations

import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Any

from squall.model.state import StateDelta

COMPACT_EVERY = 20
_FILE = re.compile(r"^(base|delta)-(\d{12})\.pickle$")


@dataclass
class Restored:
    """The state as of the last complete checkpoint: its id, the tasks of each component, each task's map."""

    checkpoint: int = 0
    layout: dict[str, list[int]] = field(default_factory=dict)
    states: dict[int, dict[Any, Any]] = field(default_factory=dict)


class FileStateProvider:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)

    def _path(self, kind: str, checkpoint: int) -> str:
        return os.path.join(self.directory, f"{kind}-{checkpoint:012d}.pickle")

    def _write(self, path: str, record: dict) -> None:
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "wb") as out:
            pickle.dump(record, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)

    def _files(self) -> list[tuple[int, str, str]]:
        """``(checkpoint id, kind, path)`` of every complete file, oldest first."""
        found = []
        for name in os.listdir(self.directory):
            match = _FILE.match(name)
            if match:
                found.append((int(match.group(2)), match.group(1), os.path.join(self.directory, name)))
        return sorted(found, key=lambda f: (f[0], f[1] == "delta"))

    def save(self, checkpoint: int, layout: dict[str, list[int]], deltas: dict[int, StateDelta]) -> None:
        """Checkpoint ``checkpoint``: what each task's state changed since the one before."""
        self._write(self._path("delta", checkpoint), {"layout": layout, "deltas": deltas})

    def compact(self, checkpoint: int, layout: dict[str, list[int]], states: dict[int, dict[Any, Any]]) -> None:
        """Every task's whole state as of ``checkpoint`` (already saved); the files it makes redundant go."""
        self._write(self._path("base", checkpoint), {"layout": layout, "states": states})
        for number, kind, path in self._files():
            if number < checkpoint or (number == checkpoint and kind == "delta"):
                os.remove(path)

    def load(self) -> Restored:
        """The state as of the newest complete checkpoint (nothing at all before the first)."""
        restored = Restored()
        files = self._files()
        bases = [f for f in files if f[1] == "base"]
        start = 0
        if bases:
            number, _, path = bases[-1]
            with open(path, "rb") as source:
                record = pickle.load(source)
            restored = Restored(number, record["layout"], record["states"])
            start = number
        for number, kind, path in files:
            if kind != "delta" or number <= start:
                continue
            with open(path, "rb") as source:
                record = pickle.load(source)
            for task, delta in record["deltas"].items():
                delta.apply(restored.states.setdefault(task, {}))
            restored.checkpoint, restored.layout = number, record["layout"]
        return restored


def open_state_provider(kind: str, checkpoint_dir: str, topology: str) -> FileStateProvider:
    """The provider ``topology.state.provider`` names, for the topology ``topology``."""
    if kind != "file":
        raise ValueError(f"topology.state.provider: unknown provider {kind!r}; known: ['file']")
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("file:"):
        raise ValueError(
            f"squall.checkpoint.dir {checkpoint_dir!r}: the file state provider needs a path on the driver's"
            " machine (or a file: URL)"
        )
    local = checkpoint_dir.removeprefix("file://").removeprefix("file:")
    return FileStateProvider(os.path.join(local, topology, "state"))
