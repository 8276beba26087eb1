"""Where stateful bolts' checkpoints go (``topology.state.provider``): ``file`` or ``redis``.

``FileStateProvider`` (``file``, the default) keeps a topology's checkpoints
under ``<squall.checkpoint.dir>/<topology name>/state/``:

* ``delta-<id>.pickle``: what every stateful task's state changed since the
  checkpoint before, with the tasks each stateful component had;
* ``base-<id>.pickle``: every task's whole state as of checkpoint ``id``,
  written every ``COMPACT_EVERY`` checkpoints, after which older files go.

Those two are written by the driver, which under ``TestCluster`` holds every
task's state. Under ``LocalCluster`` and ``squall run`` each task writes its own
part where it runs, and the driver only says which checkpoint is complete:

* ``part-<id>-<task>.pickle``: what one task's state changed since its last
  part, or its whole state (after a restart, and every ``COMPACT_EVERY``
  checkpoints); part of no checkpoint until a commit names it;
* ``commit-<id>.pickle``: checkpoint ``id`` is complete, and which parts it
  takes in, with the tasks each stateful component had.

``blobs/<owner>/<name>.pickle`` hold values too large to keep in memory, written
once and never changed (a persistent window's sealed partitions); the state
names them, and they go once no state that could be restored names them
(``squall/state/blobs.py``).

Every file is sealed under the checkpoint key (``squall/security/sealing.py``):
signed, or encrypted when ``squall.checkpoint.encrypt`` is on. A file is opened
before it is unpickled, and one that was not sealed with the key is refused with
an error naming its path.

A file is written under a temporary name, flushed to disk and renamed, so a
checkpoint is there whole or not at all: one cut off midway (the driver killed
during the write) is ignored on restart, never half-applied. Restoring applies
the files in checkpoint order from the newest whole one. Parts are written by
the workers, so the directory must be one every worker reaches (a shared
mount on a cluster).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark import cloudpickle  # values of classes shipped by value, as bolts' tasks send them

from squall.model.state import StateDelta
from squall.model.urls import redact
from squall.security.sealing import BlobSealer

COMPACT_EVERY = 20
_FILE = re.compile(r"^(base|delta|commit)-(\d{12})\.pickle$|^(part)-(\d{12})-\d+\.pickle$")


@dataclass
class StatePart:
    """One task's part of a checkpoint: what its state changed since its last part, or (``whole``) all of it."""

    puts: dict[Any, Any] = field(default_factory=dict)
    deletes: list[Any] = field(default_factory=list)
    whole: bool = False

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes)

    def apply(self, states: dict[int, dict[Any, Any]], task: int) -> None:
        if self.whole:
            states[task] = dict(self.puts)
        else:
            StateDelta(self.puts, self.deletes).apply(states.setdefault(task, {}))


@dataclass(frozen=True)
class StateStoreSpec:
    """Where a topology's stateful bolts' checkpoints go, as the workers open it. It travels to the workers
    without its ``sealer``, which holds the checkpoint key: each worker attaches its own (``sealed_with``), made
    from the keys that reached it in the Spark task closure."""

    kind: str  # file | redis
    location: str  # the directory, or the Redis URL
    topology: str = ""
    sealer: BlobSealer | None = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple:
        return StateStoreSpec, (self.kind, self.location, self.topology)

    def sealed_with(self, sealer: BlobSealer) -> StateStoreSpec:
        return StateStoreSpec(self.kind, self.location, self.topology, sealer)

    def open(self) -> FileStateProvider | RedisStateProvider:
        if self.sealer is None:
            raise ValueError(f"the state store at {redact(self.location)} is opened without the checkpoint key")
        if self.kind == "file":
            return FileStateProvider(self.location, self.sealer)
        return RedisStateProvider(self.location, self.topology, self.sealer)


@dataclass
class Restored:
    """The state as of the last complete checkpoint: its id, the tasks of each component, each task's map."""

    checkpoint: int = 0
    layout: dict[str, list[int]] = field(default_factory=dict)
    states: dict[int, dict[Any, Any]] = field(default_factory=dict)


class FileStateProvider:
    def __init__(self, directory: str, sealer: BlobSealer) -> None:
        self.directory = directory
        self.sealer = sealer
        os.makedirs(directory, exist_ok=True)

    def spec(self) -> StateStoreSpec:
        return StateStoreSpec("file", self.directory, sealer=self.sealer)

    def _path(self, kind: str, checkpoint: int) -> str:
        return os.path.join(self.directory, f"{kind}-{checkpoint:012d}.pickle")

    def _write(self, path: str, record: dict) -> None:
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "wb") as out:
            for piece in self.sealer.seal_parts(cloudpickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)):
                out.write(piece)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)

    def _read(self, path: str) -> Any:
        """The record in ``path``, unpickled only once its seal holds (``TamperedBlobError`` naming it)."""
        with open(path, "rb") as source:
            return pickle.loads(self.sealer.open(source.read(), path))

    def _files(self) -> list[tuple[int, str, str]]:
        """``(checkpoint id, kind, path)`` of every complete file (a base, delta, commit or part), oldest first."""
        found = []
        for name in os.listdir(self.directory):
            match = _FILE.match(name)
            if match:
                kind, number = match.group(1) or match.group(3), match.group(2) or match.group(4)
                found.append((int(number), kind, os.path.join(self.directory, name)))
        return sorted(found, key=lambda f: (f[0], f[1] == "delta"))

    def _remove(self, doomed: Callable[[int, str], bool]) -> None:
        """Remove every file whose ``(checkpoint id, kind)`` is ``doomed``: commits first, so that a crash on the
        way never leaves a commit naming a part that is gone."""
        for number, kind, path in sorted(self._files(), key=lambda f: f[1] != "commit"):
            if doomed(number, kind):
                os.remove(path)

    # -- checkpoints whose parts the tasks write --------------------------------------------
    def _part_path(self, checkpoint: int, task: int) -> str:
        return os.path.join(self.directory, f"part-{checkpoint:012d}-{task}.pickle")

    def prepare(self, checkpoint: int, task: int, part: StatePart) -> None:
        """Task ``task``'s part of checkpoint ``checkpoint``, written where the task runs."""
        self._write(self._part_path(checkpoint, task), {"part": part})

    def commit(self, checkpoint: int, layout: dict[str, list[int]], parts: list[tuple[int, int, bool]]) -> None:
        """Checkpoint ``checkpoint`` is complete: it takes in the ``(checkpoint, task, whole)`` parts the tasks
        prepared since the last one, in order. Once every task's part of it is whole, older files go."""
        tasks = {t for ts in layout.values() for t in ts}
        whole = tasks <= {task for number, task, is_whole in parts if number == checkpoint and is_whole}
        if whole:  # every task's whole state is in this checkpoint's parts: the older parts are not needed
            parts = [p for p in parts if p[0] == checkpoint]
        self._write(self._path("commit", checkpoint), {"layout": layout, "parts": parts})
        if whole:
            self._remove(lambda number, _: number < checkpoint)

    def discard_uncommitted(self, last: int) -> None:
        """Remove the parts of checkpoints after ``last``, which no commit names: a run cut off before them."""
        self._remove(lambda number, kind: kind == "part" and number > last)

    def compact(self, checkpoint: int, layout: dict[str, list[int]], states: dict[int, dict[Any, Any]]) -> None:
        """Every task's whole state as of ``checkpoint`` (already saved); the files it makes redundant go."""
        self._write(self._path("base", checkpoint), {"layout": layout, "states": states})
        self._remove(lambda number, kind: number < checkpoint or (number == checkpoint and kind != "base"))

    def load(self) -> Restored:
        """The state as of the newest complete checkpoint (nothing at all before the first)."""
        restored = Restored()
        files = self._files()
        bases = [f for f in files if f[1] == "base"]
        start = 0
        if bases:
            number, _, path = bases[-1]
            record = self._read(path)
            restored = Restored(number, record["layout"], record["states"])
            start = number
        for number, kind, path in files:
            if kind in ("base", "part") or number <= start:
                continue
            record = self._read(path)
            if kind == "delta":
                for task, delta in record["deltas"].items():
                    delta.apply(restored.states.setdefault(task, {}))
            else:  # a commit: the parts it takes in, in order
                for part_number, task, _ in record["parts"]:
                    self._read(self._part_path(part_number, task))["part"].apply(restored.states, task)
            restored.checkpoint, restored.layout = number, record["layout"]
        return restored

    # -- blobs: values written once beside the state, named by it -----------------------------------
    def _blob_path(self, owner: str, name: str) -> str:
        return os.path.join(self.directory, "blobs", owner, f"{name}.pickle")

    def put_blob(self, owner: str, name: str, data: bytes) -> None:
        path = self._blob_path(owner, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "wb") as out:
            for piece in self.sealer.seal_parts(data):
                out.write(piece)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        directory = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(directory)  # durable before any checkpoint names it
        finally:
            os.close(directory)

    def get_blob(self, owner: str, name: str) -> memoryview:
        path = self._blob_path(owner, name)
        with open(path, "rb") as source:
            return self.sealer.open(source.read(), path)

    def blob_names(self, owner: str) -> list[str]:
        try:
            found = os.listdir(os.path.dirname(self._blob_path(owner, "x")))
        except FileNotFoundError:
            return []
        return [name.removesuffix(".pickle") for name in found if name.endswith(".pickle")]

    def delete_blobs(self, owner: str, names: list[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._blob_path(owner, name))


class RedisStateProvider:
    """Checkpoints in Redis (``redis``), as Storm's ``RedisKeyValueStateProvider`` keeps them: each stateful task's
    state is a hash, ``squall:state:<topology>:task:<task>``, updated in place.

    A checkpoint is one ``MULTI``/``EXEC``: every task's puts and deletes, the tasks of each component and the
    checkpoint's id go in together or not at all. The server must keep its data (an append-only file with
    ``appendfsync always`` keeps every checkpoint it confirmed). Keys and values are pickled and signed with
    sealed under the checkpoint key (``squall/security/sealing.py``): what comes back from the server is
    unpickled only when its seal holds. Keys are signed, never encrypted, since a hash field must be the same
    bytes each time it is written; values are encrypted too when ``squall.checkpoint.encrypt`` is on.
    """

    def __init__(self, url: str, topology: str, sealer: BlobSealer) -> None:
        import redis

        self.url, self.topology, self.prefix = url, topology, f"squall:state:{topology}"
        self.directory = f"{redact(url)} ({self.prefix})"
        self._redis = redis.Redis.from_url(url)
        self.sealer = sealer
        self._key_sealer = sealer.signing_only()

    def spec(self) -> StateStoreSpec:
        return StateStoreSpec("redis", self.url, self.topology, self.sealer)

    def _sign(self, value: Any) -> bytes:
        return self._key_sealer.seal(cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def _seal(self, value: Any) -> bytes:
        return self.sealer.seal(cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def _load(self, sealed: bytes, what: str) -> Any:
        return pickle.loads(self.sealer.open(sealed, f"{self.directory}: {what}"))

    def compact(self, checkpoint: int, layout: dict[str, list[int]], states: dict[int, dict[Any, Any]]) -> None:
        """Every task's whole state, replacing what is stored; only needed when the tasks changed, since each
        task's hash is its whole state already."""
        pipe = self._redis.pipeline(transaction=True)
        for name in self._redis.scan_iter(f"{self.prefix}:task:*"):
            pipe.delete(name)
        for task, state in states.items():
            if state:
                signed = {self._sign(k): self._seal(v) for k, v in state.items()}
                pipe.hset(f"{self.prefix}:task:{task}", mapping=signed)
        pipe.set(f"{self.prefix}:layout", json.dumps(layout))
        pipe.set(f"{self.prefix}:checkpoint", checkpoint)
        pipe.execute()

    def prepare(self, checkpoint: int, task: int, part: StatePart) -> None:
        """Task ``task``'s part of checkpoint ``checkpoint``, written where the task runs, beside its state."""
        name = f"{self.prefix}:part:{checkpoint}:{task}"
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(f"{name}:puts", f"{name}:deletes", f"{name}:whole")
        if part.whole:
            pipe.set(f"{name}:whole", 1)
        if part.deletes:
            pipe.sadd(f"{name}:deletes", *(self._sign(k) for k in part.deletes))
        if part.puts:
            pipe.hset(f"{name}:puts", mapping={self._sign(k): self._seal(v) for k, v in part.puts.items()})
        pipe.execute()

    def commit(self, checkpoint: int, layout: dict[str, list[int]], parts: list[tuple[int, int, bool]]) -> None:
        """Checkpoint ``checkpoint`` is complete: the server applies the parts it takes in to the tasks' hashes,
        in order, in one script, so their data never passes through the driver."""
        names = [str(value) for number, task, _ in parts for value in (number, task)]
        self._redis.eval(_COMMIT_PARTS, 0, self.prefix, checkpoint, json.dumps(layout), *names)

    def discard_uncommitted(self, last: int) -> None:
        for name in self._redis.scan_iter(f"{self.prefix}:part:*"):
            if int(name.decode().split(":part:", 1)[1].split(":", 1)[0]) > last:
                self._redis.delete(name)

    def load(self) -> Restored:
        checkpoint = self._redis.get(f"{self.prefix}:checkpoint")
        if checkpoint is None:
            return Restored()
        layout = json.loads(self._redis.get(f"{self.prefix}:layout"))
        states = {}
        for task in (t for tasks in layout.values() for t in tasks):
            stored = self._redis.hgetall(f"{self.prefix}:task:{task}")
            where = f"task {task}'s state"
            states[task] = {self._load(k, where): self._load(v, where) for k, v in stored.items()}
        return Restored(int(checkpoint), layout, states)

    # -- blobs: values written once beside the state, named by it (signed, as the state's entries are) -------
    def _blob_key(self, owner: str, name: str) -> str:
        return f"{self.prefix}:blob:{owner}:{name}"

    def put_blob(self, owner: str, name: str, data: bytes) -> None:
        self._redis.set(self._blob_key(owner, name), self.sealer.seal(data))

    def get_blob(self, owner: str, name: str) -> memoryview:
        sealed = self._redis.get(self._blob_key(owner, name))
        if sealed is None:
            raise KeyError(f"{self.directory}: no blob {owner}/{name}")
        return self.sealer.open(sealed, f"{self.directory}: blob {owner}/{name}")

    def blob_names(self, owner: str) -> list[str]:
        start = len(self._blob_key(owner, ""))
        return [key.decode()[start:] for key in self._redis.scan_iter(self._blob_key(owner, "*"))]

    def delete_blobs(self, owner: str, names: list[str]) -> None:
        if names:
            self._redis.delete(*(self._blob_key(owner, name) for name in names))


_COMMIT_PARTS = """
local prefix = ARGV[1]
for i = 4, #ARGV, 2 do
  local part = prefix .. ':part:' .. ARGV[i] .. ':' .. ARGV[i + 1]
  local task = prefix .. ':task:' .. ARGV[i + 1]
  if redis.call('EXISTS', part .. ':whole') == 1 then
    redis.call('DEL', task)
  end
  local deletes = redis.call('SMEMBERS', part .. ':deletes')
  for j = 1, #deletes, 1000 do
    redis.call('HDEL', task, unpack(deletes, j, math.min(j + 999, #deletes)))
  end
  local puts = redis.call('HGETALL', part .. ':puts')
  for j = 1, #puts, 2000 do
    redis.call('HSET', task, unpack(puts, j, math.min(j + 1999, #puts)))
  end
  redis.call('DEL', part .. ':puts', part .. ':deletes', part .. ':whole')
end
redis.call('SET', prefix .. ':layout', ARGV[3])
redis.call('SET', prefix .. ':checkpoint', ARGV[2])
"""


def _local(checkpoint_dir: str) -> str:
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("file:"):
        raise ValueError(
            f"squall.checkpoint.dir {checkpoint_dir!r}: stateful bolts' checkpoints need a path on the driver's"
            " machine (or a file: URL)"
        )
    return checkpoint_dir.removeprefix("file://").removeprefix("file:")


def open_state_provider(
    kind: str, checkpoint_dir: str, topology: str, sealer: BlobSealer, redis_url: str | None = None
) -> FileStateProvider | RedisStateProvider:
    """The provider ``topology.state.provider`` names, for the topology ``topology``, sealing with ``sealer``."""
    if kind == "file":
        return FileStateProvider(os.path.join(_local(checkpoint_dir), topology, "state"), sealer)
    if kind == "redis":
        if not redis_url:
            raise ValueError("topology.state.provider 'redis' needs squall.redis.url")
        return RedisStateProvider(redis_url, topology, sealer)
    raise ValueError(f"topology.state.provider: unknown provider {kind!r}; known: ['file', 'redis']")
