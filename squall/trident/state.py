"""Trident state: Storm's ``org.apache.storm.trident.state``, in snake case.

A ``State`` is made once per task of the bolt that updates or queries it (``StateFactory.make_state``, with the
task's partition index), and kept for as long as the task runs. Updates come in batches: ``begin_commit(txid)``,
the updater's calls, ``commit(txid)``, strictly in txid order, one batch at a time, in the batch's commit phase.
A txid may come again after a failure (a replay); the map states below are what make a replay count once.

Map states hold one value per key; keys are lists of values (a group's fields):

* ``NonTransactionalMap``: the value itself. A replay counts again.
* ``TransactionalMap``: ``TransactionalValue(txid, val)``. A key already written by this txid is skipped: exactly
  once with a transactional spout, whose replay is the same batch.
* ``OpaqueMap``: ``OpaqueValue(curr_txid, curr, prev)``. A replay starts again from ``prev``: exactly once with a
  transactional or an opaque spout, whose replay may be another batch.

Each wraps a ``BackingMap`` (``multi_get``/``multi_put`` of stored values), usually through ``CachedMap``, an LRU
cache of the keys this task owns.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from squall.trident.operation import CombinerAggregator, Operation, ReducerAggregator, TridentCollector
from squall.trident.tuple import TridentTuple

# While a DRPC request reads a state: the last txid committed when the request began (None: read what is there).
# A map state then serves, for each key, what a committed txid left: an opaque value's ``prev`` when its ``curr`` was
# written by a later txid (every txid before the one writing had committed), and a transactional value written by
# a later txid is refused (``UncommittedRead``): the request fails rather than answer with an uncommitted count.
READ_COMMITTED: ContextVar[int | None] = ContextVar("squall_trident_read_committed", default=None)


class UncommittedRead(Exception):
    """A request would have read a value no committed txid wrote."""


def committed_current(value: Any, limit: int | None) -> Any:
    """What a stored value holds as of the committed txid ``limit`` (None: its current value)."""
    if isinstance(value, OpaqueValue):
        if limit is None or value.curr_txid is None or value.curr_txid <= limit:
            return value.curr
        return value.prev
    if isinstance(value, TransactionalValue):
        if limit is not None and value.txid is not None and value.txid > limit:
            raise UncommittedRead(f"the value was written by txid {value.txid}, after the last committed {limit}")
        return value.val
    return value


class State:
    """A task's state. ``begin_commit`` and ``commit`` frame each batch's updates; ``txid`` is None for an update
    outside any transaction."""

    def begin_commit(self, txid: int | None) -> None:
        pass

    def commit(self, txid: int | None) -> None:
        pass

    def abort_commit(self, txid: int | None) -> None:
        """The batch's update raised after ``begin_commit``: nothing of it is to be read as this batch's own."""


class StateFactory:
    """Makes a task's ``State``: called once per task and worker generation, on the task's worker."""

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> State:
        raise NotImplementedError


class ReadOnlyState(State):
    def begin_commit(self, txid: int | None) -> None:
        raise RuntimeError("a read-only state cannot be updated")

    def commit(self, txid: int | None) -> None:
        raise RuntimeError("a read-only state cannot be updated")


# -- values -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TransactionalValue:
    """A value with the txid that wrote it last."""

    txid: int | None
    val: Any

    def get_txid(self) -> int | None:
        return self.txid

    def get_val(self) -> Any:
        return self.val


@dataclass(frozen=True)
class OpaqueValue:
    """The current value, the txid that wrote it, and the value before that txid."""

    curr_txid: int | None
    curr: Any
    prev: Any = None

    def get(self, txid: int | None) -> Any:
        """The value as batch ``txid`` must see it: ``prev`` if ``txid`` wrote ``curr`` (it is being replayed)."""
        if txid is None or self.curr_txid is None or self.curr_txid < txid:
            return self.curr
        if txid == self.curr_txid:
            return self.prev
        raise ValueError(f"batch {txid} is behind the state's batch: {self}")

    def update(self, txid: int | None, new: Any) -> OpaqueValue:
        return OpaqueValue(txid, new, self.get(txid))

    def get_curr(self) -> Any:
        return self.curr

    def get_prev(self) -> Any:
        return self.prev

    def get_curr_txid(self) -> int | None:
        return self.curr_txid


class ValueUpdater:
    def update(self, stored: Any) -> Any:
        raise NotImplementedError


class CombinerValueUpdater(ValueUpdater):
    """``stored`` combined with ``arg``: ``arg`` alone for a key with no value."""

    __slots__ = ("agg", "arg")

    def __init__(self, agg: CombinerAggregator, arg: Any) -> None:
        self.agg, self.arg = agg, arg

    def update(self, stored: Any) -> Any:
        return self.arg if stored is None else self.agg.combine(stored, self.arg)


class ReducerValueUpdater(ValueUpdater):
    def __init__(self, agg: ReducerAggregator, tuples: list[TridentTuple]) -> None:
        self.agg, self.tuples = agg, tuples

    def update(self, stored: Any) -> Any:
        curr = self.agg.init() if stored is None else stored
        for tup in self.tuples:
            curr = self.agg.reduce(curr, tup)
        return curr


class _Replace(ValueUpdater):
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def update(self, stored: Any) -> Any:
        return self.value


# -- maps -------------------------------------------------------------------------------------------------------
def _key(key: Sequence[Any]) -> tuple:
    return key if type(key) is tuple else tuple(key)


class BackingMap:
    """Where a map state's values are stored: ``multi_get`` gives None for a key with no value."""

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        raise NotImplementedError

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        raise NotImplementedError


class MapState(State):
    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        raise NotImplementedError

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        raise NotImplementedError

    def multi_update(self, keys: list[Sequence[Any]], updaters: list[ValueUpdater]) -> list[Any]:
        raise NotImplementedError


class Snapshottable(State):
    """One value for the whole state (an ungrouped ``persistent_aggregate``)."""

    def get(self) -> Any:
        raise NotImplementedError

    def set(self, value: Any) -> None:
        raise NotImplementedError

    def update(self, updater: ValueUpdater) -> Any:
        raise NotImplementedError


class TupleCollection:
    """A state that can list itself: each key's values followed by its value (``TupleCollectionGet``)."""

    def get_tuples(self) -> Iterator[list[Any]]:
        raise NotImplementedError


class CachedMap(BackingMap):
    """An LRU cache of ``size`` keys in front of ``delegate``. A put is written to the delegate first and cached
    after: a value the delegate refused is never served. Correct because one task owns each key."""

    def __init__(self, delegate: BackingMap, size: int = 1000) -> None:
        self.delegate, self.size = delegate, size
        self._cache: OrderedDict[tuple, Any] = OrderedDict()

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        cache, found, missing = self._cache, {}, []
        for key in keys:
            k = _key(key)
            if k in cache:
                cache.move_to_end(k)
                found[k] = cache[k]
            else:
                missing.append(key)
        if missing:
            for key, value in zip(missing, self.delegate.multi_get(missing), strict=True):
                found[_key(key)] = value
                self._put(_key(key), value)
        return [found[_key(key)] for key in keys]

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        try:
            self.delegate.multi_put(keys, vals)
        except BaseException:
            for key in keys:
                self._cache.pop(_key(key), None)
            raise
        for key, value in zip(keys, vals, strict=True):
            self._put(_key(key), value)

    def _put(self, k: tuple, value: Any) -> None:
        cache = self._cache
        cache[k] = value
        cache.move_to_end(k)
        while len(cache) > self.size:
            cache.popitem(last=False)

    def __getattr__(self, name: str) -> Any:  # the delegate's extras (multi_remove, get_tuples, close)
        return getattr(self.delegate, name)


class _BatchReads:
    """The writes of the batch being committed, so that a key updated twice in one batch chains (Storm's
    ``CachedBatchReadsMap``)."""

    def __init__(self, backing: BackingMap) -> None:
        self.backing = backing
        self.written: dict[tuple, Any] = {}

    def reset(self) -> None:
        self.written = {}

    def multi_get(self, keys: list[Sequence[Any]]) -> list[tuple[Any, bool]]:
        written = self.written
        missing = [key for key in keys if _key(key) not in written]
        stored = dict(zip(map(_key, missing), self.backing.multi_get(missing), strict=True)) if missing else {}
        out = []
        for key in keys:
            k = _key(key)
            out.append((written[k], True) if k in written else (stored[k], False))
        return out

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        self.backing.multi_put(keys, vals)
        for key, value in zip(keys, vals, strict=True):
            self.written[_key(key)] = value


class NonTransactionalMap(MapState):
    def __init__(self, backing: BackingMap) -> None:
        self.backing = backing

    @classmethod
    def build(cls, backing: BackingMap) -> NonTransactionalMap:
        return cls(backing)

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        return self.backing.multi_get(keys)

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        self.backing.multi_put(keys, vals)

    def multi_update(self, keys: list[Sequence[Any]], updaters: list[ValueUpdater]) -> list[Any]:
        new = [u.update(v) for v, u in zip(self.backing.multi_get(keys), updaters, strict=True)]
        self.backing.multi_put(keys, new)
        return new


class _TxidMap(MapState):
    """A map state that stores each value with the txid that wrote it: the batch being committed (its txid, and
    the writes it made, which its own later reads see) is framed by ``begin_commit`` and ``commit``."""

    def __init__(self, backing: BackingMap) -> None:
        self.backing = _BatchReads(backing)
        self.curr_txid: int | None = None

    @classmethod
    def build(cls, backing: BackingMap) -> _TxidMap:
        return cls(backing)

    def begin_commit(self, txid: int | None) -> None:
        self.curr_txid = txid
        self.backing.reset()

    def commit(self, txid: int | None) -> None:
        self.curr_txid = None
        self.backing.reset()

    def abort_commit(self, txid: int | None) -> None:
        self.curr_txid = None
        self.backing.reset()


class TransactionalMap(_TxidMap):
    """Stores ``TransactionalValue(txid, val)``: a key already written by the batch's txid (in an earlier try) is
    left as it is."""

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        limit = READ_COMMITTED.get()  # a request's read; None in a batch, which reads its own txid's view
        return [None if v is None else committed_current(v, limit) for v, _ in self.backing.multi_get(keys)]

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        self.backing.multi_put(keys, [TransactionalValue(self.curr_txid, v) for v in vals])

    def multi_update(self, keys: list[Sequence[Any]], updaters: list[ValueUpdater]) -> list[Any]:
        tx, out, new_keys, new_vals = self.curr_txid, [], [], []
        for key, (val, cached), updater in zip(keys, self.backing.multi_get(keys), updaters, strict=True):
            if val is not None and tx is not None and val.txid == tx and not cached:
                out.append(val.val)  # this txid's update is in already
                continue
            new = TransactionalValue(tx, updater.update(None if val is None else val.val))
            out.append(new.val)
            new_keys.append(key)
            new_vals.append(new)
        if new_keys:
            self.backing.multi_put(new_keys, new_vals)
        return out


class OpaqueMap(_TxidMap):
    """Stores ``OpaqueValue(curr_txid, curr, prev)``: a replayed txid updates ``prev`` again."""

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        tx, limit = self.curr_txid, READ_COMMITTED.get()
        if tx is None or limit is not None:  # outside a commit, or a request's read: what committed txids left
            return [None if v is None else committed_current(v, limit) for v, _ in self.backing.multi_get(keys)]
        return [None if v is None else (v.curr if cached else v.get(tx)) for v, cached in self.backing.multi_get(keys)]

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        self.multi_update(keys, [_Replace(v) for v in vals])

    def multi_update(self, keys: list[Sequence[Any]], updaters: list[ValueUpdater]) -> list[Any]:
        tx, out, new_vals = self.curr_txid, [], []
        for (val, cached), updater in zip(self.backing.multi_get(keys), updaters, strict=True):
            prev = None if val is None else (val.curr if cached else val.get(tx))
            new = updater.update(prev)
            out.append(new)
            new_vals.append(OpaqueValue(tx, new) if val is None else val.update(tx, new))
        self.backing.multi_put(keys, new_vals)
        return out


class SnapshottableMap(MapState, Snapshottable):
    """A map state that also keeps one value under ``global_key`` (an ungrouped ``persistent_aggregate``)."""

    def __init__(self, delegate: MapState, global_key: Sequence[Any]) -> None:
        self.delegate, self.global_key = delegate, list(global_key)

    def begin_commit(self, txid: int | None) -> None:
        self.delegate.begin_commit(txid)

    def commit(self, txid: int | None) -> None:
        self.delegate.commit(txid)

    def abort_commit(self, txid: int | None) -> None:
        self.delegate.abort_commit(txid)

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        return self.delegate.multi_get(keys)

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        self.delegate.multi_put(keys, vals)

    def multi_update(self, keys: list[Sequence[Any]], updaters: list[ValueUpdater]) -> list[Any]:
        return self.delegate.multi_update(keys, updaters)

    def get(self) -> Any:
        return self.delegate.multi_get([self.global_key])[0]

    def set(self, value: Any) -> None:
        self.delegate.multi_put([self.global_key], [value])

    def update(self, updater: ValueUpdater) -> Any:
        return self.delegate.multi_update([self.global_key], [updater])[0]


# -- updaters and queries ---------------------------------------------------------------------------------------
class StateUpdater(Operation):
    """``partition_persist(factory, input_fields, updater[, function_fields])``: ``update_state`` gets the state and
    every tuple of the batch that reached this task, in the batch's commit phase; what it emits is the
    ``new_values_stream()``."""

    def update_state(self, state: State, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        raise NotImplementedError


class BaseStateUpdater(StateUpdater):
    pass


class QueryFunction(Operation):
    """``state_query(state, input_fields, function, function_fields)``: ``batch_retrieve`` reads the state once for
    the batch's tuples (one result per tuple, in order), then ``execute`` emits for each tuple and its result."""

    def batch_retrieve(self, state: State, tuples: list[TridentTuple]) -> list[Any]:
        raise NotImplementedError

    def execute(self, tup: TridentTuple, result: Any, collector: TridentCollector) -> None:
        raise NotImplementedError


class BaseQueryFunction(QueryFunction):
    pass


class MapCombinerAggStateUpdater(StateUpdater):
    """A grouped ``persistent_aggregate`` with a combiner: each tuple is the group's fields, then the batch's
    combined value; the stored value is combined with it and the result emitted after the group's fields."""

    def __init__(self, agg: CombinerAggregator, group_size: int) -> None:
        self.agg, self.group_size = agg, group_size

    def update_state(self, state: MapState, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        g, agg = self.group_size, self.agg
        keys = [tup[:g] for tup in tuples]
        new = state.multi_update(keys, [CombinerValueUpdater(agg, tup[g]) for tup in tuples])
        for key, value in zip(keys, new, strict=True):
            collector.emit([*key, value])


class MapReducerAggStateUpdater(StateUpdater):
    """A grouped ``persistent_aggregate`` with a reducer: each group's tuples are folded into its stored value."""

    def __init__(self, agg: ReducerAggregator, group_size: int) -> None:
        self.agg, self.group_size = agg, group_size

    def update_state(self, state: MapState, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        g = self.group_size
        groups: dict[tuple, list[TridentTuple]] = {}
        for tup in tuples:
            groups.setdefault(tuple(tup[:g]), []).append(tup)
        keys = list(groups)
        new = state.multi_update(keys, [ReducerValueUpdater(self.agg, groups[k]) for k in keys])
        for key, value in zip(keys, new, strict=True):
            collector.emit([*key, value])


class CombinerAggStateUpdater(StateUpdater):
    """An ungrouped ``persistent_aggregate`` with a combiner: one combined value per batch, into a
    ``Snapshottable`` state."""

    def __init__(self, agg: CombinerAggregator) -> None:
        self.agg = agg

    def update_state(self, state: Snapshottable, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        if len(tuples) != 1:
            raise ValueError(f"a combiner state updater takes one tuple per batch, got {len(tuples)}")
        collector.emit([state.update(CombinerValueUpdater(self.agg, tuples[0][0]))])


class ReducerAggStateUpdater(StateUpdater):
    def __init__(self, agg: ReducerAggregator) -> None:
        self.agg = agg

    def update_state(self, state: Snapshottable, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        collector.emit([state.update(ReducerValueUpdater(self.agg, tuples))])


# -- stored map states -----------------------------------------------------------------------------------------
MAP_KINDS = ("opaque", "transactional", "non_transactional")


def encode_stored(kind: str, value: Any) -> str:
    """A map state's stored value as JSON text: ``{"v": current, "t": txid, "p": previous}`` as the kind keeps."""
    if kind == "opaque":
        return json.dumps({"v": value.curr, "t": value.curr_txid, "p": value.prev})
    if kind == "transactional":
        return json.dumps({"v": value.val, "t": value.txid})
    return json.dumps({"v": value})


def decode_stored(kind: str, text: str | bytes) -> Any:
    data = json.loads(text)
    if kind == "opaque":
        return OpaqueValue(data["t"], data["v"], data["p"])
    if kind == "transactional":
        return TransactionalValue(data["t"], data["v"])
    return data["v"]


def current_of(text: str | bytes) -> Any:
    """The current value in a stored value's JSON text, whatever its kind."""
    return json.loads(text)["v"]


def encode_key(key: Sequence[Any]) -> str:
    return json.dumps(list(key), separators=(",", ":"))


class StoredBackingMap(BackingMap):
    """A backing map whose values are stored as JSON text (``encode_stored``): a store implements ``read`` (the
    texts of some encoded keys), ``write`` (texts by encoded key, in one transaction) and ``scan`` (every key and
    text)."""

    kind: str = "opaque"

    def read(self, keys: list[str]) -> dict[str, str | bytes]:
        raise NotImplementedError

    def write(self, rows: dict[str, str]) -> None:
        raise NotImplementedError

    def scan(self) -> Iterator[tuple[str | bytes, str | bytes]]:
        raise NotImplementedError

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        encoded = [encode_key(k) for k in keys]
        found = self.read(encoded)
        return [decode_stored(self.kind, found[k]) if k in found else None for k in encoded]

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        self.write({encode_key(k): encode_stored(self.kind, v) for k, v in zip(keys, vals, strict=True)})

    def items(self) -> Iterator[tuple[list[Any], Any]]:
        for key, text in self.scan():
            yield json.loads(key), decode_stored(self.kind, text)

    def close(self) -> None:
        pass


class StoredMapState(SnapshottableMap):
    """A map state of one of the three kinds over a ``StoredBackingMap``, with an LRU cache of ``cache_size`` keys
    in front (0: none), and a single value for an ungrouped ``persistent_aggregate`` (``get``/``set``/``update``).
    Every partition keeps its keys in one store, so it is not a ``TupleCollection`` (as Storm's stored map states
    are not): ``items()`` on its backing map lists the whole store."""

    GLOBAL_KEY = ["$MAP-STATE-GLOBAL$"]

    def __init__(self, backing: StoredBackingMap, cache_size: int = 1000) -> None:
        self.backing = backing
        cached = CachedMap(backing, cache_size) if cache_size else backing
        kind = {"opaque": OpaqueMap, "transactional": TransactionalMap, "non_transactional": NonTransactionalMap}
        super().__init__(kind[backing.kind].build(cached), self.GLOBAL_KEY)

    def close(self) -> None:
        self.backing.close()


# -- in memory --------------------------------------------------------------------------------------------------
_MEMORY: dict[tuple[str, int], dict[tuple, Any]] = {}  # (factory id, partition) -> the partition's stored values
_MEMORY_LOCK = threading.Lock()


class MemoryBackingMap(BackingMap):
    """A partition's values in this process's memory: they outlive a worker generation in the same process, and
    go with the process."""

    def __init__(self, factory_id: str, partition: int) -> None:
        with _MEMORY_LOCK:
            self.data = _MEMORY.setdefault((factory_id, partition), {})

    def multi_get(self, keys: list[Sequence[Any]]) -> list[Any]:
        get = self.data.get
        return [get(_key(key)) for key in keys]

    def multi_put(self, keys: list[Sequence[Any]], vals: list[Any]) -> None:
        for key, value in zip(keys, vals, strict=True):
            self.data[_key(key)] = value

    def multi_remove(self, keys: Iterable[Sequence[Any]]) -> None:
        for key in keys:
            self.data.pop(_key(key), None)


def forget_memory(factory_id: str) -> None:
    """Drop what every partition of ``factory_id`` holds in this process."""
    with _MEMORY_LOCK:
        for key in [k for k in _MEMORY if k[0] == factory_id]:
            del _MEMORY[key]
