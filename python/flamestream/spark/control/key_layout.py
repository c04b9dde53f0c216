"""Elastic key layout: key ranges (slots) move between keyed partitions between ticks.

A keyed stage's keys fall into ``slots`` = ``SLOTS_PER_PARTITION`` times the partitions
(``slot_of``: CRC-32 of the encoded key). A tick's *layout* assigns every slot to a partition;
rows entering the stage carry a ``route`` column that lands them in their slot's partition
(``Layout.route``), and each task keeps its groupings' state *per slot*, so a slot's state
moves with it: a task restores the snapshots of the slots the tick gives it, merges them,
runs the batch, and saves one snapshot per slot again (``GroupingState.split`` / ``merge``).

The layout of batch ``b`` is in the query's offset log, as the end offset of an internal
source, the *control channel* (``format("flamestream").option("channel", "control")``, unioned in
by ``apply`` with ``elastic=True``). Its reader runs in the driver's source process: at each
planning it reads how many items each slot received in the last batch (written by the keyed
tasks), and if one partition carries much more than its share, it packs the slots anew
(largest first onto the least loaded partition: a *split* of the hot partition's key range);
when the load would be even again under the default layout, it goes back to it (a *merge*
of the ranges it had split). A new
layout changes the control channel's offset; an unchanged one does not, so the control channel
never makes a batch happen by itself except to carry a decision. A replayed batch reads the
same offsets, hence the same layout, hence restores the same slots.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from flamestream.spark.durable import (
    QueryCheckpoint,
)
from flamestream.spark.exec.partitioning import SALT_PREFIX, is_salt, landing_keys

#: Slots per key partition: how finely key ranges can be moved.
SLOTS_PER_PARTITION = 4


#: Route values start with this byte (salts, which mark invalidator copies, with ``\\x00``).
ROUTE_PREFIX = b"\x01"


#: A partition carrying more than this times the mean load is hot.
SKEW = 1.5


#: A moved layout goes back to the default once that would carry at most this times the mean
#: (below SKEW, so that a layout does not flip back and forth at the threshold).
EVEN = 1.2


#: Below this many items in a batch, loads say too little to move anything.
MIN_ITEMS = 200


#: A new packing must cut the hottest partition's load by this factor to be worth a move.
GAIN = 0.8


def slot_of(key: bytes, slots: int) -> int:
    """The slot of an encoded key."""
    return zlib.crc32(key) % slots


@cache
def routes(partitions: int) -> tuple[bytes, ...]:
    """One route value per partition: ``repartition(n, "route")`` puts ``routes(n)[p]`` in p."""
    return landing_keys(ROUTE_PREFIX, partitions)


@dataclass(frozen=True)
class Layout:
    """Which partition holds each slot."""

    partitions: int
    assignment: tuple[int, ...]

    @classmethod
    def default(cls, partitions: int) -> Layout:
        """Slot ``s`` in partition ``s mod n``: every partition gets the same number."""
        slots = partitions * SLOTS_PER_PARTITION
        return cls(partitions, tuple(s % partitions for s in range(slots)))

    @property
    def slots(self) -> int:
        """How many slots there are."""
        return len(self.assignment)

    def partition_of(self, key: bytes) -> int:
        """The partition holding the encoded key's slot."""
        return self.assignment[slot_of(key, self.slots)]

    def route(self, key: bytes | None) -> bytes | None:
        """The ``route`` value of a row with ``key``: None (everywhere) and salts stay."""
        if key is None or is_salt(key):
            return key
        return routes(self.partitions)[self.partition_of(key)]

    def slots_of(self, partition: int) -> list[int]:
        """The slots of ``partition``."""
        return [s for s, p in enumerate(self.assignment) if p == partition]

    def loads(self, slot_loads: Mapping[int, int]) -> list[int]:
        """Items per partition, given items per slot."""
        out = [0] * self.partitions
        for slot, items in slot_loads.items():
            out[self.assignment[slot]] += items
        return out


@dataclass(frozen=True)
class ElasticPolicy:
    """When the control channel moves key ranges (``SparkGraph(elastic=ElasticPolicy(...))``)."""

    skew: float = SKEW
    even: float = EVEN
    min_items: int = MIN_ITEMS
    gain: float = GAIN

    def options(self) -> dict[str, str]:
        """As control channel options."""
        return {
            "skew": str(self.skew),
            "even": str(self.even),
            "minItems": str(self.min_items),
            "gain": str(self.gain),
        }


def plan_layout(
    current: Layout, slot_loads: Mapping[int, int], policy: ElasticPolicy | None = None
) -> tuple[Layout | None, str]:
    """A better layout for these per-slot loads, or None (pure; see the module docstring)."""
    policy = policy or ElasticPolicy()
    total = sum(slot_loads.values())
    if total < policy.min_items:
        return None, f"{total} items: too few to judge"
    mean = total / current.partitions
    loads = current.loads(slot_loads)
    hottest = max(loads)
    default = Layout.default(current.partitions)
    if current != default and max(default.loads(slot_loads)) <= policy.even * mean:
        return default, f"even under the default layout (max {max(default.loads(slot_loads))})"
    if hottest <= policy.skew * mean:
        return None, f"balanced (max {hottest}, mean {mean:.0f})"
    packed = [0] * current.partitions
    assignment = list(current.assignment)
    for slot in sorted(range(current.slots), key=lambda s: (-slot_loads.get(s, 0), s)):
        target = min(range(current.partitions), key=lambda p: (packed[p], p))
        assignment[slot] = target
        packed[target] += slot_loads.get(slot, 0)
    if max(packed) > policy.gain * hottest:
        return None, f"no packing cuts the hot partition's {hottest} items enough"
    return Layout(current.partitions, tuple(assignment)), (
        f"split: max partition load {hottest} -> {max(packed)} (mean {mean:.0f})"
    )


_LAYOUTS: dict[tuple[str, int], Layout] = {}


def read_layout(checkpoint: str, batch_id: int, partitions: int) -> Layout:
    """Batch ``batch_id``'s layout, from the control channel's line of the offset log."""
    cached = _LAYOUTS.get((checkpoint, batch_id))
    if cached is not None:
        return cached
    layout = Layout.default(partitions)
    offsets = QueryCheckpoint(checkpoint).source_offsets(batch_id) if batch_id >= 0 else None
    if offsets is not None:
        for offset in offsets:
            if isinstance(offset, dict) and offset.get("flamestreamLayout") == 1:
                layout = Layout(int(offset["partitions"]), tuple(offset["assignment"]))
        if len(_LAYOUTS) > 64:
            _LAYOUTS.clear()
        _LAYOUTS[(checkpoint, batch_id)] = layout
    return layout


__all__ = [
    "SALT_PREFIX",
    "ElasticPolicy",
    "Layout",
    "plan_layout",
    "read_layout",
    "routes",
    "slot_of",
]
