"""Logical graphs: inert step definitions, the builder, validation and composite helpers."""

from flamestream.graph.approximate import (
    distinct_count,
    exact_or_approximate,
    heavy_hitters,
    quantiles,
    sum_estimates,
)
from flamestream.graph.dataflow import Dataflow, Stream
from flamestream.graph.logical import Edge, LogicalGraph
from flamestream.graph.mapreduce import (
    Mapped,
    Reduced,
    count,
    map_reduce,
    max_by,
    min_by,
    sum_by,
)
from flamestream.graph.steps import (
    Broadcast,
    Filter,
    FlatMap,
    Grouping,
    Map,
    MapBatches,
    Merge,
    Sink,
    Source,
    Step,
)
from flamestream.graph.template import Template

__all__ = [
    "Broadcast",
    "Dataflow",
    "Edge",
    "Filter",
    "FlatMap",
    "Grouping",
    "LogicalGraph",
    "Map",
    "MapBatches",
    "Mapped",
    "Merge",
    "Reduced",
    "Sink",
    "Source",
    "Step",
    "Stream",
    "Template",
    "count",
    "distinct_count",
    "exact_or_approximate",
    "heavy_hitters",
    "map_reduce",
    "max_by",
    "min_by",
    "quantiles",
    "sum_by",
    "sum_estimates",
]
