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
from itertools import compress
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import GraphError, OversizedBatchError, StepError, UnhashableKeyError
from flamestream.graph.logical import LogicalGraph
from flamestream.graph.mapreduce import MapStep, mapped_key
from flamestream.graph.steps import (
    Broadcast,
    Filter,
    FlatMap,
    Grouping,
    Map,
    MapBatches,
    Merge,
    Sink,
    Step,
)
from flamestream.model import GlobalTime, LocalTime
from flamestream.runtime.grouping import is_hashable
from flamestream.runtime.swaps import Versions
from flamestream.spark.durable.checkpoint import batch_id_of_task
from flamestream.spark.exec.declared.columnar import CountedText
from flamestream.spark.exec.declared.rendered import ReducedColumns, RenderedTail
from flamestream.spark.exec.general.batch_steps import batch_mapped
from flamestream.spark.exec.general.combine import Items, combined, rows_in_meta_order
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_payload,
    encode_key,
    encode_pairs,
    encode_payload,
    encode_trace,
    extended_traces,
    values_of,
)
from flamestream.spark.exec.shuffle.packed import pack
from flamestream.spark.exec.worker.gc_pause import gc_paused
from flamestream.spark.exec.worker.worker_setup import setup_worker
from flamestream.spark.plan.paths import DECLARED_COUNT, RENDERED, StagePath, stage_path
from flamestream.spark.plan.stages import Stage

if TYPE_CHECKING:
    from flamestream.spark.control.swaps import SwapReader

#: Payloads a keyed stage hands its tails: objects by row, or a sum's as columns.
Handed = list[Any] | ReducedColumns

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


class PlannedRunner:
    """What a stage's runner, stateless (:class:`StageRunner`) or keyed (``KeyedRunner``), holds.

    The stage's exits (encoding what leaves it, rendering for sinks), the path the plan
    decided for it and where the batch's function swaps come from (a swappable query's,
    else None). ``path`` None: the one :func:`~flamestream.spark.plan.paths.stage_path`
    decides for the stage alone (a runner made outside a plan, as unit tests make them).
    """

    def __init__(
        self,
        graph: LogicalGraph,
        stage: Stage,
        keys: Mapping[str, Callable[[Any], Any]],
        render: Callable[[Any], str],
        swaps: SwapReader | None,
        path: StagePath | None,
        precombine: Mapping[str, Callable[[Any, Any], Any]] | None = None,
    ) -> None:
        self.swaps = swaps
        self._versions: dict[str, Versions] = {}  # the current batch's swapped steps
        self.precombine = dict(precombine or {})
        self.exits = Exits(graph, keys, render)
        #: the path the plan decided (``plan.paths``); alone, as it would decide for the stage
        self.path = (
            path
            if path is not None
            else stage_path(
                graph,
                stage,
                keys=keys,
                precombine=self.precombine,
                default_render=render is render_default,
                swappable=swaps is not None,
            )
        )


class StageRunner(PlannedRunner):
    """Applies one stage to Arrow batches of item rows (runs in executors' Python workers)."""

    def __init__(
        self,
        graph: LogicalGraph,
        stage: Stage,
        keys: Mapping[str, Callable[[Any], Any]],
        render: Callable[[Any], str] = render_default,
        precombine: Mapping[str, Callable[[Any, Any], Any]] | None = None,
        swaps: SwapReader | None = None,
        path: StagePath | None = None,
    ) -> None:
        super().__init__(graph, stage, keys, render, swaps, path, precombine)
        self.stage = stage
        self.steps: list[Step] = [graph.step(sid) for sid in stage.steps]
        self.consumers = {
            step.step_id: [graph.consumer(step.step_id, p) for p in range(step.outputs)]
            for step in self.steps
        }
        #: the stage as Arrow kernels, when it is a declared count of text (see .columnar)
        self.counted = CountedText(self.path.count) if self.path.count else None
        #: the stage as Arrow kernels, when it renders a sum's items with a Template
        self.rendered = RenderedTail(self.path.render) if self.path.render else None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow``'s function."""
        setup_worker()
        for batch in batches:
            if batch.num_rows:
                yield self.run(batch)

    def run(self, batch: pa.RecordBatch, payloads: Handed | None = None) -> pa.RecordBatch:
        """The stage's output rows for one batch of input rows.

        ``payloads``: the rows' payloads as objects already, or a sum's as columns (a keyed
        stage hands its tails what it made, see :class:`~.tails.WithTails`); otherwise
        decoded from ``payload``.
        """
        self._versions = self.swapped()
        if isinstance(payloads, ReducedColumns):
            fast = self.rendered if self.path.in_batch(self._versions) == RENDERED else None
            rendered = fast.run(batch, payloads) if fast else None
            if rendered is not None:
                return rendered
            payloads = payloads.objects()
        with gc_paused():  # see gc_pause: the batch's items made the collector re-scan
            return self._run(batch, payloads)

    def packed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """:meth:`run`'s rows packed (:mod:`.packed`); a counted stage makes them packed."""
        counted = self.counted if self.path.in_batch(self.swapped()) == DECLARED_COUNT else None
        made = counted.packed(batch) if counted is not None else None
        return pack(self.run(batch)) if made is None else made

    def swapped(self) -> dict[str, Versions]:
        """The stage's steps swapped in the running task's batch (their versions).

        A batch with any makes the stage run the general way: the declared count and the
        render in Arrow compiled the steps as the graph declared them.
        """
        if self.swaps is None:
            return {}
        return self.swaps.versions(batch_id_of_task(), self.steps)

    def _run(self, batch: pa.RecordBatch, payloads: list[Any] | None) -> pa.RecordBatch:
        declared = self.path.in_batch(self._versions) == DECLARED_COUNT
        if self.counted is not None and payloads is None and declared:
            counted = self.counted.run(batch)
            if counted is not None:
                return counted
        queues = {sid: Items() for sid in self.stage.steps}
        leaving: dict[str, Items] = {}
        for to, items in self._entering(batch, payloads).items():
            # rows for a step outside the stage pass through (a stage may only add keys)
            (queues.get(to) or leaving.setdefault(to, Items())).take(items)
        for step in self.steps:
            versions = self._versions.get(step.step_id)
            items = queues[step.step_id]
            if versions is None:
                outputs = self._apply(step, items, batch)
            else:
                outputs = self._apply_versions(versions, items, batch)
            for port, items in enumerate(outputs):
                dest = self.consumers[step.step_id][port]
                (queues.get(dest) or leaving.setdefault(dest, Items())).take(items)
        metas = partial(_row_metas, batch)
        for dest in [d for d in leaving if d in self.precombine]:
            leaving[dest] = combined(metas, leaving[dest], self.precombine[dest])
        return self._rows(batch, leaving)

    def _entering(self, batch: pa.RecordBatch, payloads: list[Any] | None) -> dict[str, Items]:
        """The batch's rows as items, per step they go to, with their payloads decoded.

        Whether they are in meta order matters only to a map-side combine: asked only then.
        """
        ordered = bool(self.precombine) and rows_in_meta_order(_row_metas(batch))
        if payloads is None:
            payloads = list(map(decode_payload, values_of(batch.column("payload"))))
        flags = batch.column("flags").to_pylist()
        targets = batch.column("to").unique()
        if len(targets) == 1:  # the common case: every row for one step, in bulk
            every = Items(ordered=ordered)
            every.rows, every.sids = list(range(batch.num_rows)), [0] * batch.num_rows
            every.payloads, every.flags = payloads, flags
            return {targets[0].as_py(): every}
        entering: dict[str, Items] = {}
        for row, (to, payload, flag) in enumerate(
            zip(batch.column("to").to_pylist(), payloads, flags, strict=True)
        ):
            items = entering.get(to)
            if items is None:
                items = entering[to] = Items(ordered=ordered)
            items.rows.append(row)
            items.sids.append(0)  # the empty suffix: the rows are the stage's inputs
            items.payloads.append(payload)
            items.flags.append(flag)
        return entering

    def _apply_versions(
        self, versions: Versions, items: Items, batch: pa.RecordBatch
    ) -> list[Items]:
        """Outputs per port of a swapped step: each item through the version its time picks.

        Items of one version (the usual case) go through it at once; a batch mixing versions
        (items below the swap time and above it, e.g. loop items) runs each version's items
        apart, in order, and joins their outputs (then known to be in no particular order).
        """
        items.materialize()
        ts, fronts = batch.column("ts").to_pylist(), batch.column("front").to_pylist()
        picked = [versions.index_at(GlobalTime(ts[r], fronts[r])) for r in items.rows]
        steps = versions.all()
        if len(set(picked)) <= 1:
            return self._apply(steps[picked[0] if picked else 0], items, batch)
        joined: list[Items] = []
        for version in sorted(set(picked)):
            part = Items.derived(items)
            for k in (k for k, v in enumerate(picked) if v == version):
                part.add_nth(items, k, items.payloads[k], items.flags[k])
            outputs = self._apply(steps[version], part, batch)
            if not joined:
                joined = outputs
                continue
            for into, more in zip(joined, outputs, strict=True):
                into.take(more)
        return joined

    def _apply(self, step: Step, items: Items, batch: pa.RecordBatch) -> list[Items]:
        """Outputs per port of ``step`` for ``items``; each keeps the items' order."""
        items.materialize()
        if isinstance(step, Broadcast):
            copies = []
            for port in range(step.n):
                out = Items(ordered=items.ordered, table=items.extended(LocalTime(0, port)))
                out.rows, out.sids = items.rows, items.sids  # shared: never changed in place
                out.payloads, out.flags = items.payloads, items.flags
                copies.append(out)
            return copies
        if isinstance(step, FlatMap):  # appends a child index per output: its own table
            return [self._flat_mapped(step, items, batch)]
        # map, merge and filter append (0, 0) to every item's suffix: to the table's
        out = Items(ordered=items.ordered, table=items.extended(_STATELESS_LOCAL))
        if isinstance(step, Merge):
            out.rows, out.sids = items.rows, items.sids
            out.payloads, out.flags = items.payloads, items.flags
            return [out]
        if isinstance(step, Map):
            out.rows, out.sids, out.flags = items.rows, items.sids, items.flags
            out.payloads, out.pairs = self._mapped(step, items, batch)
            return [out]
        if isinstance(step, MapBatches):  # a map whose function takes the batch: batch_steps
            out.rows, out.sids, out.flags = items.rows, items.sids, items.flags
            out.payloads = batch_mapped(step, items, batch)
            return [out]
        if isinstance(step, Filter):
            predicate = step.predicate
            keep = self._call(step, items, batch, lambda p: bool(predicate(p)))
            if not any(items.flags):  # no replays nor tombstones: the kept items, in C
                out.rows, out.sids = (
                    list(compress(items.rows, keep)),
                    list(compress(items.sids, keep)),
                )
                out.payloads = list(compress(items.payloads, keep))
                out.flags = [0] * len(out.rows)
                return [out]
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
                out.sids.append(items.sids[k])
                out.flags.append(flag)
            return [out]
        msg = f"step {step.step_id!r}: {step.kind} cannot run in a stateless stage"
        raise GraphError(step.step_id, "a stateless step", step.kind, msg)

    def _flat_mapped(self, step: FlatMap, items: Items, batch: pa.RecordBatch) -> Items:
        """A flat_map's output: child ``i`` of an item appends ``(0, i)`` to its suffix."""
        expanded = self._call(step, items, batch, step.fn)
        if set(map(type, expanded)) != {list}:  # str.split's lists are taken as they are
            expanded = self._listed(step, items, batch, expanded)
        table, parents = list(items.table), items.table
        out = Items(ordered=items.ordered, table=table)  # new suffixes are added as met
        # per parent suffix id: the ids of its children's suffixes so far
        extend: dict[int, list[int]] = {}
        rows, sids, payloads, flags = out.rows, out.sids, out.payloads, out.flags
        for k, children in enumerate(expanded):
            flag = items.flags[k]
            if not children:
                if not flag & MAY_INVALIDATE:
                    continue
                children, flag = [None], flag | TOMBSTONE
            sid, count = items.sids[k], len(children)
            longer = extend.get(sid)
            if longer is None:
                longer = extend[sid] = []
            while len(longer) < count:
                longer.append(len(table))
                table.append((*parents[sid], _child_local(len(longer) - 1)))
            rows += [items.rows[k]] * count
            sids += longer if count == len(longer) else longer[:count]
            payloads += children
            flags += [flag] * count
        return out

    def _call(
        self, step: Step, items: Items, batch: pa.RecordBatch, fn: Callable[[Any], Any]
    ) -> list[Any]:
        """``fn`` over the items' payloads; tombstones pass untouched (as if kept).

        A raising user function fails the task with :class:`StepError` naming the step, the
        item's global time and its determinant (the front record it descends from).
        """
        results: list[Any] = []
        try:
            if not any(items.flags):  # no tombstones: one C-level map over the payloads
                # (extend keeps what came before a raising call: its count names the item)
                results.extend(map(fn, items.payloads))
            else:
                append = results.append
                for payload, flag in zip(items.payloads, items.flags, strict=True):
                    append(fn(payload) if not flag & TOMBSTONE else _tombstone_result(step))
        except Exception as exc:  # a user function failed: name the step and the record
            raise _step_error(step, batch, items.rows[len(results)], exc) from exc
        return results

    def _listed(
        self, step: Step, items: Items, batch: pa.RecordBatch, results: list[Any]
    ) -> list[list[Any]]:
        """A flat_map's results as lists: an iterator is run here (its errors name the item)."""
        listed: list[list[Any]] = []
        try:
            listed.extend(r if type(r) is list else list(r) for r in results)
        except Exception as exc:  # a user generator failed: name the step and the record
            raise _step_error(step, batch, items.rows[len(listed)], exc) from exc
        return listed

    def _rows(self, batch: pa.RecordBatch, leaving: dict[str, Items]) -> pa.RecordBatch:
        """The item rows leaving the stage, for the steps after it (sinks get ``value``).

        Items for a keyed entry that pre-combines are combined already.
        """
        rows: list[int] = []
        tables: list[tuple[Items, int]] = []  # per destination: its items and first row
        flags: list[int] = []
        out = self.exits.builder()
        for dest, items in leaving.items():
            where = partial(_nth_determinant, batch, items)
            # a combined entry's pairs are one per key: no repeated pair to encode once
            repeated = dest not in self.precombine
            pairs = items.pairs and out.extend_pairs(dest, items, where, repeated=repeated)
            if not pairs:
                items.materialize()
                out.extend(dest, items.payloads, items.flags, where)
            tables.append((items, len(rows)))
            rows += items.rows
            flags += items.flags
        taken = pa.array(rows, pa.int64())
        whole = _every_row_once(taken, batch.num_rows)  # a map's output: nothing to take
        columns = {
            name: batch.column(name) if whole else pc.take(batch.column(name), taken)
            for name in ("ts", "front", "trace", "source", "position")
        }
        return out.batch(
            columns["ts"],
            columns["front"],
            _traced(columns["trace"], tables),
            pa.array(flags, pa.int8()),
            columns["source"],
            columns["position"],
        )

    def _mapped(self, step: Map, items: Items, batch: pa.RecordBatch) -> tuple[list[Any], bool]:
        """A map's results, and whether they are map_reduce's pairs (see :mod:`.combine`).

        map_reduce's map sends ``(key, value)`` pairs instead of ``Mapped`` items when they
        leave the stage for its grouping next (to be encoded, maybe combined first), and the
        mapper returned 2-tuples throughout (anything else goes the general way, which raises
        what ``Mapped`` construction would).
        """
        # a pre-combined entry is one too: map_reduce's groupings are keyed by mapped_key
        to_grouping = self.exits.keys.get(self.consumers[step.step_id][0]) is mapped_key
        fn = step.fn
        if isinstance(fn, MapStep) and to_grouping:
            pairs = self._call(step, items, batch, fn.mapper)
            if _all_pairs(pairs):
                return pairs, True
        return self._call(step, items, batch, fn), False


def _every_row_once(taken: pa.Array, rows: int) -> bool:
    """Whether ``taken`` is ``0 .. rows - 1`` in order (then taking copies the columns)."""
    if len(taken) != rows:
        return False
    index = taken.to_numpy()
    return bool(rows == 0 or (index[0] == 0 and (np.diff(index) == 1).all()))


def _traced(before: pa.Array, tables: list[tuple[Items, int]]) -> pa.Array:
    """Each leaving trace with its item's suffix appended.

    ``tables``: per destination, its items and their first row. One suffix for all rows (a
    map's output) is appended as a matrix.
    """
    if len(tables) == 1 and len(tables[0][0].table) == 1:
        (suffix,) = tables[0][0].table
        if not suffix:
            return before
        return extended_traces(before, np.frombuffer(encode_trace(suffix), np.uint8)[None, :])
    after = [_suffixes(items) for items, _ in tables]
    joined = pa.concat_arrays(after) if after else pa.array([], pa.binary())
    return pc.binary_join_element_wise(before, joined, pa.scalar(b"", pa.binary()))


def _suffixes(items: Items) -> pa.Array:
    """The items' trace suffixes, encoded: each distinct one once, then taken per item."""
    encoded = pa.array([encode_trace(suffix) for suffix in items.table], pa.binary())
    return pc.take(encoded, pa.array(items.sids, pa.int32()))


def _step_error(step: Step, batch: pa.RecordBatch, row: int, exc: Exception) -> StepError:
    """What a user function raising on input row ``row`` fails the task with."""
    return StepError(
        step.step_id,
        getattr(step, "fn", None) or getattr(step, "predicate", None),
        GlobalTime(batch.column("ts")[row].as_py(), batch.column("front")[row].as_py()),
        (batch.column("source")[row].as_py(), batch.column("position")[row].as_py()),
        exc,
    )


def _all_pairs(results: list[Any]) -> bool:
    """Whether every result is a 2-tuple (or None, a tombstone's)."""
    if set(map(type, results)) == {tuple}:  # the common case, checked at C speed
        return set(map(len, results)) <= {2}
    return all(type(r) is tuple and len(r) == 2 for r in results if r is not None)


def _row_metas(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """Per input row, how its meta orders: ``(ts, front, trace)`` (item suffixes come after)."""
    columns = (batch.column(name).to_pylist() for name in ("ts", "front", "trace"))
    return list(zip(*columns, strict=True))


def _nth_determinant(batch: pa.RecordBatch, items: Items, nth: int) -> tuple[GlobalTime, Any]:
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
        #: destinations whose payloads are handed on as objects, not encoded: the entries of
        #: tails that run in the same task, on what the stage yields (see ``WithTails``)
        self.handed: frozenset[str] = frozenset()
        #: per handed destination, the trace suffix its tail appends in Arrow (a rendering
        #: map's ``(0, 0)``): a bulk path handing columns may append it to the traces it
        #: makes, one copy of every trace instead of two (``ReducedColumns.traced`` says so)
        self.suffixes: Mapping[str, bytes] = {}
        #: whether the rows a keyed stage yields for those rendering tails must carry their
        #: determinant (source, position); False when their one reader writes none (a sink
        #: with ``columns=value``: ``KeyedRunner.keep_only``) and no user function can
        #: name it in an error: the bulk path then leaves the two columns null
        self.determinants = True
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
        #: per row, the payload object of a row for a handed destination (else None); None
        #: when the exits hand nothing on
        self.objects: list[Any] | None = [] if exits.handed else None

    def add(
        self, dest: str, payload: Any, flag: int, where: Callable[[], tuple[GlobalTime, Any]]
    ) -> None:
        """One leaving item; ``where()`` gives its time and determinant for errors."""
        self.targets.append(dest)
        key_fn = self.exits.keys.get(dest)
        handed = dest in self.exits.handed
        if self.objects is not None:
            self.objects.append(payload if handed and not flag & TOMBSTONE else None)
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
        elif handed:
            self.payloads.append(None)
            self.values.append(None)
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
            elif dest in self.exits.handed:
                encoded, values = [None] * count, [None] * count
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
        if self.objects is not None:
            self.objects += payloads if dest in self.exits.handed else [None] * count

    def extend_pairs(
        self,
        dest: str,
        items: Items,
        where: Callable[[int], tuple[GlobalTime, Any]],
        *,
        repeated: bool = True,
    ) -> bool:
        """What ``extend`` does for the ``Mapped`` items ``items``' pairs stand for, unmade.

        Only for items entering map_reduce's grouping (keyed by ``mapped_key``), none
        flagged; False (nothing added) otherwise, or when a key fails to encode: ``extend``
        on the items then raises what it raises. ``repeated``: the pairs may repeat (not a
        map-side combine's), see ``encode_pairs``.
        """
        pairs = items.payloads
        if self.exits.keys.get(dest) is not mapped_key or any(items.flags):
            return False
        try:
            keys, payloads = encode_pairs(pairs, repeated=repeated)
        except Exception:  # the caller's extend names the item and the key
            return False
        count = len(pairs)
        self.targets += [dest] * count
        self.keys += keys
        self.payloads += payloads
        self.values += [None] * count
        if self.objects is not None:
            self.objects += [None] * count
        return True

    def batch(self, *meta: pa.Array) -> pa.RecordBatch:
        """The rows, given their ts, front, trace, flags, source and position columns."""
        columns = [
            *meta,
            _texts(self.targets),
            pa.array(self.keys, pa.binary()),
            pa.array(self.payloads, pa.binary()),
            pa.array(self.values, pa.string()),
        ]
        for name, column in zip(ITEM_SCHEMA.names, columns, strict=True):
            # pa.array splits a binary or string column past 2 GiB into chunks
            if isinstance(column, pa.ChunkedArray):
                raise OversizedBatchError(name, len(self.targets), sorted(set(self.targets)))
        return pa.RecordBatch.from_arrays(columns, schema=ITEM_SCHEMA)


def _texts(texts: list[str]) -> pa.Array:
    """``texts`` as a string array; one text repeated (the usual ``to``) 20x faster."""
    if texts and texts.count(texts[0]) == len(texts):
        return pa.repeat(pa.scalar(texts[0], pa.string()), len(texts))
    return pa.array(texts, pa.string())


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
