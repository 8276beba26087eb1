"""Where the workers keep what a lost worker's tasks restart from, under ``squall.checkpoint.dir``.

When spouts run on the workers (``LocalCluster``, ``squall run``), the driver holds no bolt state:

* every ``squall.snapshot.interval.ms`` (or less often, when writing them would take more than ``SNAPSHOT_SHARE``
  of a worker's time: ``snapshot_spacing``; or sooner, once a spout task has emitted half of
  ``topology.max.spout.pending`` trees since the last) the driver marks a wave as a *snapshot wave*; at its end
  every plain bolt task that executed anything since its last snapshot writes its attributes, pickled, to
  ``<dir>/<run>/snapshots/<wave>/task-<task>`` and reports only that it did;
* every spout task writes what it emitted in each wave to ``<dir>/<run>/spout-log/task-<task>/wave-<wave>``,
  the input a restarted run replays;
* when every task has reported a snapshot wave, the driver records it as the last complete snapshot
  (``<dir>/<run>/snapshots/COMPLETE``) and removes the snapshots no longer needed; its next ``Commit`` tells
  the spout tasks, which remove their logs up to it.

After a worker loss every bolt task restarts from the last complete snapshot, and the waves since it are run
again from the spout logs, their acks dropped: they were applied the first time. A task's state after a
worker loss thus holds every tree that was acked, as before, while the per-wave cost no longer grows with
the state a task holds.

Any filesystem pyarrow reaches serves: a local path (one every host shares, on a cluster), ``hdfs://``,
``s3://``, ``gs://``. Files are written under a temporary name and renamed, so they are there whole or not at
all. Every snapshot and spout log is sealed under the checkpoint key (``squall/security/sealing.py``) and
opened before it is unpickled: a file changed by anyone without the key is refused, naming its path.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import uuid
from urllib.parse import urlparse

from pyarrow import fs as pafs

from squall.security.sealing import BlobSealer
from squall.spark.protocol import Batch, dumps

COMPLETE = "COMPLETE"


SNAPSHOT_SHARE = 0.01  # interval snapshots take at most this share of a worker's time
RUN_SUFFIX = re.compile(r"-[0-9a-f]{12}")  # a run's directory is ``<topology name>-<12 hex digits>``


def snapshot_spacing(interval: float, seconds_per_worker: dict[int, float]) -> float:
    """Seconds until the next snapshot wave: the interval, or longer, so that the busiest worker spends at most
    ``SNAPSHOT_SHARE`` of its time writing snapshots as large as the last (``seconds_per_worker``)."""
    return max(interval, max(seconds_per_worker.values(), default=0.0) / SNAPSHOT_SHARE)


class SnapshotTimer:
    """When the next snapshot wave is due: ``interval`` seconds after the last one was sent, or longer once what
    writing it cost is known (``snapshot_spacing``). That cost spaces the wave that follows it, so a costly
    snapshot is never followed by another only ``interval`` later.

    With ``emits_between`` (half of ``topology.max.spout.pending``), a snapshot wave is due sooner too: once a
    spout task has emitted that many trees in the waves after the last snapshot wave, as long as snapshots stay
    within ``SNAPSHOT_SHARE`` of a worker's time. What a worker loss runs again from the spout logs (the waves
    since the last complete snapshot) then stays near ``max.spout.pending`` trees a spout task, however fast the
    spouts emit."""

    def __init__(self, interval: float, now: float, emits_between: int | None = None) -> None:
        self.interval = interval
        self.next_at = now  # the first wave is a snapshot wave
        self.sent_at: float | None = None
        self.emits_between = emits_between
        self.cost_spacing = 0.0  # the least time between two snapshot waves for their cost alone (``written``)
        self.sent_wave = -1
        self._emitted: dict[int, int] = {}  # spout task -> trees emitted in the waves after ``sent_wave``

    @property
    def spacing(self) -> float:
        """Seconds from one snapshot wave to the next by the clock: the interval, or what their cost asks."""
        return max(self.interval, self.cost_spacing)

    def due(self, now: float) -> bool:
        if now >= self.next_at:
            return True
        if self.emits_between is None or max(self._emitted.values(), default=0) < self.emits_between:
            return False
        return self.sent_at is None or now >= self.sent_at + self.cost_spacing

    def sent(self, now: float, wave: int) -> None:
        self.sent_at, self.next_at, self.sent_wave = now, now + self.spacing, wave
        self._emitted.clear()

    def emitted(self, wave: int, per_task: dict[int, int]) -> None:
        """Wave ``wave`` completed, its spout tasks having emitted ``per_task`` trees."""
        if self.emits_between is None or wave <= self.sent_wave:
            return
        for task, emits in per_task.items():
            self._emitted[task] = self._emitted.get(task, 0) + emits

    def written(self, seconds_per_worker: dict[int, float]) -> None:
        """The last snapshot wave sent is written, each worker taking ``seconds_per_worker`` (none: nothing to
        write)."""
        if not seconds_per_worker:
            return
        self.cost_spacing = snapshot_spacing(0.0, seconds_per_worker)
        if self.sent_at is not None:
            self.next_at = self.sent_at + self.spacing


def pickle_spout_wave(batches: list[Batch]) -> bytes:
    """A spout task's batches of one wave, pickled for its log (``SnapshotStore.log_spout_wave``)."""
    return dumps(batches)  # values of shipped classes too


class SnapshotStore:
    def __init__(self, root: str, run_id: str, sealer: BlobSealer) -> None:
        self.sealer = sealer
        if root.startswith("file:"):
            root = urlparse(root).path
        self.filesystem, base = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)
        self.base = f"{base.rstrip('/')}/{run_id}"

    # -- files ------------------------------------------------------------------------------
    def _write(self, path: str, data: bytes, sealed: bool = True) -> None:
        directory = path.rsplit("/", 1)[0]
        self.filesystem.create_dir(directory, recursive=True)
        temporary = f"{directory}/.{uuid.uuid4().hex}.tmp"
        with self.filesystem.open_output_stream(temporary) as out:
            for piece in self.sealer.seal_parts(data) if sealed else (data,):
                out.write(piece)
        self.filesystem.move(temporary, path)

    def _read(self, path: str) -> memoryview:
        """The data sealed in ``path``; ``TamperedBlobError`` naming it if it was not sealed with the key."""
        with self.filesystem.open_input_stream(path) as stream:
            return self.sealer.open(stream.read(), path)

    def _delete_dir(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError, OSError):
            self.filesystem.delete_dir(path)

    def _children(self, path: str) -> list[str]:
        try:
            infos = self.filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except (FileNotFoundError, OSError):
            return []
        return [info.base_name for info in infos if not info.base_name.startswith(".")]

    # -- bolt tasks' snapshots -------------------------------------------------------------
    def task_path(self, wave: int, task: int) -> str:
        return f"{self.base}/snapshots/{wave}/task-{task}"

    def write_task(self, wave: int, task: int, blob: bytes) -> str:
        path = self.task_path(wave, task)
        self._write(path, blob)
        return path

    def read_task(self, path: str) -> memoryview:
        return self._read(path)

    def complete(self, wave: int, keep: set[int]) -> None:
        """Record the snapshot of ``wave`` as complete; remove the snapshot directories not in ``keep`` (those
        some task's last snapshot still lives in). The spout tasks remove their own logs up to it."""
        self._write(f"{self.base}/snapshots/{COMPLETE}", str(wave).encode(), sealed=False)  # never read back
        for name in self._children(f"{self.base}/snapshots"):
            if name.isdigit() and int(name) not in keep and int(name) < wave:
                self._delete_dir(f"{self.base}/snapshots/{name}")

    # -- spout logs ------------------------------------------------------------------------
    def log_spout_wave(self, task: int, wave: int, blob: bytes) -> None:
        """Write what spout task ``task`` emitted in ``wave``: ``pickle_spout_wave`` of its batches."""
        self._write(f"{self.base}/spout-log/task-{task}/wave-{wave}", blob)

    def drop_spout_wave(self, task: int, wave: int) -> None:
        with contextlib.suppress(FileNotFoundError, OSError):
            self.filesystem.delete_file(f"{self.base}/spout-log/task-{task}/wave-{wave}")

    def spout_wave(self, task: int, wave: int) -> list[Batch]:
        """What spout task ``task`` emitted in ``wave``; nothing if it emitted nothing then (no file)."""
        try:
            return pickle.loads(self._read(f"{self.base}/spout-log/task-{task}/wave-{wave}"))
        except FileNotFoundError:
            return []

    def remove(self) -> None:
        self._delete_dir(self.base)

    def remove_earlier_runs(self, name: str) -> list[str]:
        """The directories of earlier runs of topology ``name``, which a driver that was killed leaves behind,
        removed; their names. A new run never reads them (stateful bolts restore from the state provider), and a
        name runs once at a time, as in Storm: its checkpoints are shared."""
        root, own = self.base.rsplit("/", 1)
        earlier = [
            child
            for child in self._children(root)
            if child != own and child.startswith(name) and RUN_SUFFIX.fullmatch(child[len(name) :])
        ]
        for child in earlier:
            self._delete_dir(f"{root}/{child}")
        return earlier
