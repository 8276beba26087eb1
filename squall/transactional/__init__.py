"""Transactional topologies: exactly-once state updates (Storm's "Design 3")."""

from squall.transactional.bolts import BatchBolt, Committer
from squall.transactional.builder import TransactionalTopology, TransactionalTopologyBuilder
from squall.transactional.coordinator import TransactionAttempt, TransactionCoordinator
from squall.transactional.spouts import (
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
)
from squall.transactional.state import KeyedState, OpaqueValue, SqliteKeyedState, TransactionalValue
from squall.transactional.store import CoordinatorStore, SqliteCoordinatorStore
from squall.transactional.stores import open_coordinator_store

__all__ = [
    "BatchBolt",
    "Committer",
    "CoordinatorStore",
    "KeyedState",
    "MemoryTransactionalSpout",
    "OpaqueMemoryTransactionalSpout",
    "OpaquePartitionedTransactionalSpout",
    "OpaqueValue",
    "PartitionedTransactionalSpout",
    "SqliteCoordinatorStore",
    "open_coordinator_store",
    "SqliteKeyedState",
    "TransactionAttempt",
    "TransactionCoordinator",
    "TransactionalTopology",
    "TransactionalTopologyBuilder",
    "TransactionalValue",
]
