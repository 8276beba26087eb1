"""The messages of squall's data plane: what the driver, the hub and the worker tasks say to each other.

Every message is a named, slotted dataclass; nothing is read by position.

* ``Hello``        worker -> driver: a worker task (attempt) has connected.
* ``Assign``       driver -> worker: the tasks it hosts, where every task lives, and the state to start from.
* ``WaveInput``    driver -> worker: a wave begins: its spout calls, timeouts and ticks due (``TicksDue``), and
                   the ``Commit`` of the last wave completed.
* ``Commit``       driver -> worker: a wave completed, and the last snapshot that did: spout logs up to it go.
* ``Release``      driver -> worker: a stateful checkpoint completed; the acks it held are applied.
* ``AckerInput``   bolt task -> acker's worker: one wave's acks for the acker tasks there (an ``AckBatch``:
                   ``squall/reliability/acks.py``), applied as they arrive.
* ``SpoutReport``  worker -> driver: its spout tasks' counters for one wave.
* ``Batch``        task -> task, worker to worker: a producer's tuples for one target task in one wave; ``last``
                   ends its part.
* ``TaskReport``   worker -> driver: a task finished a wave: its counters, and where it wrote its snapshot.
* ``WorkerReport`` worker -> driver: every report of a wave from one worker, in one message.
* ``Stop``         driver -> worker: the run is over.

A transactional topology's batches travel in messages of its own (``squall/transactional/messages.py``), through
the same hub, workers and links; a worker hands them to the batch host its run names (``RunSettings.batch_host``).

On the wire a frame is an 8-byte header (payload length, destination) and a
pickle. ``Batch``es go from worker to worker over the links of ``links.py``;
the driver's hub carries control only. Every connection opens with the mutual
handshake of ``squall/security/handshake.py``, which proves both ends hold the
run's secret without sending it; nothing is sent to or unpickled from a peer
before it, and on an encrypted run every frame after it travels sealed with
AES-256-GCM.
"""

from __future__ import annotations

import contextlib
import io
import logging
import pickle
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from types import FunctionType
from typing import Any, BinaryIO

import numpy as np
from pyspark import cloudpickle

from squall.model.tuple import TICK_COMPONENT, TICK_STREAM
from squall.reliability.acks import AckBatch
from squall.security.handshake import FRAME_HEADER, HandshakeFailed, LinkKeys, Session, client_handshake

log = logging.getLogger("squall.links")

HEADER = FRAME_HEADER  # payload length, destination worker
TO_DRIVER = -1
DRIVER = -1  # the producer id of tuples the driver sends (in-process spouts' emits), and of ticks


def wire(cls: type) -> type:
    """Pickle a message class as its field values in order, without their names: frames stay small."""
    names = tuple(f.name for f in fields(cls))

    def __reduce__(self: Any) -> tuple:
        return cls, tuple(getattr(self, name) for name in names)

    cls.__reduce__ = __reduce__
    return cls


@wire
@dataclass(frozen=True, slots=True)
class Snapshot:
    """A bolt task's state after the wave ``version``: its pickled attributes (a stateful bolt's whole
    ``KeyValueState``), in ``blob`` or, written by its worker (``snapshots.py``), at ``path``."""

    version: int
    blob: bytes
    path: str | None = None  # written by its worker (``snapshots.py``): ``blob`` is read from there


@dataclass(slots=True)
class Batch:
    """Tuples one producer sends one target task in one wave, as columns.

    A row's anchors are ``(roots[i], edges[i])`` when it belongs to one tree, the common case;
    a row in several trees (or none) has root 0 and its ``{root: edge}`` in ``trees[i]``, if any.
    """

    generation: int
    wave: int
    producer: int  # the producing task, or DRIVER
    component: str  # the source component of every row
    source: int  # the source task of every row
    target: int
    last: bool = False  # the producer sends nothing more to ``target`` in this wave
    streams: list[str] = field(default_factory=list)
    values: list[tuple] = field(default_factory=list)
    roots: list[int] | np.ndarray = field(default_factory=list)  # uint64 arrays once a task's batch is sealed
    edges: list[int] | np.ndarray = field(default_factory=list)
    trees: dict[int, dict[int, int]] = field(default_factory=dict)

    def add(self, stream: str, values: tuple, root: int = 0, edge: int = 0) -> None:
        """A row in tree ``root`` (0: in none) carrying ``edge``."""
        self.streams.append(stream)
        self.values.append(values)
        self.roots.append(root)
        self.edges.append(edge)

    def __len__(self) -> int:
        return len(self.values)

    def rows(self):
        """``(stream, values)`` for each row, in emission order."""
        return zip(self.streams, self.values, strict=True)

    def __reduce__(self) -> tuple:
        streams: list[str] | str = self.streams
        if streams and streams.count(streams[0]) == len(streams):  # one stream: its name goes once, not a row
            streams = streams[0]
        fields = (self.generation, self.wave, self.producer, self.component, self.source, self.target, self.last)
        return batch_from_wire, (*fields, streams, self.values, self.roots, self.edges, self.trees)


def batch_from_wire(*fields: Any) -> Batch:
    """The ``Batch`` that ``Batch.__reduce__`` pickled; its ``streams`` as one name when every row is on it."""
    batch = Batch(*fields)
    if type(batch.streams) is str:
        batch.streams = [batch.streams] * len(batch.values)
    return batch


@wire
@dataclass(frozen=True, slots=True)
class RunSettings:
    """What every task of a run needs to know beyond its topology."""

    run_id: str
    seed: int  # with the wave and the task, seeds a task's edge ids
    acking: bool
    capture: bool
    num_ackers: int = 0  # topology.acker.executors
    snapshot_root: str | None = None  # where the workers write snapshots and spout logs, when spouts run there
    state_store: Any = None  # squall.state.providers.StateStoreSpec: stateful tasks write their checkpoint parts
    load_aware: bool = False  # shuffle groupings weigh the workers' loads (``load.py``)
    # A run of batches rather than waves: the class a worker hosts its tasks with, called as
    # ``batch_host(shipped, settings, generation, worker, tasks, spout_tasks, placement, to_peer, to_driver)``
    # and then handed every message that is not the runtime's own (a transactional topology's
    # ``squall.transactional.batches.BatchTasks``). It travels by reference: the worker imports it.
    batch_host: Any = None
    committers: frozenset[str] = frozenset()  # a transactional topology's committer bolts
    batch_spout: str | None = None  # the spout whose emitter tasks emit a transactional topology's batches
    request_groups: dict[str, frozenset[str]] | None = None  # request spout -> the bolts its tries run


@wire
@dataclass(frozen=True, slots=True)
class Hello:
    worker: int
    attempt: int
    pid: int
    host: str
    launch: int = 0  # the worker job it belongs to: a job the driver gave up on may still say hello
    address: tuple[str, int] | None = None  # where it listens for its peers' links


@wire
@dataclass(frozen=True, slots=True)
class Assign:
    """Host ``tasks``, starting after wave ``base_wave`` from ``snapshots``; drop anything of older generations."""

    generation: int
    worker: int
    settings: RunSettings
    placement: dict[int, int]  # every bolt task -> the worker that hosts it
    tasks: list[int]
    base_wave: int
    snapshots: dict[int, Snapshot | None]
    peers: dict[int, tuple[str, int]] = field(default_factory=dict)  # every worker -> where it listens
    spout_tasks: list[int] = field(default_factory=list)  # the spout tasks it hosts, when spouts run on workers
    ackers: list[int] = field(default_factory=list)  # the acker tasks it hosts
    acker_workers: dict[int, int] = field(default_factory=dict)  # every acker task -> the worker that hosts it
    applied: int = 0  # the last wave completed: the acks applied of the waves after it are withdrawn (AckGate)
    tree_workers: list[int] = field(default_factory=list)  # the workers hosting spout tasks: their ackers hold trees


@wire
@dataclass(frozen=True, slots=True)
class TicksDue:
    """``count`` tick tuples due for bolt task ``task`` in a wave: the driver keeps the clock, and the task's
    worker makes the tuples (``__system``/``__tick``, values ``(freq_secs,)``), as Storm's executor makes its own."""

    task: int
    freq_secs: float
    count: int = 1

    def batch(self, generation: int, wave: int) -> Batch:
        """The tick tuples themselves, in no tree, for the worker to hand the task."""
        batch = Batch(generation, wave, DRIVER, TICK_COMPONENT, DRIVER, self.task)
        for _ in range(self.count):
            batch.add(TICK_STREAM, (self.freq_secs,))
        return batch


@wire
@dataclass(frozen=True, slots=True)
class WaveInput:
    """Wave ``wave`` begins: the driver's control for this worker's tasks, and the wave's simulated time.
    ``markers`` names each bolt task here whose input from the driver ends with this wave: the worker gives it
    the driver's empty ``last`` batch itself, so a wave's control stays a few bytes a task."""

    generation: int
    wave: int
    simulated_now: float | None
    markers: tuple[int, ...]
    checkpoint: int | None = None  # stateful bolts' pre_commit(checkpoint) runs at the end of this wave
    spout_calls: int = 0  # tuples each spout task here may emit in this wave (a next_tuple call each, or fewer calls)
    rotations: int = 0  # timeout rotations due before them
    active: bool = True  # False: the spouts are deactivated
    snapshot: bool = False  # every bolt task writes its state at the end of this wave (``snapshots.py``)
    replay: bool = False  # a wave run again after a worker loss: the spouts' logged tuples, acks dropped
    commit: Commit | None = None  # the driver's latest Commit not sent yet, applied before the spout calls
    weights: tuple[float, ...] | None = None  # each worker's load weight for shuffles; None: all equal
    ticks: tuple[TicksDue, ...] = ()  # the tick tuples due for this worker's tasks, made here before ``batches``


@wire
@dataclass(frozen=True, slots=True)
class Commit:
    """Driver -> every worker: wave ``wave`` completed (every task reported it). ``snapshot``: the last complete
    snapshot: the waves up to it never run again, so their spout logs and the acker tasks' record of their acks
    go."""

    generation: int
    wave: int
    snapshot: int = 0


@wire
@dataclass(frozen=True, slots=True)
class Release:
    """Driver -> every worker: the checkpoint holding stateful tasks' state as of wave ``wave`` is complete; the
    acks they sent up to that wave may be applied."""

    generation: int
    wave: int


@wire
@dataclass(frozen=True, slots=True)
class AckerInput:
    """Bolt task -> an acker task's worker: the task's acks of one wave for the acker tasks there (possibly none:
    a ``final`` one is sent every wave, so the worker knows when it has them all; a plain task may send parts of
    them before it, when it has nothing else to do). A stateful task's are ``held``."""

    generation: int
    wave: int
    task: int
    acks: AckBatch
    held: bool
    final: bool = True


@wire
@dataclass(slots=True)
class TaskStatus:
    """What a task counted in one wave."""

    executed: int = 0
    emitted: int = 0
    acked: int = 0
    failed: int = 0
    malformed: int = 0
    state_changes: int = 0  # keys a stateful bolt's task put or deleted, saved after the wave
    state_seconds: float = 0.0  # the time it took to save them
    busy_seconds: float = 0.0  # executing its batches' tuples
    snapshot_seconds: float = 0.0  # writing its state as an interval snapshot (``snapshots.py``)
    process_seconds: float = 0.0  # summed over its tuples: from its batch reaching the worker to its execute's end
    inputs: dict[tuple[str, str], int] = field(default_factory=dict)  # (source component, stream) -> executed
    errors: list[str] = field(default_factory=list)
    unpicklable: list[str] = field(default_factory=list)  # left out of the task's snapshot, and not made by prepare()
    repeated: str | None = None  # why the task's run of one repeated error stops the topology (failures.ErrorStreak)


@wire
@dataclass(frozen=True, slots=True)
class TaskReport:
    generation: int
    wave: int
    component: str
    task: int
    status: TaskStatus
    captured: list[tuple]  # default-stream emits, when testing asks for them
    written: Snapshot | None = None  # the snapshot it wrote at the end of a snapshot wave (its path)
    part: tuple[int, bool] | None = None  # (checkpoint, whole): the checkpoint part a stateful task wrote


@wire
@dataclass(slots=True)
class SpoutStatus:
    """What one spout task did since its last report."""

    emitted: int = 0
    acked: int = 0
    failed: int = 0
    timed_out: int = 0
    malformed: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: bytes | None = None  # complete latencies, an encoded HdrHistogram
    repeated: str | None = None  # why the task's run of one repeated error stops the topology (failures.ErrorStreak)


FINAL_REPORT = 0  # the wave of the report a worker's spouts make as the run stops


@wire
@dataclass(frozen=True, slots=True)
class SpoutReport:
    """Worker -> driver: the spout tasks here made their calls of wave ``wave``."""

    generation: int
    wave: int
    worker: int
    spouts: dict[int, tuple[str, SpoutStatus]]  # spout task -> its component and status
    pending: int  # trees of the spout tasks here still pending
    emits: int  # in this wave
    ackers: dict[int, tuple[int, int]] = field(default_factory=dict)  # acker task -> (acks merged, trees settled)
    captured: dict[tuple[str, int], list[tuple]] = field(default_factory=dict)  # (spout, task) -> default-stream emits
    acks_behind: bool = False  # a committed wave's acks had not all reached the acker tasks here


@wire
@dataclass(frozen=True, slots=True)
class WorkerReport:
    """Worker -> driver: every report its tasks (and spout tasks) made for one wave, in one message."""

    reports: list[TaskReport | SpoutReport]
    worker: int = -1
    cpu_seconds: float = 0.0  # the worker process's CPU time when it sent this: the driver reads its load
    buffered_bytes: int = 0  # received and not yet handled, and sent to peers and not yet acknowledged by them
    inbox_peak_bytes: int = 0  # the most its inbox held at once since its report before
    memory_bytes: int = 0  # the worker process's resident memory when it sent this (0: unknown)


@wire
@dataclass(frozen=True, slots=True)
class WorkerFailed:
    """A worker task that cannot go on (its component does not unpickle, ``prepare()`` raised)."""

    worker: int
    message: str


@wire
@dataclass(frozen=True, slots=True)
class LinkBroken:
    """Worker ``worker``'s link to ``peer`` broke in ``generation``: what it sent on it since is lost, and it sends
    the peer nothing more until the next ``Assign``. If the peer was lost, its loss starts the next generation;
    if it is still running, the driver starts one itself, and the waves in flight run again."""

    generation: int
    worker: int
    peer: int
    reason: str


@wire
@dataclass(frozen=True, slots=True)
class Describe:
    """The driver asks a worker what it waits for: a wave in flight has made no progress for long. The worker
    answers with a ``WorkerState`` as soon as its thread is free, whatever its generation."""


@wire
@dataclass(frozen=True, slots=True)
class WorkerState:
    """What worker ``worker`` waits for, in words, for the driver's log: each bolt task's wave and the producers
    whose ``last`` batch it still waits for, the spout part's open and waiting waves, the reports it holds."""

    worker: int
    generation: int
    text: str


@wire
@dataclass(frozen=True, slots=True)
class Stop:
    fail_pending: bool = False  # fail the spouts' pending trees back to them before closing them
    active: bool = True  # False: a kill with a wait deactivated the spouts, which are told before closing
    final: bool = False  # the run is over: the worker's Python process forgets it (its topology and live tasks)


class _FramePickler(pickle.Pickler):
    """Python's own pickler, at C speed, for a frame whose every function and class the other side imports by
    name; any other (one defined in ``__main__``, a notebook or a function, or of a module shipped by value)
    raises, and the frame goes through cloudpickle instead."""

    def reducer_override(self, obj: Any) -> Any:
        if (type(obj) is FunctionType or isinstance(obj, type)) and obj not in _IMPORTABLE:
            if not _importable_by_name(obj):
                raise pickle.PicklingError(f"{obj!r} goes by value")
            _IMPORTABLE.add(obj)
        return NotImplemented


_IMPORTABLE: set[Any] = set()  # functions and classes a frame may name: module-level, so kept for good
_registered_by_value: set[str] = set()  # the modules cloudpickle ships by value, when _IMPORTABLE was filled


def _importable_by_name(obj: Any) -> bool:
    module_name = getattr(obj, "__module__", None)
    if not module_name or module_name == "__main__":
        return False
    if any(module_name == name or module_name.startswith(name + ".") for name in _registered_by_value):
        return False
    found: Any = sys.modules.get(module_name)
    for part in getattr(obj, "__qualname__", "<none>").split("."):
        found = getattr(found, part, None)
    return found is obj


_BY_VALUE = frozenset({str, int, float, bool, bytes, type(None)})


def _rows_share_nothing(batch: Batch) -> bool:
    """Whether ``batch``'s first row holds only strings, numbers, bytes and None: its rows are then taken to share
    no object, and the batch pickles without a memo. Any other first row keeps the memo, which sends an object
    that many rows hold (a transactional batch's attempt in each) once."""
    values = batch.values
    return not values or all(type(value) in _BY_VALUE for value in values[0])


def dumps(message: Any) -> bytes:
    """``message`` pickled, as a frame carries it. Values of classes shipped by value (``shipping.py``) travel
    too: a message that holds one, or a function or class defined where the other side cannot import it, is
    pickled by cloudpickle. A ``Batch`` (or a list of them) of plain values is pickled without a memo, which
    costs a lookup per object and finds nothing to share (``_rows_share_nothing``)."""
    global _registered_by_value
    registered = cloudpickle.list_registry_pickle_by_value()
    if registered != _registered_by_value:
        _IMPORTABLE.clear()
        _registered_by_value = registered
    buffer = io.BytesIO()
    try:
        pickler = _FramePickler(buffer, pickle.HIGHEST_PROTOCOL)
        kind = type(message)
        pickler.fast = (kind is Batch and _rows_share_nothing(message)) or (
            kind is list and all(type(part) is Batch and _rows_share_nothing(part) for part in message)
        )
        pickler.dump(message)
        return buffer.getvalue()
    except Exception:  # by value, a cycle among a row's values, or anything plain pickle cannot do
        return cloudpickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def encode(message: Any, destination: int) -> bytes:
    """A frame: ``message`` pickled (``dumps``), after its header."""
    payload = dumps(message)
    return HEADER.pack(len(payload), destination) + payload


class Verified:
    """A frame's payload whose tag held, to be unpickled by whoever takes it (``Verified.message``)."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def message(self) -> Any:
        return pickle.loads(self.payload)


def read_frames(
    stream: BinaryIO, session: Session, inbox: Any, closed: Any = ..., where: str = "a link", verified: bool = False
) -> None:
    """Unpickle frames from ``stream`` (authenticated: ``session``) into ``inbox`` until it ends; then put
    ``closed``, unless it is ``...``. A frame whose tag does not hold ends it, before anything of it is unpickled;
    so does one that cannot be unpickled. With ``verified``, each frame goes into ``inbox`` as its ``Verified``
    payload instead, for the thread that takes it to unpickle: a batch's objects are then made by the thread that
    runs them, while they are in its core's cache, and this thread takes the GIL for nothing but the tag."""
    try:
        while True:
            frame = session.read(stream.read)
            if frame is None:
                break
            size, _, payload = frame
            inbox.put(Verified(payload) if verified else pickle.loads(payload), size)
    except HandshakeFailed as exc:
        log.warning("%s closed: %s", where, exc)
    except (OSError, ValueError):  # the connection was closed under the reader
        pass
    except Exception:
        log.exception("%s closed: a frame could not be unpickled", where)
    finally:
        if closed is not ...:
            inbox.put(closed)


def read_within(sock: socket.socket, deadline: float) -> Callable[[int], bytes]:
    """A blocking ``read(n)`` of exactly ``n`` bytes from ``sock`` (fewer when it closes), raising
    ``TimeoutError`` once ``deadline`` (``time.monotonic()``) has passed, however slowly the bytes trickle in. It
    reads no byte past those asked for, so the connection's frames can be read from a stream after it."""

    def read(size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the other end did not finish the handshake in time")
            sock.settimeout(left)
            chunk = sock.recv(size - len(data))
            if not chunk:
                break
            data += chunk
        return bytes(data)

    return read


class WorkerChannel:
    """A worker task's connection to the driver's hub: control messages only. It opens with the link handshake:
    the hub must prove the run's secret before the worker sends or reads a frame."""

    def __init__(self, address: tuple[str, int], keys: LinkKeys, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        self._sock = socket.create_connection(address, timeout=timeout)
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._session = client_handshake(read_within(self._sock, deadline), self._sock.sendall, keys)
            self._sock.settimeout(None)
            self._reader = self._sock.makefile("rb", buffering=1 << 20)  # after the handshake: it read no more
        except BaseException:
            self._sock.close()
            raise
        self._lock = threading.Lock()  # records go out in the order they are sealed

    @property
    def local_host(self) -> str:
        """This end's address: the interface the worker reaches the driver through."""
        return self._sock.getsockname()[0]

    def send(self, message: Any) -> None:
        frame = encode(message, TO_DRIVER)
        with self._lock:
            self._sock.sendall(self._session.seal(frame))

    def start_reading(self, inbox: Any) -> None:
        """Put every message from the driver into ``inbox`` on a thread of its own; ``None`` once it closes."""
        threading.Thread(
            target=read_frames,
            args=(self._reader, self._session, inbox, None, "the driver's hub"),
            name="squall-hub-in",
            daemon=True,
        ).start()

    def close(self) -> None:
        """Shut the socket down first: the reading thread's blocked read then ends, and closing its stream (which
        waits for that read) cannot hang."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self._reader.close()
        finally:
            self._sock.close()
