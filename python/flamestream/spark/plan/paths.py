"""Which path each stage takes: the general one, or a declared shortcut. Needs no Spark.

The rule for when a fast path applies lives here, and only here. :func:`plan_paths` decides,
once per graph when the :class:`~flamestream.spark.plan.execution.ExecutionPlan` is built,
a :class:`StagePath` per stage; the runners (:mod:`flamestream.spark.exec`) build their Arrow
shortcut from it without deciding again, and ``describe()`` prints it. The paths:

=====================  ==========================================================================
``general``            every step applied item by item (any function)
``declared-count``     a stateless stage ``[flat_map(str.split) ->] count's map`` whose rows
                       enter map_reduce's merge: split and counted in Arrow (``.columnar``)
``map-reduce-cycle``   a keyed stage that is exactly map_reduce's cycle: in-order items fold
                       without the per-step deliveries (``.fastpath``)
``summed``             such a cycle whose reduce adds up (``count``, ``operator.add``): its
                       in-order batches below the min-time summed in Arrow (``.summed``)
``in-order-grouping``  a keyed stage that is a grouping alone (no cycle; any key function):
                       in-order items appended without the per-step deliveries
                       (``exec.general.in_order``)
``rendered-template``  a stage run after a ``summed`` stage, in its tasks, that is one plain
                       ``Template`` map into a sink, with the default render: the sums'
                       items rendered in Arrow (``.rendered``)
=====================  ==========================================================================

Steps are recognized by their declared type (``str.split``, ``CountMapper``, ``ReduceStep``,
``Template``, map_reduce's tagged grouping and filter), never by a user function's code.
What only a batch can tell is written here too, in :meth:`StagePath.in_batch`: a batch in
which one of the stage's steps runs a swapped function runs the stage the general way, and a
``summed`` stage without a min-time (no checkpoint) runs the ``map-reduce-cycle`` path. Each
shortcut also hands a batch (or an item) it cannot take, e.g. one with replayed or flagged
rows, to the general path: the same rows either way (``tests/unit/test_fastpath.py``,
``test_columnar.py``).

>>> from flamestream import Dataflow, Template, count
>>> from flamestream.spark.plan import plan_execution
>>> flow = Dataflow("wc")
>>> counts = count(flow, "count", flow.flat_map("split", flow.source("lines"), str.split))
>>> flow.sink("out", flow.map("show", counts, Template("{key}={value}")))
>>> plan = plan_execution(flow.build())
>>> [plan.path(stage).kind for stage in plan.stages]
['declared-count', 'summed', 'rendered-template']
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from flamestream.graph.logical import LogicalGraph
from flamestream.graph.mapreduce import (
    CountMapper,
    MapStep,
    ReduceStep,
    ends_with_mapped,
    is_map_reduce_grouping,
    mapped_key,
)
from flamestream.graph.steps import Broadcast, Filter, FlatMap, Map, Merge, Sink
from flamestream.graph.template import Template
from flamestream.spark.plan.stages import Stage

#: The paths a stage may take (module docstring).
PathKind = Literal[
    "general",
    "declared-count",
    "map-reduce-cycle",
    "summed",
    "in-order-grouping",
    "rendered-template",
]

GENERAL: PathKind = "general"
DECLARED_COUNT: PathKind = "declared-count"
CYCLE: PathKind = "map-reduce-cycle"
SUMMED: PathKind = "summed"
LANE: PathKind = "in-order-grouping"
RENDERED: PathKind = "rendered-template"


@dataclass(frozen=True)
class TextCount:
    """A stateless stage that is ``[flat_map(str.split) ->] count(...)``'s map.

    What :func:`text_count` recognizes; the stage runner then splits and counts in Arrow
    (:mod:`flamestream.spark.exec.declared.columnar`).
    """

    entry: str  #: the stage's one entry step
    split: bool  #: whether the entry splits the text into words first
    dest: str  #: where the count's items go (the count's merge, in the keyed stage)
    combined: bool  #: whether they are combined per key before the shuffle (``latest``)


@dataclass(frozen=True)
class CycleShape:
    """A keyed stage that is exactly map_reduce's cycle (what :func:`map_reduce_cycle` finds).

    merge -> grouping(2, by key) -> filter -> reduce -> broadcast, one port back to the
    merge, the other leaving the stage; the keyed stage's runner folds its in-order items
    (:mod:`flamestream.spark.exec.declared.fastpath`).
    """

    merge: str  #: the cycle's merge, where items enter
    exit_to: str  #: where the broadcast's leaving copy goes (outside the stage)
    exit_port: int  #: the broadcast's port leaving the stage
    back_port: int  #: the broadcast's port going back to the merge
    reduce: ReduceStep  #: the reduce map's function


@dataclass(frozen=True)
class GroupingAlone:
    """A keyed stage that is its grouping alone (what :func:`grouping_alone` finds).

    Its in-order items take the lane of :mod:`flamestream.spark.exec.general.in_order`.
    """

    grouping: str  #: the grouping
    exit_to: str  #: where its tuples go (after the stage)


@dataclass(frozen=True)
class TemplateRender:
    """A stateless stage that is one map rendering with a plain ``Template`` into a sink.

    What :func:`template_render` recognizes; after a keyed stage summing text keys, the tail
    then renders in Arrow (:mod:`flamestream.spark.exec.declared.rendered`).
    """

    parts: tuple[tuple[str, str | None], ...]  #: the template's (literal, field) pairs
    sink: str  #: the sink the rendered text goes to


@dataclass(frozen=True)
class StagePath:
    """The path a stage takes, and what its shortcut is built from (module docstring).

    Exactly one of ``count``, ``cycle`` (``map-reduce-cycle`` and ``summed``), ``lane`` and
    ``render`` is set for a shortcut, none for ``general``.
    """

    kind: PathKind = GENERAL
    count: TextCount | None = None
    cycle: CycleShape | None = None
    lane: GroupingAlone | None = None
    render: TemplateRender | None = None
    #: steps may be swapped while the query runs: a batch with one swapped runs it generally
    swappable: bool = False

    def in_batch(self, swapped: Collection[str] = (), *, min_time: bool = True) -> PathKind:
        """The path a batch takes: ``swapped``, the stage's steps swapped in the batch.

        ``min_time``: whether the task knows the min-time its state is collected at (a
        streaming query with a checkpoint); the ``summed`` path needs it.
        """
        if swapped and self.kind != GENERAL:
            return GENERAL  # the shortcut compiled the steps as the graph declared them
        if self.kind == SUMMED and not min_time:
            return CYCLE
        return self.kind

    def describe(self) -> str:
        """The path as ``describe()`` names it: its kind, then what it does."""
        what = {
            GENERAL: "",
            DECLARED_COUNT: "a declared count of text: {done} in Arrow",
            CYCLE: "map_reduce's cycle: in-order items fold without per-step deliveries",
            SUMMED: "a declared sum: in-order batches summed in Arrow",
            LANE: "a grouping alone: in-order items appended without per-step deliveries",
            RENDERED: "a declared Template: a sum's items rendered in Arrow",
        }[self.kind]
        if self.count is not None:
            split = "split and " if self.count.split else ""
            what = what.format(done=split + ("counted" if self.count.combined else "keyed"))
        unless = ", unless a step is swapped" if self.swappable and self.kind != GENERAL else ""
        return f"path {self.kind}" + (f", {what}" if what else "") + unless


#: The path of a stage no shortcut applies to.
GENERAL_PATH = StagePath()


def plan_paths(
    graph: LogicalGraph,
    stages: Collection[Stage],
    *,
    keys: Mapping[str, Callable[[Any], Any]],
    precombine: Mapping[str, Callable[[Any, Any], Any]],
    hosts: Mapping[int, int],
    default_render: bool = True,
    swappable: bool = False,
) -> dict[int, StagePath]:
    """Each stage's path, by index (stages producers first, as the plan orders them).

    ``keys`` and ``precombine``: the plan's per keyed entry; ``hosts``: the stateless stages
    run in a keyed stage's tasks (``tails_of_keyed``); ``default_render``: the graph renders
    sink payloads with the default render; ``swappable``: steps may be swapped.
    """
    paths: dict[int, StagePath] = {}
    for stage in stages:
        host = hosts.get(stage.index)
        paths[stage.index] = stage_path(
            graph,
            stage,
            keys=keys,
            precombine=precombine,
            default_render=default_render,
            host=None if host is None else paths[host],
            swappable=swappable,
        )
    return paths


def stage_path(
    graph: LogicalGraph,
    stage: Stage,
    *,
    keys: Mapping[str, Callable[[Any], Any]],
    precombine: Mapping[str, Callable[[Any, Any], Any]],
    default_render: bool = True,
    host: StagePath | None = None,
    swappable: bool = False,
) -> StagePath:
    """The path of one stage; ``host``: the path of the keyed stage it runs after, if any.

    A stage with no steps (the keying of the source's rows) takes the general path.
    """
    if not stage.steps:
        return GENERAL_PATH
    if stage.grouping is not None:
        cycle = map_reduce_cycle(graph, stage)
        if cycle is not None:
            kind = SUMMED if cycle.reduce.sums else CYCLE
            return StagePath(kind, cycle=cycle, swappable=swappable)
        lane = grouping_alone(graph, stage)
        return StagePath(LANE if lane else GENERAL, lane=lane, swappable=swappable)
    counted = text_count(graph, stage, precombine)
    if counted is not None and keys.get(counted.dest) is mapped_key:
        # its rows carry map_reduce's keys: the merge must key them by ``mapped_key``
        return StagePath(DECLARED_COUNT, count=counted, swappable=swappable)
    render = template_render(graph, stage)
    if render is not None and default_render and host is not None and host.kind == SUMMED:
        # only a summed stage hands its tails the sums as columns (ReducedColumns)
        return StagePath(RENDERED, render=render, swappable=swappable)
    return StagePath(swappable=swappable)


def text_count(
    graph: LogicalGraph, stage: Stage, precombine: Mapping[str, Callable[[Any, Any], Any]]
) -> TextCount | None:
    """``stage`` as a declared count of text, or None.

    Exactly the steps ``[flat_map(str.split) ->] map(count's mapper without a key)``, the map's
    items going to the count's merge, which may pre-combine them (with ``operator.add``).
    """
    if stage.grouping is not None or len(stage.entries) != 1 or len(stage.steps) > 2:
        return None
    steps = [graph.step(sid) for sid in stage.steps]
    split = len(steps) == 2 and isinstance(steps[0], FlatMap) and steps[0].fn is str.split
    if len(steps) != 1 + split or stage.entries[0] != steps[0].step_id:
        return None
    count = steps[-1]
    if split and graph.consumer(steps[0].step_id) != count.step_id:
        return None
    if not (
        isinstance(count, Map)
        and isinstance(count.fn, MapStep)
        and count.fn.mapper == CountMapper()
        and count.outputs == 1
    ):
        return None
    dest = graph.consumer(count.step_id)
    if not isinstance(graph.step(dest), Merge) or dest in stage.steps:
        return None
    combiner = precombine.get(dest)
    if combiner is not None and combiner is not operator.add:
        return None
    return TextCount(steps[0].step_id, split, dest, combined=combiner is not None)


def map_reduce_cycle(graph: LogicalGraph, stage: Stage) -> CycleShape | None:
    """``stage`` as exactly map_reduce's cycle (as built by ``map_reduce``), or None."""
    if stage.grouping is None or len(stage.steps) != 5 or len(stage.entries) != 1:
        return None
    inside = set(stage.steps)
    merge = graph.step(stage.entries[0])
    grouping = graph.step(stage.grouping)
    if not isinstance(merge, Merge) or graph.consumer(merge.step_id) != grouping.step_id:
        return None
    if not is_map_reduce_grouping(grouping):
        return None
    filter_ = graph.step(graph.consumer(grouping.step_id))
    if not (
        isinstance(filter_, Filter)
        and filter_.predicate is ends_with_mapped
        and filter_.version_stable
    ):
        return None
    reduce = graph.step(graph.consumer(filter_.step_id))
    if not (isinstance(reduce, Map) and isinstance(reduce.fn, ReduceStep)):
        return None
    broadcast = graph.step(graph.consumer(reduce.step_id))
    if not (isinstance(broadcast, Broadcast) and broadcast.n == 2):
        return None
    ports = [graph.consumer(broadcast.step_id, port) for port in range(2)]
    if merge.step_id not in ports:
        return None
    back = ports.index(merge.step_id)
    exit_port = 1 - back
    if ports[exit_port] in inside:
        return None
    return CycleShape(merge.step_id, ports[exit_port], exit_port, back, reduce.fn)


def grouping_alone(graph: LogicalGraph, stage: Stage) -> GroupingAlone | None:
    """``stage`` as a grouping alone, or None (a cycle's keyed stage holds more steps)."""
    if stage.grouping is None or tuple(stage.steps) != (stage.grouping,):
        return None
    return GroupingAlone(stage.grouping, graph.consumer(stage.grouping))


def template_render(graph: LogicalGraph, stage: Stage) -> TemplateRender | None:
    """``stage`` as a plain ``Template`` render into a sink, or None.

    Exactly one map whose function is a ``Template`` of plain ``{key}`` / ``{value}`` fields
    (:meth:`~flamestream.graph.template.Template.plain_parts`), its output going to a sink.
    """
    if stage.grouping is not None or len(stage.steps) != 1:
        return None
    step = graph.step(stage.steps[0])
    if not isinstance(step, Map) or not isinstance(step.fn, Template):
        return None
    parts = step.fn.plain_parts()
    sink = graph.consumer(step.step_id, 0)
    if parts is None or not isinstance(graph.step(sink), Sink):
        return None
    return TemplateRender(tuple(parts), sink)
