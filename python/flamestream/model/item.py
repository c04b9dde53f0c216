"""Data items: a payload with its meta, plus the two flags the runtime needs for exactness."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flamestream.model.time import GlobalTime, LocalTime, Meta


@dataclass(frozen=True, slots=True, eq=False)
class DataItem:
    """A payload and its meta, as it travels along one edge of the graph.

    ``may_invalidate`` is set when a grouping re-emitted (replayed) this item or one of its
    ancestors. Only such items can invalidate others: the first difference of two traces can
    be in a logical time only where a grouping emitted twice for the same last item.

    ``tombstone`` marks an item that stands for a replayed item a filter (or an empty
    flat_map) dropped. It has no payload and is never released; it travels on so that
    groupings and sinks downstream still drop what the dropped item would have invalidated.
    Without it, a replay whose new version is filtered out would leave the old version's
    outputs standing.

    Items compare by identity: two items are the same item only if they are the same object
    (metas are unique; payloads need not be comparable or hashable).
    """

    payload: Any
    meta: Meta
    may_invalidate: bool = False
    tombstone: bool = False

    def __reduce__(self) -> tuple[type[DataItem], tuple[Any, Meta, bool, bool]]:
        # what pickling a slots dataclass does by default goes through a per-field state
        # tuple and setattr; groupings' snapshots hold one item per key, so pickle the args
        return DataItem, (self.payload, self.meta, self.may_invalidate, self.tombstone)

    @property
    def global_time(self) -> GlobalTime:
        """The item's global time."""
        return self.meta.global_time

    def derive(self, payload: Any, local: LocalTime) -> DataItem:
        """The item an operation outputs for this one: new payload, ``local`` appended."""
        return DataItem(payload, self.meta.extended(local), self.may_invalidate, self.tombstone)

    def as_tombstone(self, local: LocalTime) -> DataItem:
        """A tombstone standing for this (dropped) item, ``local`` appended to its trace."""
        return DataItem(None, self.meta.extended(local), may_invalidate=True, tombstone=True)
