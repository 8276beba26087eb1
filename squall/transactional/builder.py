"""``TransactionalTopologyBuilder``: one transactional spout, batch bolts, committers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.model.builder import BoltDeclarer, TopologyBuilder
from squall.model.errors import InvalidTopologyError
from squall.model.topology import Topology
from squall.transactional.bolts import Committer
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


@dataclass(frozen=True)
class TransactionalTopology:
    id: str
    spout_id: str
    spout: _Partitioned
    parallelism: int
    topology: Topology
    committers: frozenset[str]

    @property
    def commit_phase_bolts(self) -> list[str]:
        """Committers and everything downstream of one, in topological order."""
        return commit_phase(self.topology, self.committers)

    @property
    def processing_phase_bolts(self) -> list[str]:
        later = set(self.commit_phase_bolts)
        return [c for c in self.topology.topological_order() if c in self.topology.bolts and c not in later]


class TransactionalTopologyBuilder:
    """``id`` names the topology's durable progress, so a restart continues where it left off."""

    def __init__(self, id: str, spout_id: str, spout: _Partitioned, parallelism: int = 1) -> None:
        if not isinstance(spout, _Partitioned):
            raise InvalidTopologyError(
                f"transactional topology {id!r}: spout {spout_id!r} must be a PartitionedTransactionalSpout "
                f"or an OpaquePartitionedTransactionalSpout, got {type(spout).__name__}"
            )
        self.id, self.spout_id, self.spout, self.parallelism = id, spout_id, spout, parallelism
        self._builder = TopologyBuilder()
        self._builder.set_spout(spout_id, _SpoutStandIn(spout), parallelism)
        self._committers: set[str] = set()

    def set_bolt(self, id: str, bolt: Any, parallelism: int = 1) -> BoltDeclarer:
        if isinstance(bolt, Committer):
            self._committers.add(id)
        return self._builder.set_bolt(id, bolt, parallelism)

    def set_committer_bolt(self, id: str, bolt: Any, parallelism: int = 1) -> BoltDeclarer:
        self._committers.add(id)
        return self._builder.set_bolt(id, bolt, parallelism)

    def build(self, conf: Mapping[str, Any] | None = None) -> TransactionalTopology:
        topology = self._builder.build(conf)
        return TransactionalTopology(
            self.id, self.spout_id, self.spout, self.parallelism, topology, frozenset(self._committers)
        )
