"""Where the workers keep what a lost worker's tasks restart from, under ``squall.checkpoint.dir``.

When spouts run on the workers (``LocalCluster``, ``squall run``), the driver holds no bolt state:

* every ``squall.snapshot.interval.ms`` (or less often, when writing them would take more than ``SNAPSHOT_SHARE``
  of a worker's time: ``snapshot_spacing``; or sooner, once a spout task has emitted half of
  ``topology.max.spout.pending`` trees since the last) the driver marks a wave as a *snapshot wave*; at its end
  every plain bolt task that executed anything since its last snapshot writes its attributes, pickled, to
  ``<dir>/<run>/snapshots/<wave>/task-<task>`` and reports only that it did;
* every spout task logs what it emitted in each wave under ``<dir>/<run>/spout-log/task-<task>/``, the input a
  restarted run replays: on a disk of the worker's own host appended to a segment file
  (``segment-<first wave>-<time made>-<token>``), one sealed record for a wave's first calls and one for each
  part of it while it is open, since creating a file costs far more than appending to one; on a network mount
  or an object store one file for each (``wave-<wave>``, then ``wave-<wave>.<part>``), closed before any tree
  of it can be acked;
* when every task has reported a snapshot wave, the driver records it as the last complete snapshot
  (``<dir>/<run>/snapshots/COMPLETE``) and removes the snapshots no longer needed; its next ``Commit`` tells
  the spout tasks, which remove their logs up to it.

After a worker loss every bolt task restarts from the last complete snapshot, and the waves since it are run
again from the spout logs, their acks dropped: they were applied the first time. A task's state after a
worker loss thus holds every tree that was acked, as before, while the per-wave cost no longer grows with
the state a task holds.

Any filesystem pyarrow reaches serves: a local path (one every host shares, on a cluster), ``hdfs://``,
``s3://``, ``gs://``. Files are written under a temporary name and renamed, so they are there whole or not at
all. A segment is the exception: its records are written one after another, each flushed to the kernel before
the wave's trees can be acked, and a record its writer did not finish (the worker died writing it) is read as
absent, as a wave file never renamed would be: no tree of that wave was acked. A segment is closed when a
snapshot completes, and removed once every wave in it is one the snapshot holds. A worker reads either layout,
whichever it writes. Every snapshot and spout log record is sealed under the checkpoint key
(``squall/security/sealing.py``) and opened before it is unpickled: a file changed by anyone without the key
is refused, naming its path.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import struct
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

from pyarrow import fs as pafs

from squall.security.sealing import BlobSealer, TamperedBlobError
from squall.spark.protocol import Batch, dumps

COMPLETE = "COMPLETE"
SEGMENT_MAGIC = b"squall spout log 1\n"  # a segment's first bytes
SEGMENT_PREFIX = "segment-"
RECORD_HEADER = struct.Struct("<QQ")  # a segment's record: its wave, then the length of the sealed bytes that follow
SEALED_RECORD = struct.Struct("<QQ")  # inside the sealed bytes, before the pickled batches: the task, the wave


# Filesystems of one host's own disks or memory: a spout log there is appended to. On any other (a network
# mount), what a host that dies had appended may never reach the server, so each wave is a file closed at once.
HOST_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "overlay"})


def on_host_disk(path: str) -> bool:
    """Whether ``path`` (which need not exist yet) lies on one of ``HOST_FILESYSTEMS``: the filesystem of the
    device its nearest existing directory is on, by this host's ``/proc/self/mountinfo``."""
    probe = os.path.realpath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        device = os.stat(probe).st_dev
        with open("/proc/self/mountinfo") as mountinfo:
            return filesystem_of(device, mountinfo.read()) in HOST_FILESYSTEMS
    except OSError:  # not Linux: not known to be safe
        return False


def filesystem_of(device: int, mountinfo: str) -> str | None:
    """The filesystem type that ``mountinfo`` (``/proc/self/mountinfo``'s text) gives device ``device``."""
    for line in mountinfo.splitlines():
        fields, _, after = line.partition(" - ")
        numbers = fields.split()[2:3]
        if not after or not numbers or numbers[0].count(":") != 1:
            continue
        major, minor = numbers[0].split(":")
        if major.isdigit() and minor.isdigit() and os.makedev(int(major), int(minor)) == device:
            return after.split()[0]
    return None


def wave_file(name: str) -> int | None:
    """The wave a spout log file of one wave's emits (``wave-<wave>``, or ``wave-<wave>.<part>`` for those after
    its first) holds; None for any other name."""
    return wave_part(name)[0]


def wave_part(name: str) -> tuple[int | None, int]:
    """``(wave, part)`` of a spout log file's name (``wave_file``); ``(None, 0)`` for any other name."""
    number = name.removeprefix("wave-")
    wave, _, part = number.partition(".")
    if number == name or not wave.isdigit() or (_ and not (part.isdigit() and int(part) > 0)):
        return None, 0  # a part after the first is numbered from 1: ``wave-<n>.`` and ``wave-<n>.0`` are no names
    return int(wave), int(part or 0)


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
        # Spout logs appended to segment files: on this host's own disk only.
        self.segments = isinstance(self.filesystem, pafs.LocalFileSystem) and on_host_disk(self.base)
        self._open_segments: dict[int, tuple[str, pafs.NativeFile]] = {}  # spout task -> the segment written now
        self._last_waves: dict[str, int] = {}  # segment written here -> the last wave it holds
        self._records: dict[int, dict[int, list[memoryview]]] = {}  # spout task -> wave -> its parts' batches
        self._file_parts: dict[int, tuple[int, int]] = {}  # spout task -> (wave, part) of its last wave file
        self._segment_clock = 0  # nanoseconds in the name of the segment made last: later ones sort after it

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
    def _spout_log(self, task: int) -> str:
        return f"{self.base}/spout-log/task-{task}"

    def log_spout_wave(self, task: int, wave: int, blob: bytes) -> None:
        """Write what spout task ``task`` emitted in ``wave``, or in a part of it (an open wave's emits leave in
        parts, each logged in turn): ``pickle_spout_wave`` of its batches. It is in the kernel's hands when this
        returns, so it outlives this worker's process."""
        if not self.segments:
            last_wave, part = self._file_parts.get(task, (None, 0))
            part = part + 1 if last_wave == wave else 0
            self._file_parts[task] = (wave, part)
            self._write(f"{self._spout_log(task)}/wave-{wave}" + (f".{part}" if part else ""), blob)
            return
        path, stream = self._open_segments.get(task) or self._new_segment(task, wave)
        sealed = self.sealer.seal(SEALED_RECORD.pack(task, wave) + blob)
        try:
            stream.write(RECORD_HEADER.pack(wave, len(sealed)) + sealed)
            stream.flush()
        except BaseException:  # a record cut short ends its segment: the next record starts a new one
            del self._open_segments[task]
            stream.close()
            raise
        self._last_waves[path] = wave

    def _new_segment(self, task: int, wave: int) -> tuple[str, pafs.NativeFile]:
        directory = self._spout_log(task)
        self.filesystem.create_dir(directory, recursive=True)
        # Named in the order written: a wave's parts may span two segments (a snapshot completed in between).
        self._segment_clock = max(self._segment_clock + 1, time.time_ns())
        path = f"{directory}/{SEGMENT_PREFIX}{wave:012d}-{self._segment_clock:020d}-{uuid.uuid4().hex[:12]}"
        stream = self.filesystem.open_output_stream(path)
        try:
            stream.write(SEGMENT_MAGIC)
        except BaseException:
            stream.close()
            raise
        self._open_segments[task] = (path, stream)
        return path, stream

    def drop_spout_waves(self, task: int, through: int) -> None:
        """A complete snapshot holds the effects of spout task ``task``'s waves up to ``through``: their logs may
        go. The segment written now is closed, so that the next record starts a new one; every wave file up to
        ``through`` goes, and every segment whose last wave is (one a worker that died left too)."""
        if task in self._open_segments:
            self._open_segments.pop(task)[1].close()
        directory = self._spout_log(task)
        for name in self._children(directory):
            path = f"{directory}/{name}"
            if (wave := wave_file(name)) is not None:
                gone = wave <= through
            elif name.startswith(SEGMENT_PREFIX):
                last = self._last_waves.get(path)
                if last is None:  # written by a worker that is gone: its records say, and they stay as they are
                    try:
                        last = max((wave for wave, _ in self._read_segment(task, path)), default=0)
                    except (FileNotFoundError, OSError, TamperedBlobError):
                        continue  # left for the run's end, which removes its directory
                    self._last_waves[path] = last
                gone = last <= through
            else:
                continue
            if gone:
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.filesystem.delete_file(path)
                self._last_waves.pop(path, None)

    def _read_segment(self, task: int, path: str) -> Iterator[tuple[int, memoryview]]:
        """Each whole record of one of spout task ``task``'s segments, as (wave, its pickled batches), each opened
        under the checkpoint key first. A record cut short ends it, and a segment cut short before its first
        record holds none: a worker died writing them, and no tree of that wave was acked."""
        with self.filesystem.open_input_stream(path) as stream:
            view = memoryview(stream.read())
        if len(view) < len(SEGMENT_MAGIC) and SEGMENT_MAGIC.startswith(bytes(view)):
            return
        if bytes(view[: len(SEGMENT_MAGIC)]) != SEGMENT_MAGIC:
            raise TamperedBlobError(path, "it is not a spout log squall wrote")
        at = len(SEGMENT_MAGIC)
        while at + RECORD_HEADER.size <= len(view):
            wave, size = RECORD_HEADER.unpack_from(view, at)
            at += RECORD_HEADER.size
            if at + size > len(view):
                return
            data = self.sealer.open(view[at : at + size], path)
            if SEALED_RECORD.unpack_from(data) != (task, wave):
                raise TamperedBlobError(path, f"its record of task {task}'s wave {wave} holds another's")
            yield wave, data[SEALED_RECORD.size :]
            at += size

    def _spout_records(self, task: int, fresh: bool = False) -> dict[int, list[memoryview]]:
        """Wave -> its parts' pickled batches in the order written, from every segment of spout task ``task``:
        read once, and again when ``fresh`` (another worker may have written since)."""
        records = None if fresh else self._records.get(task)
        if records is None:
            records = {}
            directory = self._spout_log(task)
            for name in sorted(self._children(directory)):
                if name.startswith(SEGMENT_PREFIX):
                    for wave, part in self._read_segment(task, f"{directory}/{name}"):
                        records.setdefault(wave, []).append(part)
            self._records[task] = records
        return records

    def logged_spout_waves(self, task: int) -> list[int]:
        """The waves of spout task ``task`` whose logs can be read, in order."""
        files = {wave_file(name) for name in self._children(self._spout_log(task))} - {None}
        return sorted(files | set(self._spout_records(task, fresh=True)))

    def spout_wave(self, task: int, wave: int) -> list[Batch]:
        """What spout task ``task`` emitted in ``wave``; nothing if it emitted nothing then (no log of it). Either
        layout is read, whichever this worker writes: the worker that wrote it may have been on another host."""
        records = self._spout_records(task)
        if wave not in records:
            records = self._spout_records(task, fresh=True)
        if wave in records:
            return [batch for part in records[wave] for batch in pickle.loads(part)]
        directory = self._spout_log(task)
        parts = sorted((part, name) for name in self._children(directory) for w, part in [wave_part(name)] if w == wave)
        batches: list[Batch] = []
        for _, name in parts:
            try:
                batches += pickle.loads(self._read(f"{directory}/{name}"))
            except FileNotFoundError:
                break
        return batches

    def close(self) -> None:
        """Close the segments this store writes (a new wave opens a new one), and forget what it read."""
        for _, stream in self._open_segments.values():
            stream.close()
        self._open_segments.clear()
        self._records.clear()

    def remove(self) -> None:
        self.close()
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
