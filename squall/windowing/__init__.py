"""Windows over a bolt's tuples, as Storm's windowed bolts have them: count and time windows, sliding and
tumbling, processing time or event time with watermarks."""

from squall.model.builder import bolt_runs_as
from squall.windowing.bolt import WindowedBolt
from squall.windowing.executor import WindowedBoltExecutor
from squall.windowing.manager import (
    EXPIRE_EVENTS_THRESHOLD,
    Event,
    WatermarkEvent,
    WindowEvents,
    WindowLifecycleListener,
    WindowManager,
)
from squall.windowing.persistent import PersistentWindowedBoltExecutor
from squall.windowing.policies import (
    Action,
    CountEvictionPolicy,
    CountTriggerPolicy,
    EvictionContext,
    EvictionPolicy,
    TimeEvictionPolicy,
    TimeTriggerPolicy,
    TriggerPolicy,
    WatermarkCountEvictionPolicy,
    WatermarkCountTriggerPolicy,
    WatermarkTimeEvictionPolicy,
    WatermarkTimeTriggerPolicy,
)
from squall.windowing.watermarks import WatermarkEventGenerator


def executor_for(bolt: WindowedBolt) -> WindowedBoltExecutor:
    """The bolt that runs a ``WindowedBolt`` in its tasks: its windows kept in memory, or in the task's state
    (``with_persistence()``)."""
    return PersistentWindowedBoltExecutor(bolt) if bolt.persistent else WindowedBoltExecutor(bolt)


bolt_runs_as(WindowedBolt, executor_for, WindowedBoltExecutor.validate)

__all__ = [
    "EXPIRE_EVENTS_THRESHOLD",
    "Action",
    "CountEvictionPolicy",
    "CountTriggerPolicy",
    "Event",
    "EvictionContext",
    "EvictionPolicy",
    "TimeEvictionPolicy",
    "TimeTriggerPolicy",
    "TriggerPolicy",
    "WatermarkCountEvictionPolicy",
    "WatermarkCountTriggerPolicy",
    "WatermarkEvent",
    "WatermarkEventGenerator",
    "WatermarkTimeEvictionPolicy",
    "WatermarkTimeTriggerPolicy",
    "WindowEvents",
    "WindowLifecycleListener",
    "WindowManager",
]
