"""``TransactionalTopologyBuilder``: one transactional spout, batch bolts, committers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.model.builder import BoltDeclarer, TopologyBuilder
from squall.model.errors import InvalidTopologyError
from squall.model.topology import Topology
from squall.transactional.bolts import Committer
from squall.transactional.requests import TUPLES, RequestGroup, RequestSpoutStandIn
from squall.transactional.spouts import _Partitioned


class _SpoutStandIn:
    """What the topology model sees of the transactional spout: its declared fields."""

    def __init__(self, spout: _Partitioned) -> None:
        self.outputs = spout.fields

    def next_tuple(self) -> None:  # batches are emitted by the coordinator, not by next_tuple
        pass


def commit_phase(topology: Topology, committers: frozenset[str]) -> list[str]:
    """The committers and every bolt downstream of one, in topological order: what finishes in the commit phase."""
    later: set[str] = set(committers)
    for cid in topology.topological_order():
        if any(sub.source in later for sub in topology.components[cid].inputs):
            later.add(cid)
    return [c for c in topology.topological_order() if c in later]


def downstream(topology: Topology, spout_id: str) -> frozenset[str]:
    """Every bolt that reads, directly or not, what ``spout_id`` emits."""
    found: set[str] = {spout_id}
    for cid in topology.topological_order():
        if any(sub.source in found for sub in topology.components[cid].inputs):
            found.add(cid)
    return frozenset(found - {spout_id})


@dataclass(frozen=True)
class TransactionalTopology:
    """``spout`` (None when the topology only serves requests) emits the transactional batches; each of
    ``requests`` serves a function's requests (DRPC) through the bolts downstream of its spout."""

    id: str
    spout_id: str | None
    spout: _Partitioned | None
    parallelism: int
    topology: Topology
    committers: frozenset[str]
    requests: tuple[RequestGroup, ...] = ()

    @property
    def commit_phase_bolts(self) -> list[str]:
        """Committers and everything downstream of one, in topological order."""
        return commit_phase(self.topology, self.committers)

    @property
    def processing_phase_bolts(self) -> list[str]:
        later = set(self.commit_phase_bolts)
        return [c for c in self.topology.topological_order() if c in self.topology.bolts and c not in later]


class TransactionalTopologyBuilder:
    """``id`` names the topology's durable progress, so a restart continues where it left off. ``spout`` may be
    None for a topology that only serves requests (``set_request_spout``)."""

    def __init__(self, id: str, spout_id: str | None, spout: _Partitioned | None, parallelism: int = 1) -> None:
        if spout is not None and not isinstance(spout, _Partitioned):
            raise InvalidTopologyError(
                f"transactional topology {id!r}: spout {spout_id!r} must be a PartitionedTransactionalSpout "
                f"or an OpaquePartitionedTransactionalSpout, got {type(spout).__name__}"
            )
        self.id, self.spout_id, self.spout, self.parallelism = id, spout_id, spout, parallelism
        self._builder = TopologyBuilder()
        if spout is not None:
            self._builder.set_spout(spout_id, _SpoutStandIn(spout), parallelism)
        self._committers: set[str] = set()
        self._requests: list[tuple[str, str, Any, bool, str]] = []

    def set_request_spout(
        self, id: str, function: str, source: Any = None, with_id: bool = False, result: str = TUPLES
    ) -> None:
        """A spout whose batches are ``function``'s requests, one per try, each emitted as ``[args]`` (with
        ``with_id``, ``[request id, args]``); ``source`` is a ``RequestSource`` (None: the DRPC servers of the run's
        config). ``result``: how the result rows answer the caller (``requests.TUPLES`` or ``requests.VALUE``)."""
        self._builder.set_spout(id, RequestSpoutStandIn(with_id), 1)
        self._requests.append((id, function, source, with_id, result))

    def set_bolt(self, id: str, bolt: Any, parallelism: int = 1) -> BoltDeclarer:
        if isinstance(bolt, Committer):
            self._committers.add(id)
        return self._builder.set_bolt(id, bolt, parallelism)

    def set_committer_bolt(self, id: str, bolt: Any, parallelism: int = 1) -> BoltDeclarer:
        self._committers.add(id)
        return self._builder.set_bolt(id, bolt, parallelism)

    def build(self, conf: Mapping[str, Any] | None = None) -> TransactionalTopology:
        topology = self._builder.build(conf)
        requests = tuple(
            RequestGroup(sid, function, source, downstream(topology, sid), with_id, result)
            for sid, function, source, with_id, result in self._requests
        )
        for group in requests:
            shared = group.components & (downstream(topology, self.spout_id) if self.spout is not None else set())
            committing = group.components & self._committers
            if shared or committing:
                raise InvalidTopologyError(
                    f"transactional topology {self.id!r}: bolts {sorted(shared or committing)} read the requests "
                    f"of {group.spout_id!r}"
                    + (" and the transactional batches" if shared else " and commit: requests commit nothing")
                )
        return TransactionalTopology(
            self.id, self.spout_id, self.spout, self.parallelism, topology, frozenset(self._committers), requests
        )
