"""Distributed RPC: callers send a function's args to the topology that serves it and wait for its results."""

from squall.drpc.core import DRPC, DRPCExecutionException
from squall.drpc.local import LocalDRPC

__all__ = ["DRPC", "DRPCExecutionException", "LocalDRPC"]
