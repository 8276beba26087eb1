"""Apache Kafka, as storm-kafka-client and Trident's Kafka spouts have it, on confluent-kafka.

* ``KafkaSpout``: at-least-once (or at-most-once, or no guarantee) for plain topologies (``spout.py``).
* ``KafkaTransactionalSpout`` and ``KafkaOpaqueTransactionalSpout``: batches for transactional topologies,
  each an offset range per partition (``transactional.py``).
* ``KafkaBolt``: writes tuples to a topic, acking each after the broker's delivery report; ``KafkaCommitter``
  writes each transactional batch in a Kafka transaction, once (``bolt.py``).
"""

from squall.connectors.kafka.bolt import KafkaBolt, KafkaCommitter
from squall.connectors.kafka.client import (
    add_partitions,
    committed_offsets,
    create_topic,
    end_offsets,
    produce,
    read_all,
)
from squall.connectors.kafka.offsets import OffsetManager, RetryExponentialBackoff
from squall.connectors.kafka.spout import (
    FirstPollOffsetStrategy,
    JsonTranslator,
    KafkaSpout,
    ProcessingGuarantee,
    RecordTranslator,
    Routed,
)
from squall.connectors.kafka.transactional import KafkaOpaqueTransactionalSpout, KafkaTransactionalSpout

__all__ = [
    "FirstPollOffsetStrategy",
    "JsonTranslator",
    "KafkaBolt",
    "KafkaCommitter",
    "KafkaOpaqueTransactionalSpout",
    "KafkaSpout",
    "KafkaTransactionalSpout",
    "OffsetManager",
    "ProcessingGuarantee",
    "RecordTranslator",
    "RetryExponentialBackoff",
    "Routed",
    "add_partitions",
    "committed_offsets",
    "create_topic",
    "end_offsets",
    "produce",
    "read_all",
]
