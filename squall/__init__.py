"""squall: Apache Storm's processing guarantees for Python, executed on Apache Spark."""

from typing import Any

from squall.model import (
    BasicBolt,
    Bolt,
    FailedException,
    Fields,
    InvalidConfigError,
    InvalidTopologyError,
    Spout,
    SquallError,
    StatefulBolt,
    TopologyBuilder,
    TopologyFailed,
    Tuple,
)
from squall.version import __version__
from squall.windowing.bolt import Count, Duration, Window, WindowedBolt

__all__ = [
    "BasicBolt",
    "Bolt",
    "Count",
    "Duration",
    "FailedException",
    "Fields",
    "InvalidConfigError",
    "InvalidTopologyError",
    "LocalCluster",
    "Spout",
    "SquallError",
    "StatefulBolt",
    "TopologyBuilder",
    "TopologyFailed",
    "Tuple",
    "Window",
    "WindowedBolt",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # The Spark runtime is imported on first use, so the model stays light to import.
    if name == "LocalCluster":
        from squall.cluster import LocalCluster

        return LocalCluster
    raise AttributeError(f"module 'squall' has no attribute {name!r}")
