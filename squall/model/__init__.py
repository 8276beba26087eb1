"""The topology model: what a user declares, with no knowledge of Spark."""

from squall.model.builder import BoltDeclarer, SpoutDeclarer, TopologyBuilder
from squall.model.components import DEFAULT_STREAM, BasicBolt, Bolt, Spout, StatefulBolt
from squall.model.errors import FailedException, InvalidConfigError, InvalidTopologyError, SquallError, TopologyFailed
from squall.model.fields import Fields
from squall.model.groupings import (
    AllGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from squall.model.topology import ComponentSpec, GlobalStreamId, Subscription, Topology, TopologyContext
from squall.model.tuple import Tuple

__all__ = [
    "DEFAULT_STREAM",
    "AllGrouping",
    "BasicBolt",
    "Bolt",
    "BoltDeclarer",
    "ComponentSpec",
    "DirectGrouping",
    "FailedException",
    "Fields",
    "FieldsGrouping",
    "GlobalGrouping",
    "GlobalStreamId",
    "Grouping",
    "InvalidConfigError",
    "InvalidTopologyError",
    "LocalOrShuffleGrouping",
    "NoneGrouping",
    "ShuffleGrouping",
    "Spout",
    "SpoutDeclarer",
    "StatefulBolt",
    "SquallError",
    "Subscription",
    "Topology",
    "TopologyBuilder",
    "TopologyContext",
    "TopologyFailed",
    "Tuple",
]
