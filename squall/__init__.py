"""squall: Apache Storm's processing guarantees for Python, executed on Apache Spark."""

from squall.model import (
    BasicBolt,
    Bolt,
    FailedException,
    Fields,
    InvalidConfigError,
    InvalidTopologyError,
    Spout,
    TopologyBuilder,
    Tuple,
)

__version__ = "0.1.0"

__all__ = [
    "BasicBolt",
    "Bolt",
    "FailedException",
    "Fields",
    "InvalidConfigError",
    "InvalidTopologyError",
    "Spout",
    "TopologyBuilder",
    "Tuple",
]
