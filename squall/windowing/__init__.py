"""Windows over a bolt's tuples, as Storm's windowed bolts have them: count and time windows, sliding and
tumbling, processing time or event time with watermarks."""

from squall.windowing.manager import (
    EXPIRE_EVENTS_THRESHOLD,
    Event,
    WatermarkEvent,
    WindowEvents,
    WindowLifecycleListener,
    WindowManager,
)
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
