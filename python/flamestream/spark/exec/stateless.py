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

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import GraphError, StepError, UnhashableKeyError
from flamestream.graph.logical import LogicalGraph
from flamestream.graph.mapreduce import Mapped
from flamestream.graph.steps import (
    Broadcast,
    Filter,
    FlatMap,
    Grouping,
    Map,
    Merge,
    Sink,
    Step,
)
from flamestream.model import GlobalTime, LocalTime
from flamestream.runtime.grouping import is_hashable
from flamestream.spark.exec.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_payload,
    encode_key,
    encode_payload,
    encode_trace,
)
from flamestream.spark.plan.stages import Stage

#: A key not computed yet (a key function may return None).
_NO_KEY = object()


#: What a stateless step appends to the trace of its first (or only) output.
_STATELESS_LOCAL = LocalTime(0, 0)


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

    def add(self, row: int, suffix: tuple[LocalTime, ...], payload: Any, flag: int) -> None:
        """One more item."""
        self.rows.append(row)
        self.suffixes.append(suffix)
        self.payloads.append(payload)
        self.flags.append(flag)

    def add_nth(self, items: _Items, nth: int, payload: Any, flag: int) -> None:
        """``items``' ``nth`` item (its row and suffix) with ``payload`` and ``flag``."""
        self.add(items.rows[nth], items.suffixes[nth], payload, flag)


class StageRunner:
    """Applies one stage to Arrow batches of item rows (runs in executors' Python workers)."""

    def __init__(
        self,
        graph: LogicalGraph,
        stage: Stage,
        keys: Mapping[str, Callable[[Any], Any]],
        render: Callable[[Any], str] = render_default,
        precombine: Mapping[str, Callable[[Any, Any], Any]] | None = None,
    ) -> None:
        self.stage = stage
        self.precombine = dict(precombine or {})
        self.steps: list[Step] = [graph.step(sid) for sid in stage.steps]
        self.consumers = {
            step.step_id: [graph.consumer(step.step_id, p) for p in range(step.outputs)]
            for step in self.steps
        }
        self.exits = Exits(graph, keys, render)

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
        leaving: dict[str, _Items] = {}
        for row, (to, payload, flag) in enumerate(zip(targets, payloads, flags, strict=True)):
            # rows for a step outside the stage pass through (a stage may only add keys)
            queue = queues.get(to) or leaving.setdefault(to, _Items())
            queue.rows.append(row)
            queue.suffixes.append(())
            queue.payloads.append(decode_payload(payload))
            queue.flags.append(flag)
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
                out.suffixes = _extended(items.suffixes, local)
                out.payloads = list(items.payloads)
                out.flags = list(items.flags)
                copies.append(out)
            return copies
        out = _Items()
        if isinstance(step, Merge):
            out.rows, out.payloads, out.flags = items.rows, items.payloads, items.flags
            out.suffixes = _extended(items.suffixes, _STATELESS_LOCAL)
            return [out]
        if isinstance(step, Map):
            fn = step.fn
            results = self._call(step, items, batch, fn)
            out.rows, out.flags = items.rows, items.flags
            out.payloads = results
            out.suffixes = _extended(items.suffixes, _STATELESS_LOCAL)
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
                out.suffixes.append(items.suffixes[k])
                out.flags.append(flag)
            out.suffixes = _extended(out.suffixes, _STATELESS_LOCAL)
            return [out]
        if isinstance(step, FlatMap):
            fn = step.fn
            expanded = self._call(step, items, batch, lambda p: list(fn(p)))
            # per parent suffix (shared tuples, by identity): its children's suffixes so far
            extend: dict[int, list[tuple[LocalTime, ...]]] = {}
            rows, suffixes, payloads, flags = out.rows, out.suffixes, out.payloads, out.flags
            for k, children in enumerate(expanded):
                flag = items.flags[k]
                if not children:
                    if not flag & MAY_INVALIDATE:
                        continue
                    children, flag = [None], flag | TOMBSTONE
                suffix, count = items.suffixes[k], len(children)
                longer = extend.get(id(suffix))
                if longer is None:
                    longer = extend[id(suffix)] = []
                while len(longer) < count:
                    longer.append((*suffix, _child_local(len(longer))))
                rows += [items.rows[k]] * count
                suffixes += longer if count == len(longer) else longer[:count]
                payloads += children
                flags += [flag] * count
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
        old_traces = batch.column("trace").to_pylist()
        suffix_bytes: dict[int, bytes] = {}  # by id: suffixes are shared tuples (_extended)
        out = self.exits.builder()
        for dest in [d for d in leaving if d in self.precombine]:
            leaving[dest] = self._combined(batch, leaving[dest], self.precombine[dest])
        for dest, items in leaving.items():
            for row, suffix in zip(items.rows, items.suffixes, strict=True):
                encoded = suffix_bytes.get(id(suffix))
                if encoded is None:
                    encoded = suffix_bytes[id(suffix)] = encode_trace(suffix)
                traces.append(old_traces[row] + encoded)
            rows += items.rows
            flags += items.flags
            out.extend(dest, items.payloads, items.flags, partial(_nth_determinant, batch, items))
        taken = pa.array(rows, pa.int64())
        return out.batch(
            pc.take(batch.column("ts"), taken),
            pc.take(batch.column("front"), taken),
            pa.array(traces, pa.binary()),
            pa.array(flags, pa.int8()),
            pc.take(batch.column("source"), taken),
            pc.take(batch.column("position"), taken),
        )

    @staticmethod
    def _combined(
        batch: pa.RecordBatch, items: _Items, reducer: Callable[[Any, Any], Any]
    ) -> _Items:
        """Mapped items of one key folded into one, with the meta of the latest of them.

        Only with ``release="latest"`` and a reducer declared commutative: the key's value at
        the end of the tick is the same, whichever items were combined where.
        """
        order = list(  # per input row: how its meta orders (the suffix comes after)
            zip(
                batch.column("ts").to_pylist(),
                batch.column("front").to_pylist(),
                batch.column("trace").to_pylist(),
                strict=True,
            )
        )
        if _in_meta_order(order, items):  # then a key's latest item is its last one
            return _combined_in_order(items, reducer)
        return _combined_any_order(order, items, reducer)


def _combined_any_order(
    order: list[tuple[Any, ...]], items: _Items, reducer: Callable[[Any, Any], Any]
) -> _Items:
    """:meth:`StageRunner._combined` for items in any order: metas compared per key."""
    # key -> index of its latest item, and that item's (row order, suffix) once compared
    best: dict[Any, tuple[int, Any]] = {}
    values: dict[Any, Any] = {}
    out = _Items()
    for k, (row, suffix, payload, flag) in enumerate(
        zip(items.rows, items.suffixes, items.payloads, items.flags, strict=True)
    ):
        if flag or not isinstance(payload, Mapped):  # tombstones, replays: as they are
            out.add(row, suffix, payload, flag)
            continue
        key = payload.key
        held = best.get(key)
        if held is None:
            values[key], best[key] = payload.value, (k, None)
            continue
        values[key] = reducer(values[key], payload.value)
        j, there = held
        if there is None:
            there = (order[items.rows[j]], items.suffixes[j])
        here = (order[row], suffix)
        best[key] = (k, here) if here > there else (j, there)
    for key, (k, _) in best.items():
        out.add_nth(items, k, Mapped(key, values[key]), 0)
    return out


def _nth_determinant(batch: pa.RecordBatch, items: _Items, nth: int) -> tuple[GlobalTime, Any]:
    """The global time and determinant of the ``nth`` of ``items`` (for error messages)."""
    return _determinant(batch, items.rows[nth])


def _determinant(batch: pa.RecordBatch, row: int) -> tuple[GlobalTime, Any]:
    """The global time and determinant of input row ``row`` (for error messages)."""
    time = GlobalTime(batch.column("ts")[row].as_py(), batch.column("front")[row].as_py())
    return time, (batch.column("source")[row].as_py(), batch.column("position")[row].as_py())


class Exits:
    """How items leave a stage: to a sink (rendered), into a keyed stage (keyed), or on."""

    def __init__(
        self,
        graph: LogicalGraph,
        keys: Mapping[str, Callable[[Any], Any]],
        render: Callable[[Any], str],
    ) -> None:
        self.sinks = {sid for sid, step in graph.steps.items() if isinstance(step, Sink)}
        self.keys = dict(keys)
        self.render = render
        #: per keyed entry, the grouping whose key function it applies (for errors)
        self.groupings = {dest: _grouping_of(graph, dest, fn) for dest, fn in self.keys.items()}

    def key_of(
        self, dest: str, key_fn: Callable[[Any], Any], payload: Any, where: Callable[[], Any]
    ) -> bytes:
        """The encoded grouping key of an item entering a keyed stage at ``dest``.

        Errors name the grouping (not the merge the item may enter by), the key function, the
        item's global time and determinant; an unhashable key gets its own hint (a tuple).
        """
        key: Any = _NO_KEY
        try:
            key = key_fn(payload)
            return encode_key(key)
        except Exception as exc:  # the key function raised, or its key cannot be a dict key
            time, determinant = where()
            step_id = self.groupings.get(dest, dest)
            if key is not _NO_KEY and isinstance(exc, TypeError) and not is_hashable(key):
                raise UnhashableKeyError(step_id, key_fn, time, determinant, key, exc) from exc
            raise StepError(step_id, key_fn, time, determinant, exc) from exc

    def builder(self) -> ExitRows:
        """A new batch of leaving rows."""
        return ExitRows(self)


class ExitRows:
    """The ``to``, ``key``, ``payload`` and ``value`` columns of leaving rows, row by row."""

    def __init__(self, exits: Exits) -> None:
        self.exits = exits
        self.targets: list[str] = []
        self.keys: list[bytes | None] = []
        self.payloads: list[bytes | None] = []
        self.values: list[str | None] = []

    def add(
        self, dest: str, payload: Any, flag: int, where: Callable[[], tuple[GlobalTime, Any]]
    ) -> None:
        """One leaving item; ``where()`` gives its time and determinant for errors."""
        self.targets.append(dest)
        key_fn = self.exits.keys.get(dest)
        if flag & TOMBSTONE:  # no payload, no key: one entering a keyed stage goes everywhere
            self.keys.append(None)
            self.payloads.append(None)
            self.values.append(None)
            return
        if key_fn is not None:
            self.keys.append(self.exits.key_of(dest, key_fn, payload, where))
        else:
            self.keys.append(None)
        if dest in self.exits.sinks:
            self.payloads.append(None)
            self.values.append(self.exits.render(payload))
        else:
            self.payloads.append(encode_payload(payload))
            self.values.append(None)

    def extend(
        self,
        dest: str,
        payloads: Sequence[Any],
        flags: Sequence[int],
        where: Callable[[int], tuple[GlobalTime, Any]],
    ) -> None:
        """Leaving items all bound for ``dest``: what ``add`` does for each, in bulk.

        ``where(i)`` gives the ``i``-th item's time and determinant for errors. Should a user
        function (key, render) raise, the items are added one by one again, so the error is
        the one ``add`` raises for the first failing item.
        """
        count = len(payloads)
        if any(flag & TOMBSTONE for flag in flags):
            for nth, (payload, flag) in enumerate(zip(payloads, flags, strict=True)):
                self.add(dest, payload, flag, partial(where, nth))
            return
        key_fn = self.exits.keys.get(dest)
        try:
            if key_fn is None:
                keys: list[bytes | None] = [None] * count
            else:
                keys = [encode_key(key_fn(payload)) for payload in payloads]
            if dest in self.exits.sinks:
                render = self.exits.render
                values: list[str | None] = [render(payload) for payload in payloads]
                encoded: list[bytes | None] = [None] * count
            else:
                encoded = [encode_payload(payload) for payload in payloads]
                values = [None] * count
        except Exception:  # a user function failed: find and name the item, as add does
            for nth, payload in enumerate(payloads):
                self.add(dest, payload, 0, partial(where, nth))
            return
        self.targets += [dest] * count
        self.keys += keys
        self.payloads += encoded
        self.values += values

    def batch(self, *meta: pa.Array) -> pa.RecordBatch:
        """The rows, given their ts, front, trace, flags, source and position columns."""
        columns = [
            *meta,
            pa.array(self.targets, pa.string()),
            pa.array(self.keys, pa.binary()),
            pa.array(self.payloads, pa.binary()),
            pa.array(self.values, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ITEM_SCHEMA)


def _grouping_of(graph: LogicalGraph, dest: str, key_fn: Callable[[Any], Any]) -> str:
    """The grouping whose key function ``key_fn`` is, for items entering it at ``dest``.

    ``dest`` itself when it is the grouping, or when several groupings share the function.
    """
    if isinstance(graph.step(dest), Grouping):
        return dest
    owners = [
        sid
        for sid, step in graph.steps.items()
        if isinstance(step, Grouping) and step.key is key_fn
    ]
    return owners[0] if len(owners) == 1 else dest


def _extended(
    suffixes: list[tuple[LocalTime, ...]], local: LocalTime
) -> list[tuple[LocalTime, ...]]:
    """Each suffix with ``local`` appended; equal inputs share one output tuple.

    Items of a batch carry only a handful of distinct suffixes, so extending each distinct
    one once (keyed by identity: the lists hold shared tuples) saves a tuple per item.
    """
    cache: dict[int, tuple[LocalTime, ...]] = {}
    out: list[tuple[LocalTime, ...]] = []
    append = out.append
    for suffix in suffixes:
        longer = cache.get(id(suffix))
        if longer is None:
            longer = cache[id(suffix)] = (*suffix, local)
        append(longer)
    return out


_CHILD_LOCALS = tuple(LocalTime(0, child) for child in range(64))


def _child_local(child: int) -> LocalTime:
    """``LocalTime(0, child)``, shared for the common small indexes."""
    return _CHILD_LOCALS[child] if child < len(_CHILD_LOCALS) else LocalTime(0, child)


def _tombstone_result(step: Step) -> Any:
    """What a tombstone counts as at ``step``: kept by filters, one child of a flat_map."""
    if isinstance(step, Filter):
        return True
    if isinstance(step, FlatMap):
        return [None]
    return None


def _in_meta_order(order: list[tuple[Any, ...]], items: _Items) -> bool:
    """Whether ``items`` come in meta order (as a front's rows through a chain of steps do).

    ``order`` holds each input row's meta; an item's meta is its row's, then its suffix.
    """
    rows, suffixes = items.rows, items.suffixes
    for k in range(1, len(rows)):
        a, b = rows[k - 1], rows[k]
        if a == b:
            if not suffixes[k - 1] < suffixes[k]:
                return False
        elif not order[a] < order[b]:
            return False
    return True


def _combined_in_order(items: _Items, reducer: Callable[[Any, Any], Any]) -> _Items:
    """:meth:`StageRunner._combined` for items in meta order: a key's latest is its last."""
    out = _Items()
    last: dict[Any, int] = {}  # key -> index of its last (latest) mapped item
    values: dict[Any, Any] = {}
    for k, (payload, flag) in enumerate(zip(items.payloads, items.flags, strict=True)):
        if flag or not isinstance(payload, Mapped):  # tombstones, replays: as they are
            out.add_nth(items, k, payload, flag)
            continue
        key = payload.key
        if key in values:
            values[key] = reducer(values[key], payload.value)
        else:
            values[key] = payload.value
        last[key] = k
    for key, k in last.items():
        out.add_nth(items, k, Mapped(key, values[key]), 0)
    return out
