"""The reliability core: pure state machines the runtime drives. No Spark, no threads."""

from squall.reliability.anchoring import ack_messages, anchor, enter_messages, fail_messages, spout_edges
from squall.reliability.ids import IdGenerator, new_id
from squall.reliability.ledger import (
    AckLedger,
    LedgerEntry,
    Outcome,
    PartitionedLedger,
    Settled,
    acker_partition,
)

__all__ = [
    "AckLedger",
    "IdGenerator",
    "LedgerEntry",
    "Outcome",
    "PartitionedLedger",
    "Settled",
    "ack_messages",
    "acker_partition",
    "anchor",
    "enter_messages",
    "fail_messages",
    "new_id",
    "spout_edges",
]
