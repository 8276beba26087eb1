"""State for stateful bolts: ``KeyValueState`` (Storm's), and the deltas a task's state is saved as."""

from squall.model.state import KeyValueState, StateDelta, UnpicklableState

__all__ = ["KeyValueState", "StateDelta", "UnpicklableState"]
