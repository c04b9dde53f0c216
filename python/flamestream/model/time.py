"""Global time, local time, traces and metas, with their orders and the invalidation relation.

All of these are tuples underneath, so Python's tuple comparison *is* the paper's
lexicographic order: global times by (ts, front), traces element by element with a proper
prefix first, metas by global time and then trace.
"""

from __future__ import annotations

from typing import NamedTuple

#: Largest ts a front may assign (int64, so Spark can store it in a LongType column).
MAX_TS = 2**63 - 2
#: Largest front id (int32, so Spark can store it in an IntegerType column).
MAX_FRONT = 2**31 - 2


class GlobalTime(NamedTuple):
    """When an item entered the system: the admitting front's ts, then the front's id."""

    ts: int
    front: int

    def __str__(self) -> str:
        if self == END_OF_TIME:
            return "(end of time)"
        return f"({self.ts}, front {self.front})"


#: Greater than every global time a front can assign; the min-time once every front is closed.
END_OF_TIME = GlobalTime(MAX_TS + 1, MAX_FRONT + 1)


class LocalTime(NamedTuple):
    """What one operation appends to an item's trace: (logical time, child index)."""

    logical: int
    child: int


Trace = tuple[LocalTime, ...]


class Meta(NamedTuple):
    """An item's meta: its global time and its trace. Orders by global time, then trace."""

    global_time: GlobalTime
    trace: Trace

    def extended(self, local: LocalTime) -> Meta:
        """The meta of an item derived from this one by an operation that appends ``local``."""
        return Meta(self.global_time, (*self.trace, local))


def invalidates(newer: Meta, older: Meta) -> bool:
    """Whether an item with meta ``newer`` invalidates one with meta ``older``.

    True exactly when both have the same global time, ``older``'s trace is less than
    ``newer``'s, and their first difference is in a logical time. A first difference in a
    child index means siblings (flat_map outputs, broadcast copies): no invalidation. A trace
    that is a prefix of the other (an item and what it became further along a cycle) has no
    first difference: no invalidation either.

    >>> gt = GlobalTime(7, 0)
    >>> invalidates(Meta(gt, (LocalTime(2, 0),)), Meta(gt, (LocalTime(1, 0),)))
    True
    >>> invalidates(Meta(gt, (LocalTime(0, 1),)), Meta(gt, (LocalTime(0, 0),)))
    False
    """
    if newer.global_time != older.global_time:
        return False
    for old_local, new_local in zip(older.trace, newer.trace, strict=False):
        if old_local != new_local:
            return old_local.logical < new_local.logical
    return False


def lineage(trace: Trace) -> Trace:
    """The trace a barrier sink releases: ``trace`` with every logical time set to 0.

    A grouping's logical times count the tuples it emitted, replays included, so they depend
    on the order items arrived in; a released row must not (the determinism contract). They
    never order released items either: a sink releases a global time's items together, once
    none can be invalidated any more, and two valid items of one global time first differ in
    a child index (were it a logical time, the greater would invalidate the other and the
    barrier would have dropped that one) or not at all (one trace a prefix of the other).
    Setting every logical time to 0 keeps those differences, so a sink's released items keep
    their order and stay distinct, and what is left (the child indexes along the item's path:
    which flat_map output, which broadcast copy) is a function of the input alone.

    >>> lineage((LocalTime(0, 2), LocalTime(5, 0), LocalTime(0, 1)))
    (LocalTime(logical=0, child=2), LocalTime(logical=0, child=0), LocalTime(logical=0, child=1))
    """
    return tuple(LocalTime(0, local.child) if local.logical else local for local in trace)
