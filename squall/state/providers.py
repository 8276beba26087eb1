"""Where stateful bolts' checkpoints go (``topology.state.provider``): ``file`` or ``redis``.

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

import hashlib
import hmac
import json
import os
import pickle
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from pyspark import cloudpickle  # values of classes shipped by value, as bolts' tasks send them

from squall.model.state import StateDelta
from squall.model.urls import redact

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
            cloudpickle.dump(record, out, protocol=pickle.HIGHEST_PROTOCOL)
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


class RedisStateProvider:
    """Checkpoints in Redis (``redis``), as Storm's ``RedisKeyValueStateProvider`` keeps them: each stateful task's
    state is a hash, ``squall:state:<topology>:task:<task>``, updated in place.

    A checkpoint is one ``MULTI``/``EXEC``: every task's puts and deletes, the tasks of each component and the
    checkpoint's id go in together or not at all. The server must keep its data (an append-only file with
    ``appendfsync always`` keeps every checkpoint it confirmed). Keys and values are pickled and signed with
    HMAC-SHA256 under a key kept in the checkpoint directory, readable by its owner only: what comes back from
    the server is unpickled only when its signature holds.
    """

    def __init__(self, url: str, topology: str, key_file: str) -> None:
        import redis

        self.url, self.prefix = url, f"squall:state:{topology}"
        self.directory = f"{redact(url)} ({self.prefix})"
        self._redis = redis.Redis.from_url(url)
        self._secret = _secret(key_file)

    def _sign(self, value: Any) -> bytes:
        blob = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return hmac.new(self._secret, blob, hashlib.sha256).digest() + blob

    def _load(self, signed: bytes) -> Any:
        signature, blob = signed[:32], signed[32:]
        if not hmac.compare_digest(signature, hmac.new(self._secret, blob, hashlib.sha256).digest()):
            raise ValueError(f"{self.directory}: a stored state entry is not signed by this checkpoint directory's key")
        return pickle.loads(blob)

    def save(self, checkpoint: int, layout: dict[str, list[int]], deltas: dict[int, StateDelta]) -> None:
        pipe = self._redis.pipeline(transaction=True)
        for task, delta in deltas.items():
            name = f"{self.prefix}:task:{task}"
            if delta.deletes:
                pipe.hdel(name, *(self._sign(k) for k in delta.deletes))
            if delta.puts:
                pipe.hset(name, mapping={self._sign(k): self._sign(v) for k, v in delta.puts.items()})
        pipe.set(f"{self.prefix}:layout", json.dumps(layout))
        pipe.set(f"{self.prefix}:checkpoint", checkpoint)
        pipe.execute()

    def compact(self, checkpoint: int, layout: dict[str, list[int]], states: dict[int, dict[Any, Any]]) -> None:
        """Every task's whole state, replacing what is stored; only needed when the tasks changed, since each
        task's hash is its whole state already."""
        pipe = self._redis.pipeline(transaction=True)
        for name in self._redis.scan_iter(f"{self.prefix}:task:*"):
            pipe.delete(name)
        for task, state in states.items():
            if state:
                signed = {self._sign(k): self._sign(v) for k, v in state.items()}
                pipe.hset(f"{self.prefix}:task:{task}", mapping=signed)
        pipe.set(f"{self.prefix}:layout", json.dumps(layout))
        pipe.set(f"{self.prefix}:checkpoint", checkpoint)
        pipe.execute()

    def load(self) -> Restored:
        checkpoint = self._redis.get(f"{self.prefix}:checkpoint")
        if checkpoint is None:
            return Restored()
        layout = json.loads(self._redis.get(f"{self.prefix}:layout"))
        states = {}
        for task in (t for tasks in layout.values() for t in tasks):
            stored = self._redis.hgetall(f"{self.prefix}:task:{task}")
            states[task] = {self._load(k): self._load(v) for k, v in stored.items()}
        return Restored(int(checkpoint), layout, states)


def _secret(path: str) -> bytes:
    """The signing key in ``path``, made (owner-only) the first time."""
    try:
        with open(path, "rb") as source:
            return source.read()
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(secrets.token_bytes(32))
        return _secret(path)


def _local(checkpoint_dir: str) -> str:
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("file:"):
        raise ValueError(
            f"squall.checkpoint.dir {checkpoint_dir!r}: stateful bolts' checkpoints need a path on the driver's"
            " machine (or a file: URL)"
        )
    return checkpoint_dir.removeprefix("file://").removeprefix("file:")


def open_state_provider(
    kind: str, checkpoint_dir: str, topology: str, redis_url: str | None = None
) -> FileStateProvider | RedisStateProvider:
    """The provider ``topology.state.provider`` names, for the topology ``topology``."""
    local = os.path.join(_local(checkpoint_dir), topology)
    if kind == "file":
        return FileStateProvider(os.path.join(local, "state"))
    if kind == "redis":
        if not redis_url:
            raise ValueError("topology.state.provider 'redis' needs squall.redis.url")
        return RedisStateProvider(redis_url, topology, os.path.join(local, "state.key"))
    raise ValueError(f"topology.state.provider: unknown provider {kind!r}; known: ['file', 'redis']")
