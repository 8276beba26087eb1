"""``LocalDRPC``: a DRPC server in the test's (or script's) own process, as Storm's ``LocalDRPC``."""

from __future__ import annotations

from typing import Any

from squall.drpc.core import DEFAULT_TIMEOUT_SECS, DRPC


class LocalDRPC(DRPC):
    """Give it to ``TridentTopology.new_drpc_stream(function, drpc)`` or ``LinearDRPCTopologyBuilder``, submit the
    topology to a ``LocalCluster``, then call ``execute(function, args)`` from any thread: it returns the JSON text
    of the result tuples, as Storm's does, or raises ``DRPCExecutionException``. A context manager: leaving it
    fails what still waits."""

    def __init__(self, timeout_secs: float = DEFAULT_TIMEOUT_SECS) -> None:
        super().__init__(timeout_secs)

    def __enter__(self) -> LocalDRPC:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def shutdown(self) -> None:
        self.close()

    def __reduce__(self) -> tuple:
        raise TypeError("a LocalDRPC lives in the process that made it: it is never shipped to the workers")
