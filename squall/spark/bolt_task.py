"""A bolt task as it runs inside a worker, and how its state survives.

A task's state is the bolt object's attributes. After each wave in which the
task executed something, they are pickled into a ``Snapshot`` that travels to
the driver in the task's report, so it survives the worker's Python process or
its executor dying.

A task instance is (re)built wherever it runs: the shipped bolt unpickled,
``prepare()`` (where connections are made), then the snapshot's attributes
laid over it. References to the bolt itself, its collector and its context are
re-bound to the new instance's; only attributes that truly cannot be pickled
(sockets, connections, locks) are left out and come from ``prepare()``.
A bolt that cannot be unpickled or whose ``prepare()`` raises fails with
``TaskSetupError``, which stops the topology once Spark's retries are spent.

A Python worker keeps live instances (``LIVE``); when a task restarts in the
same process from the snapshot its live instance last produced, that instance
is reused as is, with no rebuild.
"""

from __future__ import annotations

import contextvars
import io
import logging
import pickle
import sys
from collections import Counter
from typing import Any

from pyspark import cloudpickle

from squall.model.components import BasicBolt, StatefulBolt
from squall.model.config import DEFAULTS, SQUALL_MAX_REPEATED_ERRORS
from squall.model.state import KeyValueState, StateDelta
from squall.model.topology import TopologyContext
from squall.model.tuple import TICK_COMPONENT
from squall.reliability.ids import IdGenerator
from squall.spark.collectors import BasicOutputCollector, OutputCollector
from squall.spark.failures import ErrorStreak, TaskSetupError
from squall.spark.load import TaskWeights
from squall.spark.protocol import RunSettings, Snapshot, TaskStatus
from squall.spark.records import TICK_FIELDS
from squall.spark.shipping import ShippedTopology, new_component, shipped_runs
from squall.state.blobs import StateBlobs

log = logging.getLogger("squall.task")


_RESTORING: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("squall_restoring")


def _own_object(tag: str) -> Any:
    """The restoring task's own bolt, collector or context for ``tag``."""
    return _RESTORING.get()[tag]


class _StatePickler(cloudpickle.Pickler):
    """Pickles a bolt's attributes; the task's own objects (the bolt, its collector and context) become tags.

    The check runs in ``reducer_override``, which the C pickler skips for plain data (str, int, float,
    bytes, and exact list, tuple, dict, set), so a large dict of counts pickles at C speed.
    """

    def __init__(self, file: io.BytesIO, own: dict[int, str]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._own = own

    def reducer_override(self, obj: Any) -> Any:
        tag = self._own.get(id(obj))
        if tag is not None:
            return _own_object, (tag,)
        return super().reducer_override(obj)


_ATOMIC = frozenset({str, int, float, bytes, bool, type(None)})
try:  # the same scan in C (setup.py builds it where a compiler is): a tenth of the time
    from squall.spark._atomic import dict_atomic as _dict_atomic
    from squall.spark._atomic import items_atomic as _items_atomic
except ImportError:
    _dict_atomic = _items_atomic = None
PLAIN_MIN = 1000  # a container this long or longer is worth pickling on its own, without pickle's memo


def _holders_of_one() -> int:
    """What ``sys.getrefcount`` says of an object held by exactly two dicts (the bolt's attributes and the
    snapshot's copy of them), measured rather than assumed."""
    first = {"probe": []}
    second = dict(first)
    return sys.getrefcount(second["probe"])


_UNSHARED = _holders_of_one()


def _plain(value: Any) -> bool:
    """A dict (or Counter), list or set of immutable atomic values only: pickled without the memo, nothing is
    lost."""
    kind = type(value)
    if kind is dict or kind is Counter:
        if _dict_atomic is not None:
            return _dict_atomic(value)
        return _ATOMIC.issuperset(map(type, value)) and _ATOMIC.issuperset(map(type, value.values()))
    if kind is list or kind is set:
        return _items_atomic(value) if _items_atomic is not None else _ATOMIC.issuperset(map(type, value))
    return False


def _load_plain(blob: bytes) -> Any:
    return pickle.loads(blob)


class _PlainAttribute:
    """An attribute pickled on its own with pickle's memo off: for a dict of 400,000 counts, a fifth of the time.
    Only for a container no other object holds, so no reference is split in two on restore."""

    __slots__ = ("blob",)

    def __init__(self, value: Any) -> None:
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.fast = True
        pickler.dump(value)
        self.blob = buffer.getvalue()

    def __reduce__(self) -> tuple:
        return _load_plain, (self.blob,)


def _plain_attributes(state: dict[str, Any]) -> None:
    """Large containers of atomic values that only ``state`` (and the bolt) hold, pickled on their own, in place."""
    for key in list(state):
        value = state[key]
        if type(value) in (dict, Counter, list, set) and len(value) >= PLAIN_MIN:
            del value  # not a holder of its own while counting
            if sys.getrefcount(state[key]) == _UNSHARED and _plain(state[key]):
                state[key] = _PlainAttribute(state[key])


def _load_state(blob: bytes, own: dict[str, Any]) -> dict[str, Any]:
    token = _RESTORING.set(own)
    try:
        return pickle.loads(blob)
    finally:
        _RESTORING.reset(token)


UNSAVED = -1  # the version of an instance that executed since its last snapshot: it equals none


class BoltTask:
    def __init__(
        self,
        shipped: ShippedTopology,
        component: str,
        task: int,
        settings: RunSettings,
        local_tasks: frozenset[int] = frozenset(),
        batch_id: Any = None,
        weights: TaskWeights | None = None,
        resources: Any = None,
    ) -> None:
        """A new task instance, prepared; a transactional batch bolt's is prepared for ``batch_id``, after it is
        handed its worker's ``resources`` if it takes them (``use_worker_resources``)."""
        topology = shipped.topology
        spec = topology.components[component]
        self.component, self.task = component, task
        self.settings = settings
        self.version: int | None = None  # the wave of the snapshot this instance's state equals (None: none yet)
        self.dirty = False  # executed something since its last snapshot (when snapshots are taken on an interval)
        self.bolt = new_component(shipped, component, task)
        self.context = TopologyContext(topology, component, task)
        self.collector = OutputCollector(
            topology, component, task, settings.acking, settings.capture, local_tasks, weights
        )
        self.basic = isinstance(self.bolt, BasicBolt)
        self.basic_collector = BasicOutputCollector(self.collector) if self.basic else None
        self._topology = topology
        self._fields: dict[tuple[str, str], Any] = {}
        self.unpicklable: set[str] = set()  # attributes left to prepare(): a socket, a connection, a lock
        self.made_by_prepare: frozenset[str] = frozenset()  # the attributes the bolt had once prepare() returned
        # A stateful bolt's state is its KeyValueState, handed over by init_state() once restored.
        self.state = KeyValueState(component, blobs=self._blobs()) if isinstance(self.bolt, StatefulBolt) else None
        self.unsaved = StateDelta()  # changes taken from the state and not yet in a written checkpoint part
        self.whole_part_due = True  # its next checkpoint part holds all of its state
        limit = shipped.conf.get(SQUALL_MAX_REPEATED_ERRORS, DEFAULTS[SQUALL_MAX_REPEATED_ERRORS])
        self.error_streak = ErrorStreak(component, task, limit)  # its run of one repeated error (execution.py)
        task_conf = {**shipped.conf, **spec.conf}
        try:
            if resources is not None and hasattr(self.bolt, "use_worker_resources"):
                self.bolt.use_worker_resources(resources)
            if self.basic:
                self.bolt.prepare(task_conf, self.context)
            elif batch_id is not None:
                self.bolt.prepare(task_conf, self.context, self.collector, batch_id)
            else:
                self.bolt.prepare(task_conf, self.context, self.collector)
        except Exception as exc:
            raise TaskSetupError(component, task, "prepare() raised", exc) from exc
        self.made_by_prepare = frozenset(vars(self.bolt)) if hasattr(self.bolt, "__dict__") else frozenset()

    # -- state ---------------------------------------------------------------
    def _blobs(self) -> StateBlobs | None:
        """Where the state's blobs go: the state provider, when the workers write the checkpoints and the
        snapshots (a state restored from either may name a blob, so both must say when one can go)."""
        settings = self.settings
        if settings.state_store is None or settings.snapshot_root is None:
            return None
        return StateBlobs.open(settings.state_store, self.component, self.task)

    def _own(self) -> dict[str, Any]:
        own = {"bolt": self.bolt, "collector": self.collector, "context": self.context}
        if self.basic_collector is not None:
            own["basic_collector"] = self.basic_collector
        return own

    def _dumps(self, state: dict[str, Any], own: dict[int, str]) -> bytes:
        buffer = io.BytesIO()
        _StatePickler(buffer, own).dump(state)
        return buffer.getvalue()

    def init_state(self) -> None:
        """Hand a stateful bolt its state, once it is restored."""
        if self.state is not None:
            try:
                self.bolt.init_state(self.state)
            except Exception as exc:
                raise TaskSetupError(self.component, self.task, "init_state() raised", exc) from exc

    def snapshot(self, version: int) -> Snapshot:
        """Every attribute of the (stateless) bolt; references to the bolt, its collector or context are re-bound
        on restore."""
        own = {id(obj): tag for tag, obj in self._own().items()}
        if getattr(self.bolt, "task_snapshots", True) is False:  # rebuilt by prepare(), as a Storm bolt restarts
            state: dict[str, Any] = {}
        else:
            state = {k: v for k, v in vars(self.bolt).items() if k not in self.unpicklable}
        _plain_attributes(state)
        try:
            blob = self._dumps(state, own)
        except Exception:
            for key, value in list(state.items()):
                try:
                    self._dumps({key: value}, own)
                except Exception:
                    self.unpicklable.add(key)
                    del state[key]
            blob = self._dumps(state, own)
        self.version = version
        return Snapshot(version, blob)

    def lost_on_restore(self) -> list[str]:
        """The attributes left out of snapshots that ``prepare()`` does not make: a rebuilt task lacks them."""
        return sorted(self.unpicklable - self.made_by_prepare)

    def whole_snapshot(self, version: int) -> bytes:
        """Everything the task would restart from, pickled: a stateful bolt's whole state, else its attributes."""
        if self.state is None:
            return self.snapshot(version).blob
        try:
            blob = cloudpickle.dumps(dict(self.state.items()), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TaskSetupError(self.component, self.task, "its state cannot be saved", exc) from exc
        self.version = version
        return blob

    def restore(self, snapshot: Snapshot) -> None:
        if self.state is not None:  # the whole state, as the driver keeps it
            self.state = KeyValueState(self.component, pickle.loads(snapshot.blob), self.state.blobs)
            self.version = snapshot.version
            return
        state = _load_state(snapshot.blob, self._own())
        vars(self.bolt).update(state)
        self.version = snapshot.version

    # -- execution -----------------------------------------------------------
    def begin_wave(self, generation: int, wave: int) -> None:
        ids = IdGenerator([self.settings.seed, wave, self.task])  # a replayed wave draws the same ids
        collector = self.collector
        collector.ids, collector.next_id = ids, ids.seeded_source()
        collector.generation, collector.wave = generation, wave
        collector.status = TaskStatus()
        collector.captured = []

    def fields_of(self, component: str, stream: str) -> Any:
        """The fields of ``component``'s ``stream`` (of a tick tuple, for the tick component)."""
        fields = self._fields.get((component, stream))
        if fields is None:
            if component == TICK_COMPONENT:
                fields = TICK_FIELDS
            else:
                fields = self._topology.components[component].streams[stream]
            self._fields[(component, stream)] = fields
        return fields


# (run_id, task) -> live task; one per task per Python worker
LIVE: dict[tuple[str, int], BoltTask] = {}


def forget_other_runs(run_id: str) -> None:
    """A reused Python worker keeps live tasks of the runs it still has shipped, not of every run it saw."""
    kept = shipped_runs() | {run_id}
    for key in [k for k in LIVE if k[0] not in kept]:
        del LIVE[key]


def start_task(
    shipped: ShippedTopology,
    task_id: int,
    settings: RunSettings,
    snapshot: Snapshot | None,
    local_tasks: frozenset[int],
    weights: TaskWeights | None = None,
) -> BoltTask:
    """The task's live instance if its state equals ``snapshot``, else a new one restored from it."""
    component = shipped.topology.component_of(task_id)
    live = LIVE.pop((settings.run_id, task_id), None)  # taken out while running: a crash leaves nothing stale
    version = snapshot.version if snapshot is not None else None
    if live is not None and live.version == version:
        live.collector.set_local_tasks(local_tasks, weights)
        return live
    task = BoltTask(shipped, component, task_id, settings, local_tasks, weights=weights)
    if snapshot is not None:
        try:
            task.restore(snapshot)
        except Exception as exc:
            raise TaskSetupError(component, task_id, "its saved state cannot be restored", exc) from exc
    task.init_state()
    return task


def keep_live(task: BoltTask) -> None:
    LIVE[(task.settings.run_id, task.task)] = task
