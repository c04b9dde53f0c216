"""The generic front: offsets, front ids, read limits, AvailableNow and global-time stamping.

A connector (files, Kafka, generator) supplies three things through :class:`FrontSource`:
which sources exist and how far they reach (``discover``), where a range of ``k`` records
ends (``advance``), and the records of a range (``read_range``). Everything that makes
replay exact lives here, in the end offset Spark writes to ``checkpoint/offsets/N``:

* ``fronts``: per source ``[key, front id, position, next ts]``. Ids are given once, in
  sorted order of the sources first seen, and never change. ``next ts`` is the front's
  report: every record it stamps later (in this run or after a restart) gets a ts at or
  above it.
* ``base``: the planning clock in µs with ``clock=wall`` (0 otherwise). A front's records in
  the batch are stamped from ``b = max(base, the front's next ts in the start offset)``:
  ``ts = b + (position - start position)`` (``wall``, ``logical``) or, with ``clock=record``,
  ``ts = max(record time, previous ts + 1)`` starting from ``b``. Replays therefore stamp
  exactly the same global times from the (start, end) offsets alone.
* ``horizon``: the largest next ts of the source's fronts so far; a front first seen later
  starts there, and an idle or finished front is raised to it.
* ``firstSeen``: the start position of every front first seen in this batch.

The sink's min-time is the least ``(next ts, front id)`` over every front of every source
(plus ``(horizon, next unused id)`` for fronts not seen yet), so with ``clock=logical`` or
``record`` a front's global times depend on its own records alone, never on batch boundaries.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from flamestream.errors import ConfigError
from flamestream.jvm import Shim, ShimError
from flamestream.model import MAX_FRONT
from flamestream.spark.connector.faults import crash_point
from flamestream.spark.connector.offsets import (
    OFFSET_VERSION,
    FrontOffset,
    FrontRange,
    FrontState,
    OffsetError,
    ReadTask,
    packed_ranges,
)
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.stamping import CLOCKS, clamp_times
from flamestream.spark.control.admission import HISTORY, AdmissionController, Budget
from flamestream.spark.control.budgeted import INITIAL_LIMIT, LIMIT_FROM, LimitBoard, front_record
from flamestream.spark.control.budgeted import RECORD as BUDGET_RECORD
from flamestream.spark.durable import QueryCheckpoint, batch_id_of_task
from flamestream.spark.durable.loop import LOOP_GATE, loop_busy
from flamestream.spark.exec.general.front_stage import ShippedFrontStage
from flamestream.spark.exec.general.shipping import OPTION as STAGE_OPTION
from flamestream.spark.exec.worker.worker_setup import setup_worker

#: Columns every front emits first, before its own payload columns.
META_FIELDS = [
    pa.field("ts", pa.int64(), nullable=False),
    pa.field("front", pa.int32(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),
]


META_DDL = "ts long, front int, source string, position long"


class FrontSource:
    """What a connector implements; the reader does the rest.

    Instances get pickled to executors, so they must not hold clients or open files (create
    those lazily).
    """

    #: Name used in errors and in the offset (``files``, ``kafka``, ``generator``).
    kind: ClassVar[str]

    #: Another name for ``maxRecordsPerTrigger``, as Spark's own connector of the kind calls it.
    limit_alias: ClassVar[str | None] = None

    #: Where ``clock=record`` takes a record's time from (None: the front has no record time).
    record_time_from: str | None = None

    def payload_fields(self) -> list[pa.Field]:
        """The payload columns that follow the meta columns."""
        raise NotImplementedError

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """Every source now available, with the position its data reaches (driver side).

        ``known`` has the positions of the sources in the current offset.
        """
        raise NotImplementedError

    def advance(self, key: str, start: int, end: int, records: int) -> tuple[int, int]:
        """Where a range from ``start`` ends after at most ``records`` records, and how many.

        The range never passes ``end``. Positions that count records (Kafka offsets, generator
        indexes) keep this default; byte positions (files) count lines.
        """
        new = min(end, start + records)
        return new, new - start

    def start_position(self, key: str, available: int, *, at_query_start: bool) -> int:
        """Where a newly discovered source starts (earliest by default).

        ``available``: its end when discovered. ``at_query_start``: the query's first batch
        finds it. A start at the end (Kafka's ``startingOffsets=latest``) is for those only:
        a source added while the query runs starts at its earliest, or the records written
        to it before a planning saw it would be skipped.
        """
        return 0

    #: Every position holds a record (Kafka offsets, generator indexes); False for byte
    #: offsets (files) and other sparse positions: then a missing position is no lost record.
    positions_count_records: ClassVar[bool] = True

    def position_after(self, key: str, position: int) -> int:
        """The position right after the record at ``position`` (a history's boundary).

        Positions that count records keep this default; byte positions find the next line.
        """
        return position + 1

    def position_at_time(self, key: str, time: int) -> int | None:
        """The first position whose record time may be at or after ``time`` (driver side).

        None: the source cannot seek by time (the reader then filters by record time alone).
        """
        return None

    def records_between(self, key: str, start: int, end: int) -> int:
        """How many records [start, end) holds, or its measure in the source's units.

        Progress shares are computed with it. Positions that count records keep this default
        (exact up to gaps); files measure bytes.
        """
        return end - start

    def split_positions(self, key: str, start: int, end: int, records: int) -> list[int]:
        """Positions cutting [start, end) into pieces of about ``records`` records (driver).

        Ascending, strictly inside the range; each piece becomes a read task of its own, so
        one big source is read on several cores. Positions that count records cut by
        arithmetic; other sources cut nowhere unless they know their records' positions.
        """
        if not self.positions_count_records:
            return []
        return list(range(start + records, end, records))

    def finished(self, key: str, position: int) -> bool:
        """Whether ``key`` can have no record at or after ``position``, ever (bounded input)."""
        return False

    def source_name(self, key: str) -> str:
        """The ``source`` column's value for ``key``: with the position, the determinant."""
        return key

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The records of ``part``: batches with an int64 ``position`` and the payload columns.

        Runs on executors (and on the driver with ``clock=record``, to record the clamp
        state). Must be deterministic: the same range gives the same records.
        """
        raise NotImplementedError

    def read_times(self, part: FrontRange) -> Iterator[pa.Array]:
        """The record times of ``part``'s records, in order (driver side, ``clock=record``).

        Planning stamps a batch from them. By default the records are read and their times
        taken; a source that can read the time alone (a column) reads only that.
        """
        for batch in self.read_range(part):
            if batch.num_rows:
                yield self.record_times(part.key, batch)

    def record_times(self, key: str, batch: pa.RecordBatch) -> pa.Array:
        """The int64 record time of each row of ``batch`` (a batch ``read_range`` gave)."""
        msg = f"front {self.kind}: records have no time of their own"
        raise NotImplementedError(msg)

    def close(self) -> None:
        """Release driver-side clients."""


@dataclass(frozen=True)
class ReaderConfig:
    """The options every front has, parsed once when the query is defined."""

    id_base: int = 0
    max_records: int | None = None
    clock: str = "wall"
    #: the controller's budget when ``controller=on`` (then ``max_records`` is its upper bound)
    controller: Budget | None = None
    #: a front with no new record for this long reports past its last item (None: never)
    idle_timeout_ms: int | None = None
    #: a graph's first stage, run in the read tasks (set by ``apply``, not by users)
    stage: ShippedFrontStage | None = None
    #: the most read tasks a batch's sources are packed into (None: one task per source)
    read_tasks: int | None = None
    #: a graph's checkpoint whose budget policy publishes the read limit (set by ``apply``
    #: with ``budgets=``), and the limit before the first decision
    budget_from: str | None = None
    budget_initial: int = 100
    #: a graph's checkpoint whose loop channel the front waits for (set by ``apply`` for a
    #: graph whose cycle crosses key partitions): no new record while the loop is busy
    loop_gate: str | None = None
    #: a source's range of more records than this is read in pieces, a task each
    split_records: int = 500_000

    @classmethod
    def parse(cls, options: OptionReader, limit_alias: str | None = None) -> ReaderConfig:
        """Read ``frontIdBase``, ``maxRecordsPerTrigger`` (or ``limit_alias``), ``clock``, ...

        ``limit_alias`` is the name Spark's own connector gives the read limit (Kafka's
        ``maxOffsetsPerTrigger``); either name may be used, not both.
        """
        id_base = options.integer("frontIdBase", 0, minimum=0)
        if id_base > MAX_FRONT:
            raise ConfigError(options.step, "frontIdBase", id_base, f"<= {MAX_FRONT}")
        max_records = options.optional_integer("maxRecordsPerTrigger", minimum=1)
        if limit_alias is not None:
            alias = options.optional_integer(limit_alias, minimum=1)
            if alias is not None and max_records is not None:
                raise ConfigError(
                    options.step,
                    limit_alias,
                    alias,
                    f"either {limit_alias} or maxRecordsPerTrigger, not both (they are one limit)",
                )
            max_records = alias if alias is not None else max_records
        clock = options.choice("clock", list(CLOCKS), "wall")
        on = options.choice("controller", ["off", "on"], "off") == "on"
        budget = Budget.parse(options, max_records if on else None)  # validated either way
        idle = options.optional_integer("idleTimeoutMs", minimum=1)
        read_tasks = options.optional_integer("readTasks", minimum=1)
        split = options.integer("splitRecords", cls.split_records, minimum=1)
        stage = options.raw(STAGE_OPTION)
        budget_from = options.raw(LIMIT_FROM) or None
        if on and budget_from is not None:
            # one owner of the read limit: the graph's policy, whose latency rule this is
            raise ConfigError(
                options.step,
                options.label("controller"),
                "on",
                "off on a front of a SparkGraph with budgets=: the graph's budget policy "
                "decides every front's read limit. Hint: drop the option and declare "
                "BudgetPolicy(target_latency_ms=...) (and min_rows/max_rows) instead",
            )
        initial = options.raw(INITIAL_LIMIT)
        return cls(
            id_base=id_base,
            max_records=max_records,
            clock=clock,
            controller=budget if on else None,
            idle_timeout_ms=idle,
            stage=ShippedFrontStage(stage) if stage else None,
            read_tasks=read_tasks,
            budget_from=budget_from,
            budget_initial=int(initial) if initial else 100,
            loop_gate=options.raw(LOOP_GATE) or None,
            split_records=split,
        )


class FrontReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of every flamestream front."""

    def __init__(self, source: FrontSource, config: ReaderConfig) -> None:
        self.source = source
        self.id_base = config.id_base
        self.max_records = config.max_records
        self.clock = config.clock
        self.budget = config.controller
        self.idle_timeout_ms = config.idle_timeout_ms
        self.stage = config.stage
        self.read_tasks = config.read_tasks
        self.budget_from = config.budget_from
        self.budget_initial = config.budget_initial
        self.loop_gate = config.loop_gate
        self.split_records = config.split_records
        if self.stage is not None:
            self.stage.check(source.payload_fields(), f"front {source.kind}")
        if self.clock == "record" and source.record_time_from is None:
            step = f"front {source.kind}"
            raise ConfigError(
                step,
                "clock",
                "record",
                f"wall or logical: records of front {source.kind} have no time of their own",
            )
        self._target: dict[str, int] | None = None  # AvailableNow's end, driver side only
        self._target_pending = False  # driver side: AvailableNow's end not fixed yet
        self._controller: AdmissionController | None = None  # driver side only
        self._planned_at = 0.0  # driver side: when the last batch was planned (monotonic)
        self._shim: Shim | bool | None = False  # driver side: False = not looked for yet
        #: driver side: per source, what discover last said and when (monotonic) it moved
        self._activity: dict[str, tuple[int, float]] = {}
        #: driver side, clock=wall: fronts already raised in their current idle period
        self._idle_raised: set[str] = set()

    # --- planning (driver-side Python process) -----------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """No source read yet; every clock starts at 0."""
        return FrontOffset(self.source.kind, self.id_base, 0, 0, (), clock=self.clock).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` if set, else everything available."""
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: what is available at its first planning.

        Taken by the run's first ``latestOffset`` (right after this call), which knows the
        start offset: a connector whose source keys come from the offsets (the delta front's
        key names its starting version) then names the checkpoint's sources, not new ones.
        """
        self._target = None
        self._target_pending = True

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """What is available now, per source (for backlog in the query progress)."""
        available = self.source.discover({})
        return {"flamestream": OFFSET_VERSION, "available": dict(sorted(available.items()))}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next batch: per-source positions within ``limit``, plus stamping.

        With the controller on, its limit for the tick replaces ``limit``. A batch is planned
        when a front has records, a front is new, or a front's report is raised (finished or
        idle); otherwise ``start`` comes back and Spark plans no batch.
        """
        begin = self._begin(start)
        positions = begin.positions()
        discovered = self.source.discover(positions)
        if self._target_pending:  # an AvailableNow run's first planning: its end is fixed
            self._target, self._target_pending = dict(discovered), False
        self._check_known(begin, discovered)
        self._watch(discovered)
        available = self._within_target(discovered, positions)
        fronts = self._assign_ids(begin, available)
        at_query_start = not begin.fronts  # no source found before: the query's first batch
        starts = {
            f.key: positions[f.key]
            if f.key in positions
            else self.source.start_position(f.key, available[f.key], at_query_start=at_query_start)
            for f in fronts
        }
        ends = {f.key: max(starts[f.key], available.get(f.key, 0)) for f in fronts}
        budget, controller, published = self._tick_limit(limit, begin)
        taken = None
        if budget is not None:
            ends, taken = self._within_budget(fronts, starts, ends, budget)
        if len(fronts) == len(begin.fronts) and self._waits(published, taken):
            return start  # the CPU budget's larger batches: let more records arrive first
        self._push_metrics(fronts, available, ends, taken)
        # wall: fronts stamp from the planning clock in µs; logical and record: from their
        # own previous next ts only, so global times depend on the input alone
        now = time.time_ns() // 1000
        base = max(now, begin.horizon) if self.clock == "wall" else 0
        nexts = {f.key: self._stamp(f, starts[f.key], ends[f.key], base) for f in fronts}
        top = max([begin.horizon, *nexts.values()])
        if self.clock == "wall":
            # every front reports the batch's horizon (it stamps from at least the clock
            # later); an idle front raises it to the clock once per idle period
            idle = [
                f.key
                for f in fronts
                if f.key not in self._idle_raised and self._idle(f.key, ends, available)
            ]
            if idle:
                top = max(top, now)
                self._idle_raised.update(idle)
            nexts = dict.fromkeys(nexts, top)
        else:
            # a finished or idle front reports the source's horizon: it holds nothing of
            # the other fronts back, and the raise is a function of the input and the batch
            # boundaries (not of the clock), so two queries reading the same input in the
            # same batches stamp alike even after a raise
            for f in fronts:
                if self._finished(f.key, ends[f.key]) or self._idle(f.key, ends, available):
                    nexts[f.key] = max(nexts[f.key], top)
        moved = any(ends[f.key] != starts[f.key] or nexts[f.key] != f.next for f in fronts)
        if not moved and len(fronts) == len(begin.fronts):
            return start  # nothing new and no report raised: no batch
        self._planned_at = time.monotonic()
        extra = self._extra(begin, controller, budget, taken, published)
        end = FrontOffset(
            self.source.kind,
            self.id_base,
            base,
            top,
            tuple(replace(f, position=ends[f.key], next=nexts[f.key]) for f in fronts),
            extra,
            begin.seq + 1,
            tuple((f.key, starts[f.key]) for f in fronts if f.key not in positions),
            self.clock,
        )
        crash_point("front.plan", end.seq)
        return end.to_json()

    def _begin(self, start: dict[str, Any]) -> FrontOffset:
        """The start offset, or an error saying why it cannot be this source's."""
        step = f"front {self.source.kind}"
        try:
            begin = FrontOffset.from_json(start)
        except (ValueError, KeyError, TypeError) as exc:
            msg = (
                f"{step}: the checkpoint holds an offset for this source that no flamestream "
                f"front of this version wrote ({exc}); is checkpointLocation the checkpoint "
                "of another query? Give this query its own checkpointLocation"
            )
            raise OffsetError(msg) from None
        if begin.kind != self.source.kind or begin.id_base != self.id_base:
            msg = (
                f"{step} (frontIdBase {self.id_base}): the checkpoint's offset for this source "
                f"was written by front {begin.kind} with frontIdBase {begin.id_base}; is "
                "checkpointLocation another query's, or were the query's sources reordered? "
                "Restore the query as it was, or give it a new checkpointLocation"
            )
            raise OffsetError(msg)
        return begin

    def _check_known(self, begin: FrontOffset, discovered: Mapping[str, int]) -> None:
        """Every source the offsets know must still exist: its position is the determinant."""
        for f in begin.fronts:
            if f.key not in discovered:
                msg = (
                    f"front {self.source.kind}: source {f.key!r} (front {f.front}, read up to "
                    f"position {f.position}) is in the checkpoint but no longer available: "
                    "deleted, renamed, or no longer matched by the options (path, pattern, "
                    "subscribe)? Put it back to resume, or start over with a new "
                    "checkpointLocation (everything is then read again)"
                )
                raise OffsetError(msg)

    def _within_target(
        self, discovered: Mapping[str, int], positions: Mapping[str, int]
    ) -> dict[str, int]:
        """What this batch may read: under AvailableNow, nothing past the run's target."""
        target = self._target
        if target is None:
            return dict(discovered)
        return {
            k: min(v, target[k]) if k in target else positions[k]
            for k, v in discovered.items()
            if k in target or k in positions
        }

    def _stamp(self, front: FrontState, start: int, end: int, base: int) -> int:
        """The front's next ts after stamping [start, end) from ``max(base, its next)``."""
        if end <= start:
            return front.next
        first = max(base, front.next)
        if self.clock != "record":
            return first + (end - start)
        floor = first  # record time: read the range here to record the clamp state it ends in
        part = FrontRange(front.key, front.front, start, end, first, record_time=True)
        for times in self.source.read_times(part):
            _, floor = clamp_times(times, floor)
        return floor

    def _watch(self, discovered: Mapping[str, int]) -> None:
        """Remember when each source last grew (for ``idleTimeoutMs``)."""
        now = time.monotonic()
        for key, reach in discovered.items():
            seen = self._activity.get(key)
            if seen is None or seen[0] != reach:
                self._activity[key] = (reach, now)
                self._idle_raised.discard(key)

    def _idle(self, key: str, ends: Mapping[str, int], available: Mapping[str, int]) -> bool:
        """All read, and nothing new for ``idleTimeoutMs``."""
        if self.idle_timeout_ms is None or ends[key] < available.get(key, 0):
            return False
        seen = self._activity.get(key)
        return seen is not None and (time.monotonic() - seen[1]) * 1000 >= self.idle_timeout_ms

    def _finished(self, key: str, end: int) -> bool:
        """Nothing left: the AvailableNow target reached, or the end of a bounded source."""
        if self._target is not None and end >= self._target.get(key, end):
            return True
        return self.source.finished(key, end)

    def _tick_limit(
        self, limit: ReadLimit, begin: FrontOffset
    ) -> tuple[int | None, AdmissionController | None, dict[str, Any] | None]:
        """The tick's read limit: Spark's, the front's controller's, or the graph's policy's.

        Also the controller (if on) and the published decision read (with ``budgets=``).
        Behind a loop gate, 0 while the graph's loop is busy: a record admitted now would
        start its wave across the partitions while older ones are still in flight, and a
        wave that reaches a key after a newer one replays that key's bucket from there on
        (a stateful chain: every later item), each replayed version going round the loop
        again: the work grew without bound. So a front's records wait for the loop to drain.
        """
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        controller = self._control(begin)
        if controller is not None:
            budget = controller.next_limit()
        published = self._published() if self.budget_from is not None else None
        if self.budget_from is not None:  # the graph's budget policy decides the limit
            budget = int(published["limit"]) if published else self.budget_initial
        if self.loop_gate is not None and loop_busy(self.loop_gate):
            budget = 0
        return budget, controller, published

    def _extra(
        self,
        begin: FrontOffset,
        controller: AdmissionController | None,
        budget: int | None,
        taken: int | None,
        published: dict[str, Any] | None,
    ) -> tuple[tuple[str, Any], ...]:
        """The end offset's extra records: the controller's, or the budget limit used."""
        extra = begin.extra
        if self.budget_from is not None and budget is not None:
            record = (BUDGET_RECORD, front_record(budget, taken or 0, published))
            extra = (*(e for e in extra if e[0] != BUDGET_RECORD), record)
        if controller is not None:
            controller.planned(begin.seq + 1, taken or 0)
            record = ("controller", controller.record())
            extra = (*(e for e in extra if e[0] != "controller"), record)
        return extra

    def _waits(self, published: Mapping[str, Any] | None, taken: int | None) -> bool:
        """Whether to hold the batch for more rows (the CPU budget's larger batches).

        Held while it has fewer rows than the policy's ``waitRows`` (see
        :mod:`flamestream.spark.control.cpu`), for at most its ``maxWaitMs`` since the last
        batch was planned. Never in an AvailableNow run (it reads what there is, then ends).
        """
        wait = int(published.get("waitRows", 0)) if published else 0
        if not wait or taken is None or taken >= wait or self._target is not None:
            return False
        assert published is not None  # noqa: S101
        waited_ms = (time.monotonic() - self._planned_at) * 1000
        return waited_ms < float(published.get("maxWaitMs", 0.0))

    def _published(self) -> dict[str, Any] | None:
        """The newest read limit the graph's budget policy published (None: none yet)."""
        assert self.budget_from is not None  # noqa: S101
        return LimitBoard(QueryCheckpoint(self.budget_from).graph_url).latest()

    def _control(self, begin: FrontOffset) -> AdmissionController | None:
        """The controller, told that the previous tick ended and what progress says."""
        if self.budget is None:
            return None
        if self._controller is None:
            self._controller = AdmissionController(self.budget)
            self._controller.resume(dict(begin.extra).get("controller"))
        controller = self._controller
        controller.observe_planning(begin.seq)
        shim = self._find_shim()
        if shim is not None:
            try:
                found = shim.progress(match=controller.id, last=HISTORY)
                events = [e for q in found.values() for e in q]
                controller.observe_gauges(shim.request("gauges")["gauges"])
            except ShimError:
                events = []
            controller.observe_progress(events)
        return controller

    def _find_shim(self) -> Shim | None:
        if self._shim is False:
            self._shim = Shim.find()
        return self._shim if isinstance(self._shim, Shim) else None

    def _push_metrics(
        self,
        fronts: Sequence[FrontState],
        available: Mapping[str, int],
        ends: Mapping[str, int],
        taken: int | None,
    ) -> None:
        """Backlog (and the controller's limit and decisions) as gauges, through the shim."""
        shim = self._find_shim()
        if shim is None:
            return
        backlog = sum(max(0, available.get(f.key, 0) - ends[f.key]) for f in fronts)
        values: dict[str, float] = {"backlog": backlog, "fronts": len(fronts)}
        if taken is not None:
            values["plannedRows"] = taken
        scope = f"front.{self.source.kind}"
        if self._controller is not None:
            scope += f".{self._controller.id}"
            values["readLimit"] = self._controller.limit
            values["decisions"] = self._controller.decisions
        shim.push_metrics(scope, values)

    def _assign_ids(self, begin: FrontOffset, available: Mapping[str, int]) -> list[FrontState]:
        """The offset's fronts, then new ones: next ids, clocks starting at the horizon."""
        fronts = list(begin.fronts)
        next_id = max((f.front + 1 for f in fronts), default=self.id_base)
        known = {f.key for f in fronts}
        for key in sorted(k for k in available if k not in known):
            if next_id > MAX_FRONT:
                msg = f"front {self.source.kind}: more than {MAX_FRONT} fronts"
                raise ConfigError(self.source.kind, "frontIdBase", self.id_base, msg)
            fronts.append(FrontState(key, next_id, 0, begin.horizon))
            next_id += 1
        return fronts

    def _within_budget(
        self,
        fronts: Sequence[FrontState],
        starts: Mapping[str, int],
        ends: Mapping[str, int],
        budget: int,
    ) -> tuple[dict[str, int], int]:
        """Share ``budget`` records fairly among the fronts, lowest front id first.

        Returns the per-front ends and how many records they take in all.
        """
        limited = dict(starts)
        total = budget
        waiting = [
            f.key for f in sorted(fronts, key=lambda f: f.front) if ends[f.key] > starts[f.key]
        ]
        while budget > 0 and waiting:
            share = max(1, budget // len(waiting))
            still: list[str] = []
            for key in waiting:
                if budget <= 0:
                    break
                new, taken = self.source.advance(key, limited[key], ends[key], min(share, budget))
                budget -= taken
                limited[key] = new
                if taken and new < ends[key]:
                    still.append(key)
            waiting = still
        return limited, total - budget

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The ranges of the sources that moved, packed into at most ``readTasks`` tasks.

        Each range carries everything needed to stamp it, and everything comes from the two
        offsets: a replayed batch stamps exactly as planned.
        """
        ranges = [piece for part in self._ranges(start, end) for piece in self._pieces(part)]
        return [InputPartition(task) for task in packed_ranges(ranges, self.read_tasks)]

    def _pieces(self, part: FrontRange) -> list[FrontRange]:
        """``part`` cut where its source says (``splitRecords``), each piece stamped alike.

        A piece's base is where the whole range's stamping stands at its start: ``base +
        (cut - start)`` for positional clocks; with record times, the clamp's floor after the
        pieces before it (their times read here, as planning read them). So the pieces' rows
        get exactly the global times the whole range would give them.
        """
        cuts = self.source.split_positions(part.key, part.start, part.end, self.split_records)
        if not cuts:
            return [part]
        bounds = [part.start, *cuts, part.end]
        pieces, floor = [], part.base
        for first, stop in pairwise(bounds):
            base = floor if part.record_time else part.base + (first - part.start)
            piece = replace(part, start=first, end=stop, base=base)
            pieces.append(piece)
            if part.record_time and stop < part.end:
                for times in self.source.read_times(piece):
                    _, floor = clamp_times(times, floor)
        return pieces

    def _ranges(self, start: dict[str, Any], end: dict[str, Any]) -> list[FrontRange]:
        """One range per source that moved between the two offsets."""
        begin, finish = FrontOffset.from_json(start), FrontOffset.from_json(end)
        if finish.clock == "record" and self.source.record_time_from is None:
            msg = (
                f"front {self.source.kind}: batch {finish.seq} of this source was planned with "
                "clock=record and must be replayed so; restart the query with the options it "
                "ran with (clock=record and the record-time option, e.g. timestampField)"
            )
            raise OffsetError(msg)
        before = {f.key: f for f in begin.fronts}
        first_seen = dict(finish.first_seen)
        parts: list[FrontRange] = []
        for f in finish.fronts:
            known = before.get(f.key)
            if known is not None:
                first = known.position
            elif f.key in first_seen:
                first = first_seen[f.key]
            else:  # a version 1 offset did not record where new fronts started; its
                # planning started every new source as a query's start does (replays agree)
                first = self.source.start_position(f.key, f.position, at_query_start=True)
            if f.position <= first:
                continue
            if finish.version == 1:
                base = finish.base
            else:
                base = max(finish.base, known.next if known is not None else begin.horizon)
            record = finish.clock == "record"
            parts.append(FrontRange(f.key, f.front, first, f.position, base, record))
        return parts

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: positions live in Spark's offset log."""

    def stop(self) -> None:
        """Close the connector's driver-side clients."""
        self.source.close()

    # --- reading (executors) -----------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The task's records as Arrow batches, stamped; as item rows with a graph stage.

        Range after range, each through the stage on its own: a range's rows come in meta
        order, which the stage's map-side combine relies on; two ranges' rows together do not.
        """
        setup_worker()
        task: ReadTask = partition.value
        for part in task.ranges:
            rows = self._stamped(part)
            yield from rows if self.stage is None else self.stage.sent(rows)

    def _stamped(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches, stamped with their global times."""
        schema = pa.schema(META_FIELDS + self.source.payload_fields())
        batch_id = batch_id_of_task()
        front = pa.scalar(part.front, pa.int32())
        source = pa.scalar(self.source.source_name(part.key), pa.string())
        floor = part.base
        for batch in self.source.read_range(part):
            crash_point("front.read", batch_id)
            if batch.num_rows == 0:
                continue
            position = batch.column("position")
            if part.record_time:
                ts, floor = clamp_times(self.source.record_times(part.key, batch), floor)
            else:
                ts = pc.add(pc.subtract(position, part.start), part.base)
            columns = [
                ts,
                pa.repeat(front, batch.num_rows),
                pa.repeat(source, batch.num_rows),
                position,
                *(batch.column(field.name) for field in self.source.payload_fields()),
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the options and the connector, not driver-side planning state."""
        state = dict(self.__dict__)
        state["_target"] = None
        state["_target_pending"] = False
        state["_controller"] = None
        state["_shim"] = False
        state["_activity"] = {}
        state["_idle_raised"] = set()
        return state


class FrontBatchReader(DataSourceReader):
    """``spark.read.format("flamestream")``: what is available now, as one bounded batch.

    Planned and stamped exactly like the first batch of a stream without a read limit, so a
    graph applied to it sees the items (and, with ``clock=logical`` or ``record``, the global
    times) that a stream reading the same input would.
    """

    def __init__(self, source: FrontSource, config: ReaderConfig) -> None:
        self.stream = FrontReader(source, config)
        start = self.stream.initialOffset()
        self.start, self.end = start, self.stream.latestOffset(start, ReadAllAvailable())

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per front range, as the stream would read them."""
        return self.stream.partitions(self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records, stamped."""
        return self.stream.read(partition)
