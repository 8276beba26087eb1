"""Testing topologies, in the manner of Storm's own testing API.

``TestCluster`` runs on simulated time: ``advance_time`` moves the clock and runs
every timeout rotation and tick that falls due, so timeout tests never sleep.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from squall.cluster import LocalCluster
from squall.model import config as cfg
from squall.model.components import Spout
from squall.model.errors import SquallError
from squall.model.fields import Fields, as_fields
from squall.model.topology import Topology
from squall.spark.clock import SimulatedClock
from squall.spark.driver import TopologyRun
from squall.spark.run import TRANSACTIONAL

MAX_IDLE_WAVES = 100_000


class _FeederState:
    def __init__(self) -> None:
        self.queue: deque[tuple[tuple, Any]] = deque()
        self.acked: set = set()
        self.failed: set = set()
        self.calls: list[tuple[str, Any]] = []  # every ack/fail call, in order
        self.lock = threading.Lock()


class FeederSpout(Spout):
    """A spout the test feeds by hand. Records the msg ids it sees acked and failed.

    Every copy the topology runs shares the queue and the records with the object
    the test holds. Like Storm's, it does not replay failures.
    """

    def __init__(self, fields: Fields | Sequence[str]) -> None:
        self.outputs = as_fields(fields)
        self._state = _FeederState()
        self._collector = None

    def __deepcopy__(self, memo: dict) -> FeederSpout:
        twin = FeederSpout.__new__(FeederSpout)
        twin.outputs, twin._state, twin._collector = self.outputs, self._state, None
        return twin

    def feed(self, values: Sequence[Any], msg_id: Any = None) -> Any:
        """Queue ``values``; returns the msg id (a fresh unique one if none is given)."""
        if msg_id is None:
            msg_id = uuid.uuid4().hex
        with self._state.lock:
            self._state.queue.append((tuple(values), msg_id))
        return msg_id

    @property
    def acked(self) -> set:
        return self._state.acked

    @property
    def failed(self) -> set:
        return self._state.failed

    def open(self, conf, context, collector) -> None:
        self._collector = collector

    def next_tuple(self) -> None:
        with self._state.lock:
            if not self._state.queue:
                return
            values, msg_id = self._state.queue.popleft()
        self._collector.emit(values, msg_id=msg_id)

    @property
    def calls(self) -> list[tuple[str, Any]]:
        """Every ``("ack" | "fail", msg_id)`` call received, in order."""
        return self._state.calls

    def ack(self, msg_id: Any) -> None:
        self._state.acked.add(msg_id)
        self._state.calls.append(("ack", msg_id))

    def fail(self, msg_id: Any) -> None:
        self._state.failed.add(msg_id)
        self._state.calls.append(("fail", msg_id))


class FixedTupleSpout(FeederSpout):
    """Emits a fixed list of tuples once each, with msg ids 0, 1, 2, ..."""

    def __init__(self, tuples: Iterable[Sequence[Any]], fields: Fields | Sequence[str]) -> None:
        super().__init__(fields)
        self.tuples = [tuple(v) for v in tuples]
        for i, values in enumerate(self.tuples):
            self.feed(values, msg_id=i)

    def __deepcopy__(self, memo: dict) -> FixedTupleSpout:
        twin = super().__deepcopy__(memo)
        twin.__class__ = FixedTupleSpout
        twin.tuples = self.tuples
        return twin

    @property
    def settled(self) -> bool:
        return len(self.acked | self.failed) == len(self.tuples)


class TestCluster(LocalCluster):
    """A ``LocalCluster`` on simulated time; waves run only when the test asks."""

    __test__ = False  # not a pytest test class
    spouts_here = True  # a test reads what its spouts saw, as Storm's tests do in one JVM

    def __init__(self, conf: dict[str, Any] | None = None) -> None:
        super().__init__(conf, clock=SimulatedClock())

    def submit_topology(self, name: str, conf: dict | None, topology: Topology | TrackedTopology) -> TopologyRun:
        if isinstance(topology, TrackedTopology):
            topology = topology.topology
        return self._start(name, conf, topology, capture=False)

    def submit_for_capture(self, name: str, conf: dict | None, topology: Topology) -> TopologyRun:
        return self._start(name, conf, topology, capture=True)

    def spout_instances(self, name: str) -> dict[int, Spout]:
        """Topology ``name``'s spout tasks, task id -> the instance that task runs: a copy of the declared object,
        made in the test's process (a ``FeederSpout``'s copies share the test's queue and records). Read them
        between waves (after ``wait_idle`` or ``advance_time``): their calls are made on the run's worker thread."""
        here = self.runs[name].scheduler.worker_here
        spouts = here.worker.spouts if here is not None and here.worker is not None else None
        return {s.task: s.spout for s in spouts.host.tasks} if spouts is not None else {}

    def wait_idle(self) -> None:
        """Run waves until every fed tuple has been delivered and executed everywhere it goes."""
        for run in list(self.runs.values()):
            if run.kind == TRANSACTIONAL:  # until its batches commit
                run.wait_settled()
                continue
            for _ in range(MAX_IDLE_WAVES):
                if run.step().idle:
                    break
            else:
                raise SquallError(f"topology {run.name!r} did not go idle in {MAX_IDLE_WAVES} waves")

    def _drain(self, run: TopologyRun, seconds: float) -> None:
        """As ``LocalCluster._drain``, on simulated time: moved on from timer to timer."""
        deadline = self.clock.now() + seconds
        self.wait_idle()
        while (run.stats.pending or run.state_waiting) and self.clock.now() < deadline and run.failure is None:
            due = run.next_timer()
            self.advance_time(max(0.0, (deadline if due is None else min(due, deadline)) - self.clock.now()))

    def advance_time(self, seconds: float) -> None:
        """Move simulated time forward, running the rotations and ticks that fall due, then wait idle."""
        if seconds < 0:
            raise ValueError("advance_time needs seconds >= 0")
        target = self.clock.now() + seconds
        self.wait_idle()  # what was fed before the call is emitted at the current time
        while True:
            due = [t for t in (run.next_timer() for run in self.runs.values()) if t is not None]
            if not due or min(due) > target:
                break
            self.clock.set(min(due))
            self.wait_idle()
        self.clock.set(target)
        self.wait_idle()


class TrackedTopology:
    """A topology a test can wait on, as Storm's ``TrackedTopology``: ``tracked_wait(amount)`` returns once its
    spouts have emitted ``amount`` more tuples than at the last wait, and every tuple they led to has been
    executed everywhere it goes (as ``TestCluster.wait_idle``). Trees that a bolt holds stay pending.

    Submit ``tracked.topology`` (or ``tracked`` itself) to the ``TestCluster`` given here::

        tracked = TrackedTopology(cluster, topology)
        cluster.submit_topology("words", {}, tracked.topology)
        feeder.feed(["a b"])
        tracked_wait(tracked, 1)
    """

    def __init__(self, cluster: TestCluster, topology: Topology) -> None:
        if not isinstance(cluster, TestCluster):
            raise SquallError(f"TrackedTopology needs a TestCluster, got {type(cluster).__name__}")
        if not isinstance(topology, Topology):
            raise TypeError(f"TrackedTopology: expected a built Topology, got {type(topology).__name__}")
        self.cluster, self.topology = cluster, topology
        self.target = 0  # spout emits the next wait returns at, less its amount

    def _run(self) -> TopologyRun:
        for run in self.cluster.runs.values():
            if getattr(run, "topology", None) is self.topology:
                return run
        raise SquallError("the tracked topology is not running on its TestCluster: submit tracked.topology first")

    def emitted(self) -> int:
        """Tuples its spouts have emitted so far."""
        return self._emitted(self._run())

    def _emitted(self, run: TopologyRun) -> int:
        return sum(run.stats.of(spout).emitted for spout in self.topology.spouts)

    def tracked_wait(self, amount: int = 1, timeout_secs: float = 60.0) -> None:
        """Run waves until the spouts have emitted ``amount`` more tuples than the last wait counted, and the
        topology is idle. Raises ``SquallError`` naming the counts if that takes over ``timeout_secs`` (wall
        clock: a test's guard, not the topology's simulated time)."""
        if amount < 0:
            raise ValueError("tracked_wait needs amount >= 0")
        run, target = self._run(), self.target + amount
        deadline = time.monotonic() + timeout_secs
        while True:
            idle = run.step().idle
            emitted = self._emitted(run)
            if idle and emitted >= target:
                self.target = target
                return
            if idle:
                time.sleep(0.001)  # the spouts have nothing yet: a fed tuple may still come
            if time.monotonic() > deadline:
                raise SquallError(
                    f"tracked topology {run.name!r}: its spouts emitted {emitted} of the {target} tuples waited for "
                    f"in {timeout_secs} s"
                )


def tracked_wait(tracked: TrackedTopology, amount: int = 1, timeout_secs: float = 60.0) -> None:
    """Storm's ``Testing.trackedWait``: ``tracked.tracked_wait(amount, timeout_secs)``."""
    tracked.tracked_wait(amount, timeout_secs)


def complete_topology(
    topology: Topology,
    mock_sources: Mapping[str, Iterable[Sequence[Any]]],
    conf: dict[str, Any] | None = None,
) -> dict[str, list[tuple]]:
    """Run until every mocked tuple is fully processed (acked, failed or timed out).

    Returns ``{component_id: [values, ...]}``: what each component emitted on the
    default stream.
    """
    spouts = {}
    for sid, tuples in mock_sources.items():
        spec = topology.components.get(sid)
        if spec is None or spec.kind != "spout":
            raise SquallError(f"complete_topology: {sid!r} is not a spout of the topology")
        spouts[sid] = FixedTupleSpout(tuples, spec.streams.get("default", ()))
    mocked = topology.with_objects(spouts)
    with TestCluster(conf) as cluster:
        run = cluster.submit_for_capture("complete-topology", conf, mocked)
        cluster.wait_idle()
        timeout = run.conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
        for _ in range(3):  # two rotations expire whatever is still pending
            if all(s.settled for s in spouts.values()):
                break
            cluster.advance_time(timeout)
        return {cid: list(run.captured.get(cid, [])) for cid in topology.components}
