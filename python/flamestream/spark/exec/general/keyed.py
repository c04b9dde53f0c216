"""Keyed stages: a grouping (and the cycle through it) on Spark, with durable state.

Items entering a keyed stage are shuffled by the grouping's key (``repartition(n, "key")``),
so every key lives in one partition. A task of micro-batch ``b``:

1. restores its partition's :class:`~flamestream.runtime.grouping.GroupingState` from the
   newest snapshot written before ``b`` (``<state>/<grouping>/part-<p>/<batch>.state``);
2. sorts the batch's items by meta and delivers them one at a time, each run to quiescence
   through the stage's steps (so map_reduce's key-local cycle closes inside the task), with
   the same rules as the reference runtime (the grouping's state machine and
   :func:`~flamestream.runtime.reference.stateless_handler`);
3. collects garbage below the batch's min-time (from the offset log, as the barrier sink
   does), writes snapshot ``b`` and removes all but the two newest.

Releasing every update, a big batch is delivered in runs of rows (:data:`RUN_ROWS`), each
run's leaving rows handed on as made: see :meth:`KeyedRunner._runs`.

A replayed batch restores the same snapshot and so emits the same items and writes the same
snapshot; a retried task overwrites its own. On a bounded input (``spark.read``) there is no
batch id and the state lives for the task only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.approx.schedule import SketchSchedule
from flamestream.errors import InvariantError, StepError
from flamestream.graph.approximate import lowered_step
from flamestream.graph.logical import LogicalGraph
from flamestream.graph.steps import Grouping, Step
from flamestream.model import DataItem, GlobalTime, Meta
from flamestream.runtime.grouping import GroupingState
from flamestream.runtime.reference import (
    Handler,
    scheduled_handler,
    stateless_handler,
    versioned_handler,
)
from flamestream.spark.connector.barrier import read_min_time
from flamestream.spark.connector.faults import crash_point
from flamestream.spark.control.approx import read_schedule
from flamestream.spark.control.key_layout import Layout
from flamestream.spark.durable import (
    batch_id_of_task,
)
from flamestream.spark.durable.loop import LoopStore
from flamestream.spark.exec.declared.fastpath import MapReduceCycle
from flamestream.spark.exec.declared.summed import SummedCycle
from flamestream.spark.exec.general.in_order import InOrderGrouping
from flamestream.spark.exec.general.items import (
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_payload,
    decode_trace,
    sorted_by_meta,
    time_starts,
    values_of,
)
from flamestream.spark.exec.general.keyed_state import TaskLocal, state_io
from flamestream.spark.exec.general.leaving import Leaving
from flamestream.spark.exec.general.partitioning import KEY_PARTITION
from flamestream.spark.exec.general.routing import LoopRouter, LoopSpec
from flamestream.spark.exec.general.stateless import (
    Handed,
    PlannedRunner,
    render_default,
)
from flamestream.spark.exec.shuffle.blocks import is_blocked, opened
from flamestream.spark.exec.shuffle.packed import is_packed, unpack
from flamestream.spark.exec.worker.gc_pause import gc_paused
from flamestream.spark.exec.worker.worker_setup import setup_worker
from flamestream.spark.plan.paths import CYCLE, GENERAL, LANE, SUMMED, StagePath
from flamestream.spark.plan.stages import Stage

if TYPE_CHECKING:
    from flamestream.spark.control.swaps import SwapReader

#: The item row columns a keyed stage reads (``key`` only routed the shuffle, ``value`` is
#: for sinks).
_INPUT_COLUMNS = ("ts", "front", "trace", "flags", "source", "position", "to", "payload")


#: Rows a keyed task delivers at once when it releases every update (``_runs``).
RUN_ROWS = 1 << 18


def key_partition(batches: list[pa.RecordBatch], grouping: str) -> int:
    """The key partition a keyed task's rows were shuffled to, read from the rows themselves.

    ``apply`` puts it in the ``part`` column with the very expression Spark's shuffle uses
    (``pmod(hash(<shuffle column>), n)``). The task's ``partitionId()`` is not it: under a
    union (a second sink, a merge fed by another branch, the loop or control channels) Spark
    numbers the task after the other branches' partitions, and those vary from batch to batch.
    Rows without the column (a runner driven outside ``apply``, as unit tests do) are
    partition 0.
    """
    if KEY_PARTITION not in batches[0].schema.names:
        return 0
    bounds = [pc.min_max(batch.column(KEY_PARTITION)) for batch in batches]
    lowest = min(b["min"].as_py() for b in bounds)
    highest = max(b["max"].as_py() for b in bounds)
    if lowest != highest or lowest is None:
        msg = (
            f"grouping {grouping!r}: one keyed task got rows of key partitions "
            f"{lowest}..{highest}; the shuffle must send each key partition to one task"
        )
        raise InvariantError(msg)
    return int(lowest)


def _items_of(
    tables: list[pa.RecordBatch], columns: Sequence[str] | None = None
) -> list[pa.RecordBatch]:
    """The shuffled rows as item rows: blocks opened (:mod:`.blocks`), packed rows unpacked.

    ``columns``: the columns the caller reads; packed rows unpack only those (the others,
    a stage's ``value`` and ``key``, would be repeated per occurrence for nothing).
    """
    if is_blocked(tables[0].schema):
        tables = opened(tables)
    if tables and is_packed(tables[0].schema):  # batch by batch, each freed once unpacked
        packed, tables = tables, []
        while packed:
            rows = packed.pop()
            tables.append(unpack(rows if columns is None else rows.select(list(columns))))
    return tables


class KeyedRunner(PlannedRunner):
    """Applies a keyed stage to one partition of a micro-batch (``mapInArrow``'s function)."""

    def __init__(
        self,
        graph: LogicalGraph,
        stage: Stage,
        keys: Mapping[str, Callable[[Any], Any]],
        render: Callable[[Any], str] = render_default,
        *,
        state_url: str | None = None,
        checkpoint: str | None = None,
        latest: bool = False,
        loop: LoopSpec | None = None,
        elastic_partitions: int | None = None,
        swaps: SwapReader | None = None,
        path: StagePath | None = None,
    ) -> None:
        assert stage.grouping is not None  # noqa: S101
        grouping = graph.step(stage.grouping)
        assert isinstance(grouping, Grouping)  # noqa: S101
        super().__init__(graph, stage, keys, render, swaps, path)
        self.grouping = grouping
        self.steps: dict[str, Step] = {sid: graph.step(sid) for sid in stage.steps}
        self.targets = {
            sid: [graph.consumer(sid, port) for port in range(step.outputs)]
            for sid, step in self.steps.items()
        }
        #: where the state comes from and goes to, chosen once (elastic: per slot)
        self.state_io = state_io(grouping, state_url, checkpoint, elastic_partitions)
        self.checkpoint = checkpoint
        self.latest = latest  #: release="latest": one item per key and destination per batch
        #: map_reduce's cycle, whose in-order items skip the per-step deliveries (fastpath)
        self.cycle = MapReduceCycle(self.path.cycle) if self.path.cycle else None
        #: the cycle's in-order batches in Arrow, when its reduce adds up (count)
        summed = self.cycle is not None and self.path.kind == SUMMED
        self.summed = SummedCycle(self.cycle) if summed and self.cycle is not None else None
        #: a grouping alone: its in-order items skip the deliveries (in_order)
        self.lane = InOrderGrouping(grouping, self.path.lane.exit_to) if self.path.lane else None
        self.fast = True  #: False: every item the general way (tests compare the two)
        #: set when items coming round the cycle may change key (not map_reduce's cycle)
        self.loop = loop
        self._router: LoopRouter | None = None  # the current task's, when it has a loop
        self._task = (0, -1)  # the current task's (partition, batch id)
        self._layout: Layout | None = None  # the current batch's, when elastic
        #: the payload objects of the last batch's rows for ``exits.handed`` destinations
        self.handed_payloads: Handed | None = None
        #: the stage's exact_or_approximate reduce steps, each folding lowered (issue 41)
        self.sketchable = {
            sid: low for sid, step in self.steps.items() if (low := lowered_step(step)) is not None
        }
        self._schedule: SketchSchedule | None = None  # the current batch's, when it sketched

    def keep_only(self, columns: Collection[str]) -> None:
        """The stage's rows are read for ``columns`` of the released rows only (its sink's).

        A sink that writes no determinant (``columns=value``) does not need one made per
        row: see ``Exits.determinants``.
        """
        self.exits.determinants = bool({"source", "position"} & set(columns))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """All of the partition's rows, in meta order, then the rows leaving the stage.

        The cyclic garbage collector is paused meanwhile (see :mod:`.gc_pause`): the state
        holds every item of the batch, and the collector kept re-scanning them.
        """
        setup_worker()
        with gc_paused():
            yield from self._partition(batches)

    def _partition(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One keyed task, step by step.

        A crash anywhere leaves nothing that a rerun of the batch (a retry, or a replay after
        a restart) would not write again the same: every step reads only what batches before
        it saved, and writes files named by the batch.

        1. Find the task's key partition in its rows (a task without rows does nothing: its
           partition's newest snapshot stays the state after the batch before).
        2. Restore the partition's state as the batches before left it (``state_io``).
        3. Read the min-time garbage collection will keep above (before this batch's own
           loop sends, which cannot lower it).
        4. Deliver the batch's rows in meta order, each to quiescence, and hand the leaving
           rows to Spark as they are made (a task's output counts only once it has ended,
           after step 6).
        5. Send what leaves for the loop, with its ack contributions.
        6. Collect garbage below the min-time and save the state.
        """
        tables = [b for b in batches if b.num_rows]
        if not tables:
            return
        # 1. the task
        partition = key_partition(tables, self.grouping.step_id)
        batch_id = batch_id_of_task()
        io = self.state_io if batch_id >= 0 else TaskLocal(self.grouping)
        tables = _items_of(tables, [*_INPUT_COLUMNS, *(["key"] if io.counts_keys else [])])
        self._router, self._task = None, (partition, batch_id)
        self._layout = io.layout(batch_id) if io.durable else None
        self._versions = self.swaps.versions(batch_id, self.steps.values()) if self.swaps else {}
        self._use_schedule(batch_id if io.durable else -1)
        # 2. restore
        state = io.restore(partition, batch_id)
        # 3. the min-time
        min_time = None
        if io.durable and self.checkpoint is not None:
            min_time = read_min_time(self.checkpoint, batch_id, in_task=True)
        # 4. deliver (the rows as shuffled are dropped once sorted: a batch may be big; a
        # column of theirs would keep their whole Arrow message, so keys are copied)
        keys = [pa.concat_arrays([t.column("key") for t in tables])] if io.counts_keys else []
        table = sorted_by_meta(
            pa.Table.from_batches(tables).select(_INPUT_COLUMNS), coded_traces=True
        )
        del tables
        for output in self._runs(table, state, min_time):
            if output.num_rows:
                yield output
        del table
        if io.durable:
            # 5. loop sends
            if self._router is not None and self._router.sent and self.loop is not None:
                task = f"{self.loop.stage}-{partition:05d}"
                LoopStore(self.loop.state_url).send(batch_id, task, self._router.table())
                crash_point("graph.loop.sent", batch_id)
            # 6. collect and save
            if min_time is not None:
                state.collect_garbage(min_time)
            io.save(partition, batch_id, state, keys)
            crash_point("graph.keyed.saved", batch_id)

    def _use_schedule(self, batch_id: int) -> None:
        """The batch's sketch decisions (``exact_or_approximate``), for both paths."""
        schedule = None
        if self.sketchable and self.checkpoint is not None and batch_id >= 0:
            schedule = read_schedule(self.checkpoint, batch_id) or None
        self._schedule = schedule
        if self.cycle is not None:
            lowered = [
                low.fn
                for sid, low in self.sketchable.items()
                if getattr(self.steps[sid], "fn", None) == self.cycle.reduce
            ]
            self.cycle.schedule(schedule if lowered else None, lowered[0] if lowered else None)

    def _runs(
        self,
        table: pa.Table,
        state: GroupingState,
        min_time: GlobalTime | None,
        rows: int = RUN_ROWS,
    ) -> Iterator[pa.RecordBatch]:
        """The rows leaving the stage for ``table`` (in meta order), run by run.

        Releasing every update without a loop, a batch of more than ``rows`` rows is
        delivered in runs of about that many, cut between global times. The rows are
        delivered one by one in meta order either way, and a run leaves the state as the rows
        before it left it, so the runs leave the rows and the state the whole batch leaves:
        a replayed tuple ends at an item after the one arriving, hence of an earlier batch
        (its determinant the state's) or of the same global time (the same run). What
        changes is the working set: the every-update keyed task of word count (3 M rows)
        made a dozen temporaries of 24-216 MB; per run they are small enough for the
        allocator to reuse, and the rows leave for the sink as they are made. With
        ``release="latest"`` a key's last row is known only at the batch's end; a loop's
        sends are counted per batch: those batches run whole.
        """
        if self.latest or self.loop is not None or table.num_rows <= rows:
            yield self._run(table, state, min_time)
            return
        for start, end in _run_bounds(table, rows):
            yield self._run(table.slice(start, end - start), state, min_time)

    def _run(
        self, table: pa.Table, state: GroupingState, min_time: GlobalTime | None = None
    ) -> pa.RecordBatch:
        """The rows leaving the stage for ``table``'s rows (in meta order), applied to ``state``.

        ``min_time``, if given, is where the caller collects garbage right after: a batch of
        map_reduce items wholly below it and in order then runs at once (fastpath).
        """
        determinants: dict[GlobalTime, tuple[Any, Any]] = {}
        handlers = self._handlers(state, determinants)
        router = self._router = self._new_router(determinants.get)
        # a swapped step runs the general way: the fast paths compiled the declared steps
        known = min_time is not None
        taken = self.path.in_batch(self._versions, min_time=known) if self.fast else GENERAL
        if self.summed is not None and taken == SUMMED and router is None and min_time is not None:
            ran = self.summed.run(table, state, min_time, self.exits, self.latest)
            if ran is not None:  # the batch ran in Arrow (else it goes the ways below)
                out, self.handed_payloads = ran
                return out
        leaving = Leaving()
        columns = {name: values_of(table.column(name)) for name in _INPUT_COLUMNS}
        ts, fronts, traces, flags = (columns[c] for c in ("ts", "front", "trace", "flags"))
        targets, payloads = columns["to"], columns["payload"]

        def deliver(row: int) -> None:
            """Row ``row`` to quiescence: a key-local cycle comes back to this partition."""
            flag = flags[row]
            item = DataItem(
                decode_payload(payloads[row]),
                Meta(GlobalTime(ts[row], fronts[row]), decode_trace(traces[row])),
                may_invalidate=bool(flag & MAY_INVALIDATE),
                tombstone=bool(flag & TOMBSTONE),
            )
            queue: deque[tuple[str, DataItem]] = deque([(targets[row], item)])
            while queue:
                dest, current = queue.popleft()
                handler = handlers.get(dest)
                if handler is None:
                    leaving.add_item(dest, current)
                else:
                    outputs = handler(current)
                    queue.extend(outputs if router is None else router.route(outputs))

        cycle = self.cycle if taken in (CYCLE, SUMMED) and router is None else None
        lane = self.lane if taken == LANE and router is None else None
        latest_rows: list[int] | None = None  # each key's last row, if the batch ran whole
        if cycle is not None:
            if min_time is not None:
                latest_rows = cycle.run_in_order(state, columns, determinants, leaving, min_time)
            if latest_rows is None:
                cycle.run(state, columns, determinants, deliver, leaving)
        elif lane is not None:
            whole = min_time is not None and lane.run_in_order(
                state, columns, determinants, leaving, min_time
            )
            if not whole:
                lane.run(state, columns, determinants, deliver, leaving)
        else:
            sources, positions = columns["source"], columns["position"]
            for row in range(table.num_rows):
                time = GlobalTime(ts[row], fronts[row])
                determinants.setdefault(time, (sources[row], positions[row]))
                deliver(row)
        if self.latest and latest_rows is not None:
            leaving = leaving.take(latest_rows)
        elif self.latest:
            leaving = leaving.latest(self.grouping.key)
        # a replayed tuple ends at an item of an earlier batch: its determinant is the state's
        out, self.handed_payloads = leaving.batch(self.exits, _Known(determinants, state))
        state.note_where(determinants.items())
        return out

    def _handlers(
        self, state: GroupingState, determinants: dict[GlobalTime, tuple[Any, Any]]
    ) -> dict[str, Handler]:
        """Per step of the stage, what it does with one item (swapped steps: by its time)."""

        def call(
            step: Step, fn: Callable[[Any], Any], item: DataItem, *, as_list: bool = False
        ) -> Any:
            try:
                return list(fn(item.payload)) if as_list else fn(item.payload)
            except Exception as exc:  # a user function failed: name the step and the record
                where = determinants.get(item.global_time)
                raise StepError(step.step_id, fn, item.global_time, where, exc) from exc

        handlers: dict[str, Handler] = {}
        for sid, step in self.steps.items():
            if sid == self.grouping.step_id:
                dest = self.targets[sid][0]
                handlers[sid] = _grouping_handler(state, dest, determinants.get)
            elif sid in self._versions:
                handlers[sid] = versioned_handler(self._versions[sid], self.targets[sid], call)
            elif sid in self.sketchable and self._schedule is not None:
                low, targets = self.sketchable[sid], self.targets[sid]
                handlers[sid] = scheduled_handler(step, low, self._schedule, targets, call)
            else:
                handlers[sid] = stateless_handler(step, self.targets[sid], call)
        return handlers

    def _new_router(self, where: Callable[[GlobalTime], Any]) -> LoopRouter | None:
        """The task's loop router, for a stage whose cycle may change keys (streaming only)."""
        partition, batch_id = self._task
        if self.loop is None or not self.state_io.durable or batch_id < 0:
            return None
        g, spec = self.grouping, self.loop
        return LoopRouter(
            g.step_id, g.key, spec.reentry, spec.partitions, partition, where, self._layout
        )


class _Known(Mapping[GlobalTime, tuple[Any, Any]]):
    """Determinants of the batch's rows, then those the grouping state noted earlier.

    Only looked up (``get``): a replayed tuple ends at an item of an earlier batch.
    """

    def __init__(self, batch: Mapping[GlobalTime, tuple[Any, Any]], state: GroupingState):
        self.batch = batch
        self.state = state

    def __getitem__(self, time: GlobalTime) -> tuple[Any, Any]:
        found = self.batch.get(time) or self.state.where(time)
        if found is None:
            raise KeyError(time)
        return found

    def __iter__(self) -> Iterator[GlobalTime]:
        return iter(self.batch)

    def __len__(self) -> int:
        return len(self.batch)


def _run_bounds(table: pa.Table, rows: int) -> list[tuple[int, int]]:
    """``table`` (in meta order) cut into runs, each ending where a global time does.

    A run has at least ``rows`` rows, but the last may have fewer.
    """
    ts = table.column("ts").combine_chunks().to_numpy()
    fronts = table.column("front").combine_chunks().to_numpy()
    firsts = np.flatnonzero(time_starts(ts, fronts))  # where a run may start
    bounds, size = [0], len(ts)
    while bounds[-1] < size:
        at = int(np.searchsorted(firsts, bounds[-1] + rows))
        bounds.append(int(firsts[at]) if at < len(firsts) else size)
    return list(pairwise(bounds))


def _grouping_handler(
    state: GroupingState, dest: str, where: Callable[[GlobalTime], Any]
) -> Handler:
    def grouping(item: DataItem) -> list[tuple[str, DataItem]]:
        try:
            return [(dest, out) for out in state.receive(item)]
        except StepError as error:  # the key function failed: name the record too
            raise error.with_determinant(where(item.global_time)) from error.cause

    return grouping
