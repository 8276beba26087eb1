"""Sources and sinks: where tuples come from and where results go."""

from squall.connectors.queue import QueueSpout, ReliableQueue

__all__ = ["QueueSpout", "ReliableQueue"]
