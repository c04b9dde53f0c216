"""flamestream: the FlameStream model on Spark Structured Streaming.

Build a graph with :class:`Dataflow` (map, flat_map, filter, broadcast, merge, grouping,
cycles allowed), test it on the reference runtime (:mod:`flamestream.testing`), and run it on
Spark (coming with the Spark runtime).
"""

from flamestream.errors import (
    ConfigError,
    FlameStreamError,
    GraphError,
    InvariantError,
    RecordError,
    ScheduleError,
    StepError,
    UnhashableKeyError,
)
from flamestream.graph import (
    Dataflow,
    LogicalGraph,
    Mapped,
    Reduced,
    Stream,
    Template,
    count,
    map_reduce,
)
from flamestream.model import END_OF_TIME, DataItem, GlobalTime, LocalTime, Meta, invalidates
from flamestream.runtime import ReferenceRuntime, Released

__version__ = "0.1.0"

__all__ = [
    "END_OF_TIME",
    "ConfigError",
    "DataItem",
    "Dataflow",
    "FlameStreamError",
    "GlobalTime",
    "GraphError",
    "InvariantError",
    "LocalTime",
    "LogicalGraph",
    "Mapped",
    "Meta",
    "RecordError",
    "Reduced",
    "ReferenceRuntime",
    "Released",
    "ScheduleError",
    "StepError",
    "Stream",
    "Template",
    "UnhashableKeyError",
    "__version__",
    "count",
    "invalidates",
    "map_reduce",
]
