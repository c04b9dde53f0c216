"""The FlameStream data model: times, traces, metas, items and the invalidation relation."""

from flamestream.model.item import DataItem
from flamestream.model.time import (
    END_OF_TIME,
    MAX_FRONT,
    MAX_TS,
    GlobalTime,
    LocalTime,
    Meta,
    Trace,
    invalidates,
    lineage,
)

__all__ = [
    "END_OF_TIME",
    "MAX_FRONT",
    "MAX_TS",
    "DataItem",
    "GlobalTime",
    "LocalTime",
    "Meta",
    "Trace",
    "invalidates",
    "lineage",
]
