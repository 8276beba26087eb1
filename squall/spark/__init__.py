"""The Spark runtime: waves of bolt stages on Spark, driven from the driver."""

from squall.spark.records import EmitError, SerializationError

__all__ = ["EmitError", "SerializationError"]
