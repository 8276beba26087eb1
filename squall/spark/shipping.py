"""How a topology's code reaches Spark's workers.

Spark's Python workers unpickle classes and functions by importing their
module by name. A bolt defined in a test module, a script run with ``python``,
a ``squall run`` file, a notebook or a package in the working directory is not
importable there, so squall has cloudpickle carry every such module *by
value*: what is installed (the standard library, site-packages, squall and
PySpark) travels by name, everything else travels with the topology.

Each component is pickled on its own, so a component that cannot be rebuilt on
a worker is named in the error (``failures.TaskSetupError``) and stops the topology.
"""

from __future__ import annotations

import copy
import functools
import os
import pickle
import site
import sys
import sysconfig
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from pyspark import SparkContext, cloudpickle

from squall.model.config import SQUALL_CHECKPOINT_KEY
from squall.model.errors import SquallError
from squall.model.topology import Topology
from squall.spark.failures import TaskSetupError

# Packages the executors' environment must provide (docs/cluster.md): never shipped by value.
ENVIRONMENT_PACKAGES = frozenset({"squall", "pyspark", "py4j", "cloudpickle"})


@cache
def _installed_roots() -> tuple[str, ...]:
    paths = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.realpath(p), "") for p in paths if p)


def is_user_module(module: ModuleType) -> bool:
    """True for a module that workers may not be able to import by name."""
    name = getattr(module, "__name__", None)
    if not isinstance(name, str) or name == "__main__" or name.partition(".")[0] in ENVIRONMENT_PACKAGES:
        return False
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return False  # built in, frozen, or a namespace package
    return _is_user_path(path)


@functools.lru_cache(maxsize=4096)
def _is_user_path(path: str) -> bool:
    """Whether a module file lies outside the installed packages (resolving its links once per path)."""
    return not os.path.realpath(path).startswith(_installed_roots())


def ship_user_modules() -> None:
    """Register every user module loaded so far to be pickled by value."""
    for name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType) or module.__name__ != name or not is_user_module(module):
            continue
        if not cloudpickle.cloudpickle._is_registered_pickle_by_value(module):
            cloudpickle.register_pickle_by_value(module)


@dataclass(frozen=True)
class ShippedTopology:
    """What every worker task of a run receives: the graph, the config and each component's pickle."""

    topology: Topology  # component objects stripped; they travel in ``components``
    conf: dict[str, Any]
    components: dict[str, bytes]
    # For a worker in the declaring process (``TestCluster``'s spouts): the declared objects themselves, which
    # each task copies, so that a spout's copies share what the test's own object shares (a ``FeederSpout``).
    objects: dict[str, Any] | None = None


def pickle_component(component: str, obj: Any) -> bytes:
    """``obj`` pickled to travel to the workers, or ``SquallError`` naming the component, the attributes that
    cannot travel, and where to make them instead."""
    try:
        return pack(obj)
    except Exception as exc:
        raise SquallError(unshippable_message(component, obj, exc)) from exc


def _attributes(obj: Any) -> dict[str, Any]:
    found = dict(getattr(obj, "__dict__", None) or {})
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if isinstance(name, str) and name not in found and hasattr(obj, name):
                found[name] = getattr(obj, name)
    return found


def unshippable_message(component: str, obj: Any, error: BaseException) -> str:
    """What a component that cannot be pickled is told: which of its attributes cannot be, and that a resource
    (a connection, a lock, a file, a client) is made in ``prepare()`` (a spout's: ``open()``), which runs on the
    worker, rather than in ``__init__``, which runs where the topology is declared."""
    bad = []
    for name, value in _attributes(obj).items():
        try:
            pack(value)
        except Exception as exc:
            bad.append(f"{name!r} ({type(value).__name__}: {type(exc).__name__}: {exc})")
    method = "open()" if callable(getattr(obj, "next_tuple", None)) else "prepare()"
    if bad:
        named = f"attribute {bad[0]}" if len(bad) == 1 else f"attributes {', '.join(bad)}"
        cause = f"{named} cannot be pickled"
    else:
        cause = f"{type(error).__name__}: {error}"
    return (
        f"component {component!r} ({type(obj).__name__}) cannot be serialized to ship it to Spark's workers: "
        f"{cause}. Create the resource in {method}, which runs on the worker, not in __init__, which runs where "
        "the topology is declared"
    )


def check_shippable(topology: Any) -> None:
    """Every component of ``topology`` (a transactional topology's spout too) can be pickled to travel to the
    workers, or ``SquallError`` naming the first that cannot: ``squall run`` checks before Spark starts."""
    ship_user_modules()
    graph = getattr(topology, "topology", topology)  # a transactional topology wraps its graph
    objects = {cid: spec.obj for cid, spec in graph.components.items()}
    spout_id = getattr(topology, "spout_id", None)
    if spout_id is not None:
        objects[spout_id] = topology.spout
    for cid, obj in objects.items():
        pickle_component(cid, obj)


def ship_topology(
    sc: SparkContext, topology: Topology, conf: dict, components: list[str], objects: dict[str, Any] | None = None
) -> Any:
    """Broadcast ``topology`` with the objects of ``components`` (spouts stay on the driver unless listed);
    ``objects`` ships another object in place of a component's own (a transactional spout for its stand-in)."""
    ship_user_modules()
    objects = objects or {}
    conf = {key: value for key, value in conf.items() if key != SQUALL_CHECKPOINT_KEY}  # keys go in the closure
    blobs = {cid: pickle_component(cid, objects.get(cid, topology.components[cid].obj)) for cid in components}
    stripped = topology.with_objects(dict.fromkeys(topology.components))
    return sc.broadcast(pack(ShippedTopology(stripped, conf, blobs)))


def shipped_here(topology: Topology, conf: dict, objects: dict[str, Any] | None = None) -> ShippedTopology:
    """What a worker in this process (``TestCluster``'s) is given: the graph, and the declared spout objects
    themselves (``objects`` in place of some), which each task copies rather than unpickles."""
    objects = {**{cid: spec.obj for cid, spec in topology.spouts.items()}, **(objects or {})}
    for cid, obj in objects.items():  # each task copies its own: one that cannot be copied is refused now
        try:
            copy.deepcopy(obj)
        except Exception as exc:
            raise SquallError(unshippable_message(cid, obj, exc)) from exc
    conf = {key: value for key, value in conf.items() if key != SQUALL_CHECKPOINT_KEY}
    return ShippedTopology(topology.with_objects(dict.fromkeys(topology.components)), conf, {}, objects)


_RUNS: dict[str, ShippedTopology] = {}  # per Python worker: run id -> what was shipped
KEEP_RUNS = 4  # a reused Python worker keeps the latest runs' topologies, not every run's


def load_shipped(run_id: str, broadcast: Any) -> ShippedTopology:
    """The run's shipped topology, read once per Python worker."""
    shipped = _RUNS.get(run_id)
    if shipped is None:
        shipped = _RUNS[run_id] = pickle.loads(broadcast.value)
        while len(_RUNS) > KEEP_RUNS:
            del _RUNS[next(iter(_RUNS))]
    return shipped


def forget_run(run_id: str) -> None:
    """The run is over: this Python worker drops what was shipped for it (a spout's data may be large)."""
    _RUNS.pop(run_id, None)


def shipped_runs() -> set[str]:
    """The runs this Python worker still holds a shipped topology of."""
    return set(_RUNS)


def new_component(shipped: ShippedTopology, component: str, task: int) -> Any:
    """A fresh instance of ``component`` for ``task``, or ``TaskSetupError`` naming it."""
    if shipped.objects is not None and component in shipped.objects:
        try:
            return copy.deepcopy(shipped.objects[component])
        except Exception as exc:
            raise TaskSetupError(component, task, "cannot be copied for its task", exc) from exc
    try:
        return pickle.loads(shipped.components[component])
    except Exception as exc:
        raise TaskSetupError(component, task, "cannot be unpickled on a Spark worker", exc) from exc


def pack(value: Any) -> bytes:
    """``value`` pickled with cloudpickle, so that instances of shipped classes travel by value."""
    return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
