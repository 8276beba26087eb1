"""Distributed RPC: callers send a function's args to the topology that serves it and wait for its results.

``LocalDRPC`` serves in the caller's process (tests); ``squall drpc`` runs a ``DRPCServer`` that ``DRPCClient``
calls and topologies reach through ``drpc.servers`` and ``drpc.port``.
"""

from squall.drpc.client import DRPCClient, DRPCInvocations
from squall.drpc.core import DRPC, DRPCExecutionException
from squall.drpc.linear import FinishedCallback, LinearDRPCTopologyBuilder
from squall.drpc.local import LocalDRPC
from squall.drpc.server import DRPCServer

__all__ = [
    "DRPC",
    "DRPCClient",
    "DRPCExecutionException",
    "DRPCInvocations",
    "DRPCServer",
    "FinishedCallback",
    "LinearDRPCTopologyBuilder",
    "LocalDRPC",
]
