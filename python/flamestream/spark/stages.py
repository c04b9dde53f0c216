"""Operator fusion: the graph's stateless steps grouped into stages, and the stage runner.

A *stage* is a set of stateless steps (map, flat_map, filter, broadcast, merge) that runs as
**one** Arrow pass on Spark (``mapInArrow``): item rows in, item rows out, every step of the
stage applied in between without leaving the Python worker. With fusion on, a stage is a
maximal connected group of stateless steps; with fusion off, every step is its own stage
(one Python round trip per step: the comparison the fusion benchmark makes).

:class:`StageRunner` applies a stage to a batch step by step, in topological order, each step
over all the batch's items at once (a list comprehension per step, not a call chain per
item), with exactly the reference runtime's rules for metas and tombstones (see
:mod:`flamestream.runtime.reference`): every stateless step appends ``(0, child)`` to the
trace, a tombstone stays a tombstone, a dropped replayed item becomes one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import GraphError, StepError
from flamestream.graph.logical import LogicalGraph
from flamestream.graph.steps import (
    STATELESS,
    Broadcast,
    Filter,
    FlatMap,
    Map,
    Merge,
    Sink,
    Step,
)
from flamestream.model import GlobalTime, LocalTime
from flamestream.spark.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_payload,
    encode_payload,
    encode_trace,
)

#: What a stateless step appends to the trace of its first (or only) output.
_STATELESS_LOCAL = LocalTime(0, 0)


@dataclass(frozen=True)
class Stage:
    """Stateless steps that run as one Arrow pass."""

    index: int
    steps: tuple[str, ...]  #: in topological order
    entries: tuple[str, ...]  #: steps that receive items from outside the stage

    @property
    def name(self) -> str:
        """The name Spark shows for the stage's ``mapInArrow`` (in ``explain()``)."""
        return f"flamestream_stage_{self.index}__" + "__".join(
            s.replace(".", "_") for s in self.steps
        )


def plan_stages(graph: LogicalGraph, *, fusion: bool = True) -> list[Stage]:
    """The graph's stateless steps as stages, in an order where producers come first."""
    groupings = [step.step_id for step in graph.groupings()]
    if groupings:
        raise GraphError(
            groupings[0],
            "a graph of stateless steps (map, flat_map, filter, broadcast, merge)",
            "a grouping",
            "groupings do not run on Spark yet; run this graph with the reference runtime "
            "(flamestream.testing.run_in_order)",
        )
    order = _topological(graph)
    stateless = [sid for sid in order if isinstance(graph.step(sid), STATELESS)]
    groups = _connected(graph, stateless) if fusion else [[sid] for sid in stateless]
    position = {sid: i for i, sid in enumerate(order)}
    groups.sort(key=lambda group: min(position[s] for s in group))
    stages = []
    for index, group in enumerate(groups, start=1):
        steps = tuple(sorted(group, key=position.__getitem__))
        inside = set(steps)
        entries = tuple(sid for sid in steps if any(p not in inside for p in graph.producers(sid)))
        stages.append(Stage(index, steps, entries))
    return stages


def _topological(graph: LogicalGraph) -> list[str]:
    """Step ids, producers before consumers (the graph is acyclic without groupings)."""
    indegree = {sid: len(graph.producers(sid)) for sid in graph.steps}
    ready = [sid for sid, n in indegree.items() if n == 0]
    order = []
    while ready:
        sid = ready.pop(0)
        order.append(sid)
        step = graph.step(sid)
        for port in range(step.outputs):
            consumer = graph.consumer(sid, port)
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                ready.append(consumer)
    return order


def _connected(graph: LogicalGraph, stateless: list[str]) -> list[list[str]]:
    """Maximal groups of stateless steps connected by edges between stateless steps."""
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
            neighbours = list(graph.producers(sid)) + [
                graph.consumer(sid, port) for port in range(step.outputs)
            ]
            for other in neighbours:
                if other in members and other not in seen:
                    seen.add(other)
                    todo.append(other)
        groups.append(group)
    return groups


def render_default(payload: Any) -> str:
    """Text as is, bytes decoded as UTF-8 (bad bytes escaped), anything else as ``repr``."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, bytes):
        return payload.decode("utf-8", "backslashreplace")
    return repr(payload)


class _Items:
    """Items on their way to one step: parallel lists (input row, trace suffix, payload, flags)."""

    __slots__ = ("flags", "payloads", "rows", "suffixes")

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.suffixes: list[tuple[LocalTime, ...]] = []
        self.payloads: list[Any] = []
        self.flags: list[int] = []


class StageRunner:
    """Applies one stage to Arrow batches of item rows (runs in executors' Python workers)."""

    def __init__(
        self, graph: LogicalGraph, stage: Stage, render: Callable[[Any], str] = render_default
    ) -> None:
        self.stage = stage
        self.steps: list[Step] = [graph.step(sid) for sid in stage.steps]
        self.consumers = {
            step.step_id: [graph.consumer(step.step_id, p) for p in range(step.outputs)]
            for step in self.steps
        }
        self.sinks = {sid for sid, step in graph.steps.items() if isinstance(step, Sink)}
        self.render = render

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow``'s function."""
        for batch in batches:
            if batch.num_rows:
                yield self.run(batch)

    def run(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The stage's output rows for one batch of input rows."""
        queues = {sid: _Items() for sid in self.stage.steps}
        targets = batch.column("to").to_pylist()
        payloads = batch.column("payload").to_pylist()
        flags = batch.column("flags").to_pylist()
        for row, (to, payload, flag) in enumerate(zip(targets, payloads, flags, strict=True)):
            queue = queues[to]
            queue.rows.append(row)
            queue.suffixes.append(())
            queue.payloads.append(decode_payload(payload))
            queue.flags.append(flag)
        leaving: dict[str, _Items] = {}
        for step in self.steps:
            outputs = self._apply(step, queues[step.step_id], batch)
            for port, items in enumerate(outputs):
                dest = self.consumers[step.step_id][port]
                queue = queues.get(dest) or leaving.setdefault(dest, _Items())
                queue.rows += items.rows
                queue.suffixes += items.suffixes
                queue.payloads += items.payloads
                queue.flags += items.flags
        return self._rows(batch, leaving)

    def _apply(self, step: Step, items: _Items, batch: pa.RecordBatch) -> list[_Items]:
        """Outputs per port of ``step`` for ``items``."""
        if isinstance(step, Broadcast):
            copies = []
            for port in range(step.n):
                out = _Items()
                local = LocalTime(0, port)
                out.rows = list(items.rows)
                out.suffixes = [(*s, local) for s in items.suffixes]
                out.payloads = list(items.payloads)
                out.flags = list(items.flags)
                copies.append(out)
            return copies
        out = _Items()
        if isinstance(step, Merge):
            out.rows, out.payloads, out.flags = items.rows, items.payloads, items.flags
            out.suffixes = [(*s, _STATELESS_LOCAL) for s in items.suffixes]
            return [out]
        if isinstance(step, Map):
            fn = step.fn
            results = self._call(step, items, batch, lambda p: fn(p))
            out.rows, out.flags = items.rows, items.flags
            out.payloads = results
            out.suffixes = [(*s, _STATELESS_LOCAL) for s in items.suffixes]
            return [out]
        if isinstance(step, Filter):
            predicate = step.predicate
            keep = self._call(step, items, batch, lambda p: bool(predicate(p)))
            for k, kept in enumerate(keep):
                flag = items.flags[k]
                if kept:
                    out.payloads.append(items.payloads[k])
                elif flag & MAY_INVALIDATE and not step.version_stable:
                    out.payloads.append(None)  # dropped, but what it would invalidate must go
                    flag |= TOMBSTONE
                else:
                    continue
                out.rows.append(items.rows[k])
                out.suffixes.append((*items.suffixes[k], _STATELESS_LOCAL))
                out.flags.append(flag)
            return [out]
        if isinstance(step, FlatMap):
            fn = step.fn
            expanded = self._call(step, items, batch, lambda p: list(fn(p)))
            for k, children in enumerate(expanded):
                flag = items.flags[k]
                if not children and flag & MAY_INVALIDATE:
                    children, flag = [None], flag | TOMBSTONE
                for child, payload in enumerate(children):
                    out.rows.append(items.rows[k])
                    out.suffixes.append((*items.suffixes[k], LocalTime(0, child)))
                    out.payloads.append(payload)
                    out.flags.append(flag)
            return [out]
        msg = f"step {step.step_id!r}: {step.kind} cannot run in a stateless stage"
        raise GraphError(step.step_id, "a stateless step", step.kind, msg)

    def _call(
        self, step: Step, items: _Items, batch: pa.RecordBatch, fn: Callable[[Any], Any]
    ) -> list[Any]:
        """``fn`` over the items' payloads; tombstones pass untouched (as if kept).

        A raising user function fails the task with :class:`StepError` naming the step, the
        item's global time and its determinant (the front record it descends from).
        """
        results: list[Any] = []
        append = results.append
        try:
            for payload, flag in zip(items.payloads, items.flags, strict=True):
                append(fn(payload) if not flag & TOMBSTONE else _tombstone_result(step))
        except Exception as exc:  # a user function failed: name the step and the record
            row = items.rows[len(results)]
            raise StepError(
                step.step_id,
                getattr(step, "fn", None) or getattr(step, "predicate", None),
                GlobalTime(batch.column("ts")[row].as_py(), batch.column("front")[row].as_py()),
                (batch.column("source")[row].as_py(), batch.column("position")[row].as_py()),
                exc,
            ) from exc
        return results

    def _rows(self, batch: pa.RecordBatch, leaving: dict[str, _Items]) -> pa.RecordBatch:
        """The item rows leaving the stage, for the steps after it (sinks get ``value``)."""
        rows: list[int] = []
        traces: list[bytes] = []
        flags: list[int] = []
        targets: list[str] = []
        payloads: list[bytes | None] = []
        values: list[str | None] = []
        old_traces = batch.column("trace").to_pylist()
        suffix_bytes: dict[tuple[LocalTime, ...], bytes] = {}
        for dest, items in leaving.items():
            to_sink = dest in self.sinks
            for row, suffix, payload, flag in zip(
                items.rows, items.suffixes, items.payloads, items.flags, strict=True
            ):
                encoded = suffix_bytes.get(suffix)
                if encoded is None:
                    encoded = suffix_bytes[suffix] = encode_trace(suffix)
                rows.append(row)
                traces.append(old_traces[row] + encoded)
                flags.append(flag)
                targets.append(dest)
                if flag & TOMBSTONE:
                    payloads.append(None)
                    values.append(None)
                elif to_sink:
                    payloads.append(None)
                    values.append(self.render(payload))
                else:
                    payloads.append(encode_payload(payload))
                    values.append(None)
        taken = pa.array(rows, pa.int64())
        columns = [
            pc.take(batch.column("ts"), taken),
            pc.take(batch.column("front"), taken),
            pa.array(traces, pa.binary()),
            pa.array(flags, pa.int8()),
            pc.take(batch.column("source"), taken),
            pc.take(batch.column("position"), taken),
            pa.array(targets, pa.string()),
            pa.array(payloads, pa.binary()),
            pa.array(values, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ITEM_SCHEMA)


def _tombstone_result(step: Step) -> Any:
    """What a tombstone counts as at ``step``: kept by filters, one child of a flat_map."""
    if isinstance(step, Filter):
        return True
    if isinstance(step, FlatMap):
        return [None]
    return None
