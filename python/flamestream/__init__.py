"""flamestream: the FlameStream model on Spark Structured Streaming.

Build a graph with :class:`Dataflow` (map, flat_map, filter, broadcast, merge, grouping,
cycles allowed), test it on the reference runtime (:mod:`flamestream.testing`), and run it on
Spark (:mod:`flamestream.spark`) in a session set up by :func:`configure`.
"""

from __future__ import annotations

import importlib

# not imported from ``typing``: every process Spark starts imports this package first (through
# ``flamestream-python``), and ``typing`` takes 16 ms to import
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from flamestream.errors import (
        BatchStepError,
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
        distinct_count,
        exact_or_approximate,
        heavy_hitters,
        map_reduce,
        max_by,
        min_by,
        quantiles,
        sum_by,
        sum_estimates,
    )
    from flamestream.model import END_OF_TIME, DataItem, GlobalTime, LocalTime, Meta, invalidates
    from flamestream.runtime import ReferenceRuntime, Released
    from flamestream.session import configure

#: Where each public name lives. Imported on first use (PEP 562), so that importing one
#: submodule (``flamestream.launcher``, which every Python process Spark starts runs first)
#: does not import the graph builder, the model and the reference runtime with it.
_EXPORTS = {
    "BatchStepError": "flamestream.errors",
    "ConfigError": "flamestream.errors",
    "FlameStreamError": "flamestream.errors",
    "GraphError": "flamestream.errors",
    "InvariantError": "flamestream.errors",
    "RecordError": "flamestream.errors",
    "ScheduleError": "flamestream.errors",
    "StepError": "flamestream.errors",
    "UnhashableKeyError": "flamestream.errors",
    "Dataflow": "flamestream.graph",
    "LogicalGraph": "flamestream.graph",
    "Mapped": "flamestream.graph",
    "Reduced": "flamestream.graph",
    "Stream": "flamestream.graph",
    "Template": "flamestream.graph",
    "count": "flamestream.graph",
    "distinct_count": "flamestream.graph",
    "exact_or_approximate": "flamestream.graph",
    "heavy_hitters": "flamestream.graph",
    "quantiles": "flamestream.graph",
    "sum_estimates": "flamestream.graph",
    "map_reduce": "flamestream.graph",
    "max_by": "flamestream.graph",
    "min_by": "flamestream.graph",
    "sum_by": "flamestream.graph",
    "END_OF_TIME": "flamestream.model",
    "DataItem": "flamestream.model",
    "GlobalTime": "flamestream.model",
    "LocalTime": "flamestream.model",
    "Meta": "flamestream.model",
    "invalidates": "flamestream.model",
    "ReferenceRuntime": "flamestream.runtime",
    "Released": "flamestream.runtime",
    "configure": "flamestream.session",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _EXPORTS:
        msg = f"module 'flamestream' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__version__ = "0.1.0"

__all__ = [
    "END_OF_TIME",
    "BatchStepError",
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
    "configure",
    "count",
    "distinct_count",
    "exact_or_approximate",
    "heavy_hitters",
    "invalidates",
    "map_reduce",
    "max_by",
    "min_by",
    "quantiles",
    "sum_by",
    "sum_estimates",
]
