"""Exceptions a user of squall meets."""


class SquallError(Exception):
    """Base class of squall's own errors."""


class InvalidTopologyError(SquallError, ValueError):
    """A topology that cannot run; the message names the component, stream or field."""


class InvalidConfigError(SquallError, ValueError):
    """A config value of the wrong type or range; the message names the key."""


class FailedException(Exception):
    """Raised by a bolt to fail its input tuple (or, in a transactional topology, the batch)."""


class TopologyFailed(SquallError):
    """A failure no retry can fix stopped the topology; the message names the component, the task and the cause."""


FATAL_MARK = "[squall:fatal]"  # marks, inside a worker's error text, a failure no retry can fix


class FatalError(SquallError):
    """Raised where a retry cannot help (a batch whose records are gone, say): the topology stops, naming it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{FATAL_MARK} {message}")


class BrokerUnavailable(SquallError):
    """A broker or database that could not be reached; the message names its URL."""
