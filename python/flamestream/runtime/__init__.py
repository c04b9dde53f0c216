"""Runtimes and the pieces they share.

The acker, the grouping state and the barrier buffer are written once and used by every
runtime; :class:`ReferenceRuntime` is the in-process oracle the others are checked against.
"""

from flamestream.runtime.acker import Acker, item_id
from flamestream.runtime.barrier import BarrierBuffer
from flamestream.runtime.grouping import GroupingState
from flamestream.runtime.reference import (
    Delivery,
    Envelope,
    FifoScheduler,
    FrontPosition,
    RandomScheduler,
    ReferenceRuntime,
    Released,
    RuntimeStats,
    Scheduler,
)

__all__ = [
    "Acker",
    "BarrierBuffer",
    "Delivery",
    "Envelope",
    "FifoScheduler",
    "FrontPosition",
    "GroupingState",
    "RandomScheduler",
    "ReferenceRuntime",
    "Released",
    "RuntimeStats",
    "Scheduler",
    "item_id",
]
