"""The reliability core: pure state machines the runtime drives. No Spark, no threads."""

from squall.reliability.acker import (
    ACKED,
    FAILED,
    TIMED_OUT,
    Acker,
    Acks,
    Init,
    PendingEntry,
    Rotate,
    Settlement,
)
from squall.reliability.acks import AckBatch, acker_partition
from squall.reliability.anchoring import ack_messages, anchor, enter_messages, fail_messages, spout_edges
from squall.reliability.ids import IdGenerator, new_id

__all__ = [
    "ACKED",
    "FAILED",
    "TIMED_OUT",
    "AckBatch",
    "Acker",
    "Acks",
    "IdGenerator",
    "Init",
    "PendingEntry",
    "Rotate",
    "Settlement",
    "ack_messages",
    "acker_partition",
    "anchor",
    "enter_messages",
    "fail_messages",
    "new_id",
    "spout_edges",
]
