"""Function swaps: a step's function replaced from a global time on, the rule written once.

A swap ``(step, at, fn)`` is part of a run's input: items of global time below ``at`` go
through the step's function as it was, items at or above ``at`` through ``fn``. Every version
of an item (a grouping's replays) has the item's global time, so all versions of one item go
through the same function, and a replay of any batch applies the same one again.

Only functions that do not decide where items live can be swapped: a map's, a map_batches'
(the new function gets the step's format and input type), a flat_map's, a filter's predicate.
A grouping's key decides the key partition (and the bucket) of every item; a new key would
move items between partitions and buckets that already hold state, so it is refused, as are
map_reduce's own steps (their functions make and read the mapped items its grouping is keyed
by: swap the map before a map_reduce instead). A grouping's state carries over a swap upstream
of it: the grouping is not swapped, only what reaches it changes.

Used by the reference runtime (:meth:`ReferenceRuntime.swap`) and by the Spark runtime's stage
runners, which dispatch per item by the swaps their batch's offsets record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flamestream.errors import SwapError
from flamestream.graph.logical import LogicalGraph
from flamestream.graph.steps import Filter, FlatMap, Grouping, Map, MapBatches, Step
from flamestream.model import GlobalTime

#: Per swappable kind, the field holding its user function.
SWAPPABLE_FIELDS: dict[type[Step], str] = {
    Map: "fn",
    MapBatches: "fn",
    FlatMap: "fn",
    Filter: "predicate",
}

#: The module of ``Template``: a map holding one is rendered in Arrow, not swappable.
_TEMPLATE_MODULE = "flamestream.graph.template"

#: The module of map_reduce's building blocks: steps holding them are not swappable.
_MAP_REDUCE_MODULE = "flamestream.graph.mapreduce"


def function_of(step: Step) -> Callable[..., Any] | None:
    """The user function of a swappable step (None for other steps)."""
    name = SWAPPABLE_FIELDS.get(type(step))
    return getattr(step, name) if name is not None else None


def check_swappable(graph: LogicalGraph, step_id: str) -> Step:
    """The step ``step_id`` of ``graph`` if its function may be swapped; else :class:`SwapError`."""
    if step_id not in graph.steps:
        raise SwapError(
            step_id,
            f"a step of graph {graph.name!r}",
            "no such step",
            f"swappable steps are {', '.join(swappable_steps(graph)) or 'none'}",
        )
    step = graph.step(step_id)
    if isinstance(step, Grouping):
        raise SwapError(
            step_id,
            "a map, map_batches, flat_map or filter",
            "a grouping, whose key function decides which key partition and bucket every item "
            "goes to",
            "a new key would move keyed state between partitions: swap a map before the "
            "grouping instead, or start a new query (new checkpoint) with the new key",
        )
    fn = function_of(step)
    if fn is None:
        raise SwapError(step_id, "a map, map_batches, flat_map or filter", f"a {step.kind}", "")
    if _is_template(fn):
        raise SwapError(
            step_id,
            "a map, map_batches, flat_map or filter whose function the runtime did not compile",
            "a Template, which the Spark runtime renders in Arrow from the query's start",
            "to swap it later, give the graph a function calling the template "
            "(lambda r: template(r)) instead",
        )
    if _is_map_reduce_part(fn):
        raise SwapError(
            step_id,
            "a map, map_batches, flat_map or filter of your own",
            f"one of map_reduce's own steps (function {type(fn).__name__})",
            "map_reduce's steps make and read the mapped items its grouping is keyed by: swap "
            "a map before the map_reduce (or after it) instead",
        )
    return step


def swapped(graph: LogicalGraph, step_id: str, fn: Any) -> Step:
    """Step ``step_id`` of ``graph`` with ``fn`` as its function, when it may be swapped."""
    step = check_swappable(graph, step_id)
    if not callable(fn):
        raise SwapError(
            step_id,
            f"a callable for the {step.kind}'s function",
            f"{type(fn).__name__} {fn!r}",
            "pass a function, a lambda or an object with __call__",
        )
    return with_function(step, fn)


def with_function(step: Step, fn: Any) -> Step:
    """``step`` (a map, map_batches, flat_map or filter) holding ``fn`` instead of its function."""
    return dataclasses.replace(step, **{SWAPPABLE_FIELDS[type(step)]: fn})


def swappable_steps(graph: LogicalGraph) -> list[str]:
    """The ids of ``graph``'s steps whose function may be swapped, in graph order."""
    out = []
    for sid, step in graph.steps.items():
        fn = function_of(step)
        if fn is not None and not _is_map_reduce_part(fn) and not _is_template(fn):
            out.append(sid)
    return out


def _is_template(fn: Any) -> bool:
    return type(fn).__module__ == _TEMPLATE_MODULE


def _is_map_reduce_part(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return module == _MAP_REDUCE_MODULE or type(fn).__module__ == _MAP_REDUCE_MODULE


@dataclass(frozen=True)
class Versions:
    """One step's versions: the graph's, then each swap's from its global time on.

    Swaps are kept in the order they were made; for an item, the newest swap whose time is at
    or below the item's global time decides (the graph's step when none is). Swaps made by
    the Spark runtime come with non-decreasing times, so there this is "the last swap at or
    below the item".
    """

    base: Step
    swaps: tuple[tuple[GlobalTime, Step], ...] = ()

    def then(self, at: GlobalTime, step: Step) -> Versions:
        """These versions and one more, from ``at`` on."""
        return Versions(self.base, (*self.swaps, (at, step)))

    def at(self, time: GlobalTime) -> Step:
        """The step as it is for an item of global time ``time``."""
        for since, step in reversed(self.swaps):
            if time >= since:
                return step
        return self.base

    def index_at(self, time: GlobalTime) -> int:
        """0 for the graph's step, ``i`` for the ``i``-th swap (1-based), as :meth:`at` picks."""
        for i in range(len(self.swaps), 0, -1):
            if time >= self.swaps[i - 1][0]:
                return i
        return 0

    def all(self) -> Sequence[Step]:
        """Every version, the graph's first (indexes as :meth:`index_at`)."""
        return [self.base, *(step for _, step in self.swaps)]


__all__ = [
    "SWAPPABLE_FIELDS",
    "Versions",
    "check_swappable",
    "function_of",
    "swappable_steps",
    "swapped",
    "with_function",
]
