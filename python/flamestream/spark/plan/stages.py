"""Stages: which steps run together in one Spark pass, in which order, and where loops cut.

A pure function of the logical graph (no Spark): strongly connected components containing a
grouping become keyed stages, stateless steps fuse into the stages around them, and edges
that would close a cycle between stages become loop edges. ``SparkGraph`` wires the result
onto DataFrames; :mod:`flamestream.spark.exec` runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flamestream.errors import GraphError, InvariantError
from flamestream.graph.logical import LogicalGraph
from flamestream.graph.mapreduce import ReduceStep
from flamestream.graph.steps import STATELESS, Grouping, Map, Merge


@dataclass(frozen=True)
class Stage:
    """Steps that run as one Arrow pass: stateless ones fused, or a grouping and its cycle."""

    index: int
    steps: tuple[str, ...]  #: in topological order (a keyed stage: in graph order)
    entries: tuple[str, ...]  #: steps that receive items from outside the stage
    grouping: str | None = None  #: set for a keyed stage: the grouping its items are keyed by

    @property
    def name(self) -> str:
        """The name Spark shows for the stage's ``mapInArrow`` (in ``explain()``)."""
        kind = "keyed" if self.grouping else "stage"
        return f"flamestream_{kind}_{self.index}__" + "__".join(
            s.replace(".", "_") for s in self.steps
        )


def loop_edges(graph: LogicalGraph) -> frozenset[tuple[str, str]]:
    """Edges ``(producer, merge)`` whose items go through the loop channel, to the next batch.

    A cycle through several groupings cannot run inside one keyed stage (each grouping is
    keyed its own way). Such a cycle is cut where it comes back to its entry: every edge from
    inside the strongly connected component into a merge that also takes items from outside.
    What remains must have at most one grouping on any cycle.
    """
    cut: set[tuple[str, str]] = set()
    for component in _strongly_connected(graph, frozenset()):
        groupings = [s for s in component if isinstance(graph.step(s), Grouping)]
        if len(groupings) < 2:
            continue
        for sid in component:
            producers = graph.producers(sid)
            if isinstance(graph.step(sid), Merge) and any(p not in component for p in producers):
                cut.update((p, sid) for p in producers if p in component)
    return frozenset(cut)


def plan_stages(
    graph: LogicalGraph, *, fusion: bool = True, cut: frozenset[tuple[str, str]] = frozenset()
) -> list[Stage]:
    """The graph's steps (but sources and sinks) as stages, producers first.

    A grouping and every step on a cycle through it form a *keyed* stage: items are shuffled
    by the grouping's key and a cycle such as map_reduce's runs to quiescence inside the task.
    Items must enter a keyed stage at the grouping or through merges only (so the key of an
    entering item is the grouping's key of its payload). The remaining stateless steps fuse
    into stages of connected steps with the same number of keyed stages upstream, which keeps
    the stages acyclic. Edges in ``cut`` (:func:`loop_edges`) are left out: their items go to
    the next batch through the loop channel.
    """
    components = _strongly_connected(graph, cut)
    keyed: list[set[str]] = []
    for component in components:
        groupings = sorted(s for s in component if isinstance(graph.step(s), Grouping))
        if len(groupings) > 1:
            raise GraphError(
                groupings[1],
                "at most one grouping on any cycle once cycles are cut where they re-enter",
                f"a cycle through {', '.join(groupings)} that does not pass its entry merge",
                "let every cycle through several groupings come back through the merge where "
                "its items enter, or run this graph with the reference runtime",
            )
        if groupings:
            _check_keyed_entries(graph, component, groupings[0])
            keyed.append(component)
    unit_of = {sid: f"keyed:{i}" for i, c in enumerate(keyed) for sid in c}
    order = _condensed_order(graph, unit_of, cut)

    def producers(sid: str) -> list[str]:
        return [p for p in graph.producers(sid) if (p, sid) not in cut]

    level: dict[str, int] = {}  # keyed stages on the longest path from the source
    for unit in order:
        members = [s for s, u in unit_of.items() if u == unit] or [unit]
        ups = {p for m in members for p in producers(m) if unit_of.get(p, p) != unit}
        level[unit] = max((level[unit_of.get(p, p)] + (p in unit_of) for p in ups), default=0)
    stateless = [
        u for u in order if not u.startswith("keyed:") and isinstance(graph.step(u), STATELESS)
    ]
    groups = _connected(graph, stateless, level, cut) if fusion else [[s] for s in stateless]
    position = {unit: i for i, unit in enumerate(order)}
    units: list[tuple[int, list[str], str | None]] = []
    for group in groups:
        units.append(
            (min(position[s] for s in group), sorted(group, key=position.__getitem__), None)
        )
    graph_order = {sid: i for i, sid in enumerate(graph.steps)}
    for i, component in enumerate(keyed):
        steps = sorted(component, key=graph_order.__getitem__)
        keyed_by = next(s for s in steps if isinstance(graph.step(s), Grouping))
        units.append((position[f"keyed:{i}"], steps, keyed_by))
    units = _producers_first(units, producers)
    for producer, merge in cut:  # a cut edge must leave its stage: the loop is between batches
        together = [members for _, members, _ in units if {producer, merge} <= set(members)]
        if together:
            raise GraphError(
                merge,
                f"the cycle edge {producer} -> {merge} between two stages",
                f"both in one stage ({', '.join(together[0])})",
                "put a step between them, or run this graph with the reference runtime",
            )
    stages = []
    for index, (_, members, grouping) in enumerate(units, start=1):
        inside = set(members)
        entries = tuple(s for s in members if any(p not in inside for p in producers(s)))
        stages.append(Stage(index, tuple(members), entries, grouping))
    return stages


def _producers_first(
    units: list[tuple[int, list[str], str | None]], producers: Callable[[str], list[str]]
) -> list[tuple[int, list[str], str | None]]:
    """The stages ordered so that every stage comes after the stages it reads from.

    A fused group's first step may come early in the graph's order while another of its
    steps reads a keyed stage that comes later (two branches at the same keyed depth meeting
    in a merge): sorting by first step alone would wire a stage before its input. A
    topological sort, taking the earliest-positioned ready stage first, keeps the graph's
    order wherever that order already puts producers first. Fused groups share a keyed depth,
    so the stages never form a cycle.
    """
    unit_of = {sid: i for i, (_, members, _) in enumerate(units) for sid in members}
    needs: list[set[int]] = [set() for _ in units]
    for i, (_, members, _) in enumerate(units):
        for sid in members:
            needs[i] |= {unit_of[p] for p in producers(sid) if p in unit_of and unit_of[p] != i}
    done: set[int] = set()
    ordered: list[tuple[int, list[str], str | None]] = []
    while len(ordered) < len(units):
        ready = [i for i in range(len(units)) if i not in done and needs[i] <= done]
        if not ready:  # cannot happen (see above); fail loudly rather than wire a cycle
            left = [units[i][1] for i in range(len(units)) if i not in done]
            msg = f"the planned stages read each other: {left}"
            raise InvariantError(msg)
        first = min(ready, key=lambda i: units[i][0])
        done.add(first)
        ordered.append(units[first])
    return ordered


def _check_keyed_entries(graph: LogicalGraph, component: set[str], grouping: str) -> None:
    """Items entering a keyed stage must reach its grouping through merges only."""
    for sid in component:
        if all(p in component for p in graph.producers(sid)):
            continue
        current = sid
        while current != grouping:
            step = graph.step(current)
            if not isinstance(step, Merge):
                raise GraphError(
                    sid,
                    f"items entering the cycle of grouping {grouping!r} at the grouping or "
                    "at a merge leading straight to it",
                    f"they enter at {step.kind} {current!r}",
                    "move the step before the cycle's merge (map_reduce's graph has this shape)",
                )
            current = graph.consumer(current)


def _strongly_connected(graph: LogicalGraph, cut: frozenset[tuple[str, str]]) -> list[set[str]]:
    """The graph's strongly connected components (Tarjan), every step in exactly one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def successors(sid: str) -> list[str]:
        ports = range(graph.step(sid).outputs)
        return [c for c in (graph.consumer(sid, p) for p in ports) if (sid, c) not in cut]

    for root in graph.steps:
        if root in index:
            continue
        work = [(root, iter(successors(root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            sid, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors(child))))
                elif child in on_stack:
                    low[sid] = min(low[sid], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[sid])
            if low[sid] == index[sid]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == sid:
                        break
                components.append(component)
    return components


def _condensed_order(
    graph: LogicalGraph, unit_of: dict[str, str], cut: frozenset[tuple[str, str]]
) -> list[str]:
    """Units (a step, or ``keyed:<i>`` for a keyed stage's steps), producers first."""
    units = list(dict.fromkeys(unit_of.get(sid, sid) for sid in graph.steps))
    edges: dict[str, set[str]] = {unit: set() for unit in units}
    indegree = dict.fromkeys(units, 0)
    for sid, step in graph.steps.items():
        for port in range(step.outputs):
            if (sid, graph.consumer(sid, port)) in cut:
                continue
            a, b = unit_of.get(sid, sid), unit_of.get(graph.consumer(sid, port))
            b = b or graph.consumer(sid, port)
            if a != b and b not in edges[a]:
                edges[a].add(b)
                indegree[b] += 1
    ready = [unit for unit in units if indegree[unit] == 0]
    order = []
    while ready:
        unit = ready.pop(0)
        order.append(unit)
        for nxt in sorted(edges[unit], key=units.index):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    return order


def _connected(
    graph: LogicalGraph,
    stateless: list[str],
    level: dict[str, int],
    cut: frozenset[tuple[str, str]],
) -> list[list[str]]:
    """Maximal groups of stateless steps joined by edges between steps of the same level."""
    members = set(stateless)
    seen: set[str] = set()
    groups = []
    for start in stateless:
        if start in seen:
            continue
        group, todo = [], [start]
        seen.add(start)
        while todo:
            sid = todo.pop()
            group.append(sid)
            step = graph.step(sid)
            neighbours = [p for p in graph.producers(sid) if (p, sid) not in cut] + [
                c
                for c in (graph.consumer(sid, port) for port in range(step.outputs))
                if (sid, c) not in cut
            ]
            for other in neighbours:
                if other in members and other not in seen and level[other] == level[sid]:
                    seen.add(other)
                    todo.append(other)
        groups.append(group)
    return groups


def keyed_entries(graph: LogicalGraph, stages: list[Stage]) -> dict[str, Callable[[Any], Any]]:
    """Per step where items enter a keyed stage, the key function they are shuffled by."""
    keys: dict[str, Callable[[Any], Any]] = {}
    for stage in stages:
        if stage.grouping is not None:
            step = graph.step(stage.grouping)
            assert isinstance(step, Grouping)  # noqa: S101
            keys.update(dict.fromkeys(stage.entries, step.key))
    return keys


def reduce_step_of(graph: LogicalGraph, stage: Stage) -> Any:
    """The map_reduce reducer (``ReduceStep``) running in a keyed stage, or None."""
    for sid in stage.steps:
        step = graph.step(sid)
        if isinstance(step, Map) and isinstance(step.fn, ReduceStep):
            return step.fn
    return None


def precombiners(graph: LogicalGraph, stages: list[Stage]) -> dict[str, Callable[[Any, Any], Any]]:
    """Per keyed entry of a map_reduce whose reducer may pre-combine, that reducer."""
    combine: dict[str, Callable[[Any, Any], Any]] = {}
    for stage in stages:
        reduce = reduce_step_of(graph, stage) if stage.grouping else None
        if reduce is not None and reduce.combinable:
            combine.update(dict.fromkeys(stage.entries, reduce.reducer))
    return combine
