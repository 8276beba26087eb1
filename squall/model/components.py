"""Base classes for the user's spouts and bolts.

Subclasses need not call ``__init__``. ``outputs`` declares the output streams:
a sequence of field names for the ``default`` stream, or a mapping of stream id
to field names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from squall.model.errors import InvalidTopologyError
from squall.model.fields import Fields, as_fields

DEFAULT_STREAM = "default"

OutputsDeclaration = Sequence[str] | Mapping[str, Sequence[str]] | Fields


class Spout:
    """A source of tuples. Lives on the driver; ``next_tuple`` is called each wave."""

    outputs: OutputsDeclaration = ()

    def open(self, conf: dict, context: Any, collector: Any) -> None:
        pass

    def next_tuple(self) -> None:
        pass

    def ack(self, msg_id: Any) -> None:
        pass

    def fail(self, msg_id: Any) -> None:
        pass

    def activate(self) -> None:
        """The topology (re)starts calling ``next_tuple`` after a deactivation."""

    def deactivate(self) -> None:
        """``next_tuple`` will not be called until ``activate``; acks and fails still arrive."""

    def close(self) -> None:
        pass


class Bolt:
    """A processing step that acks, fails and anchors explicitly."""

    outputs: OutputsDeclaration = ()

    def prepare(self, conf: dict, context: Any, collector: Any) -> None:
        pass

    def execute(self, tup: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define execute(tup)")

    def cleanup(self) -> None:
        pass


class StatefulBolt(Bolt):
    """A bolt whose state survives workers and waves: Storm's ``IStatefulBolt``.

    ``init_state(state)`` is called once per task instance, after ``prepare``,
    with the task's ``KeyValueState`` as of the last completed wave (empty at
    first). Keep in it everything the task must not lose; its other attributes
    are made again by ``prepare`` wherever the task is rebuilt. Only the keys a
    wave changed are saved after it. ``pre_commit(checkpoint_id)`` is called
    before a checkpoint of the state is taken. ``execute``, ``ack`` and anchoring
    work as for ``Bolt``.
    """

    def init_state(self, state: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define init_state(state)")

    def pre_commit(self, checkpoint_id: int) -> None:
        pass


class BasicBolt:
    """A bolt whose emits are anchored to the input and whose input is acked on return.

    Raising ``FailedException`` fails the input instead.
    """

    outputs: OutputsDeclaration = ()

    def prepare(self, conf: dict, context: Any) -> None:
        pass

    def execute(self, tup: Any, collector: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define execute(tup, collector)")

    def cleanup(self) -> None:
        pass


def declared_streams(component_id: str, component: Any) -> dict[str, Fields]:
    """The streams a component declares, as ``{stream_id: Fields}``."""
    outputs = getattr(component, "outputs", ())
    try:
        if isinstance(outputs, Mapping):
            streams = {str(stream): as_fields(names) for stream, names in outputs.items()}
        else:
            streams = {DEFAULT_STREAM: as_fields(outputs)} if len(outputs) else {}
    except (TypeError, ValueError) as exc:
        raise InvalidTopologyError(f"component {component_id!r} declares bad outputs: {exc}") from None
    return streams
