"""The generic front: offsets, front ids, read limits, AvailableNow and global-time stamping.

A connector (files, Kafka, generator) supplies three things through :class:`FrontSource`:
which sources exist and how far they reach (``discover``), where a range of ``k`` records
ends (``advance``), and the records of a range (``read_range``). Everything that makes
replay exact lives here, in the end offset Spark writes to ``checkpoint/offsets/N``:

* ``fronts``: per source its front id and position. Ids are given once, in sorted order of
  the sources first seen, and never change.
* ``base`` and ``horizon``: the batch's records are stamped ``ts = base + (position -
  start position)``, so a replayed batch gets exactly the same global times without counting
  anything at planning. ``base = max(planning clock in µs, previous horizon)``; ``horizon =
  base + the longest range``, so every ts of the batch is below the horizon and every later
  ts is at or above it. Each front therefore reports the horizon, and the sink can compute
  the min-time of a batch from its offsets alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
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
from flamestream.spark.config import OptionReader
from flamestream.spark.controller import HISTORY, Budget, Controller
from flamestream.spark.faults import crash_point

#: Version of the offset format; bumped on any incompatible change.
OFFSET_VERSION = 1

#: Columns every front emits first, before its own payload columns.
META_FIELDS = [
    pa.field("ts", pa.int64(), nullable=False),
    pa.field("front", pa.int32(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),
]
META_DDL = "ts long, front int, source string, position long"


@dataclass(frozen=True)
class FrontState:
    """One source as the offset records it."""

    key: str
    front: int
    position: int


@dataclass(frozen=True)
class FrontOffset:
    """The whole offset of a flamestream source; ``to_json`` is what Spark checkpoints."""

    kind: str
    id_base: int
    base: int
    horizon: int
    fronts: tuple[FrontState, ...]
    extra: tuple[tuple[str, Any], ...] = ()
    #: How many batches this source has planned before this one (-1: none yet).
    seq: int = -1

    def to_json(self) -> dict[str, Any]:
        """A dict with a stable key order (Spark compares and logs it verbatim)."""
        return {
            "flamestream": OFFSET_VERSION,
            "front": self.kind,
            "seq": self.seq,
            "idBase": self.id_base,
            "base": self.base,
            "horizon": self.horizon,
            "fronts": [[f.key, f.front, f.position] for f in self.fronts],
            **dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FrontOffset:
        """Parse what :meth:`to_json` produced (possibly read back from the offset log)."""
        if data.get("flamestream") != OFFSET_VERSION:
            msg = f"not a flamestream v{OFFSET_VERSION} offset: {dict(data)!r}"
            raise ValueError(msg)
        known = {"flamestream", "front", "seq", "idBase", "base", "horizon", "fronts"}
        return cls(
            kind=str(data["front"]),
            id_base=int(data["idBase"]),
            base=int(data["base"]),
            horizon=int(data["horizon"]),
            fronts=tuple(FrontState(str(k), int(f), int(p)) for k, f, p in data["fronts"]),
            extra=tuple((k, v) for k, v in data.items() if k not in known),
            seq=int(data["seq"]),
        )

    def positions(self) -> dict[str, int]:
        """Position per source key."""
        return {f.key: f.position for f in self.fronts}

    @property
    def report(self) -> tuple[int, int]:
        """The least global time any front of this source may still assign."""
        return (self.horizon, self.id_base)


@dataclass(frozen=True)
class FrontRange:
    """What one read task reads: a source's records in [start, end), stamped from ``base``."""

    key: str
    front: int
    start: int
    end: int
    base: int


class FrontSource:
    """What a connector implements; the reader does the rest.

    Instances get pickled to executors, so they must not hold clients or open files (create
    those lazily).
    """

    #: Name used in errors and in the offset (``files``, ``kafka``, ``generator``).
    kind: ClassVar[str]

    #: Another name for ``maxRecordsPerTrigger``, as Spark's own connector of the kind calls it.
    limit_alias: ClassVar[str | None] = None

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

    def start_position(self, key: str, available: int) -> int:
        """Where a newly discovered source starts (earliest by default)."""
        return 0

    def source_name(self, key: str) -> str:
        """The ``source`` column's value for ``key``: with the position, the determinant."""
        return key

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The records of ``part``: batches with an int64 ``position`` and the payload columns.

        Runs on executors. Must be deterministic: the same range gives the same records.
        """
        raise NotImplementedError

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

    @classmethod
    def parse(cls, options: OptionReader, limit_alias: str | None = None) -> ReaderConfig:
        """Read ``frontIdBase``, ``maxRecordsPerTrigger`` (or ``limit_alias``) and ``clock``.

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
        clock = options.choice("clock", ["wall", "logical"], "wall")
        on = options.choice("controller", ["off", "on"], "off") == "on"
        budget = Budget.parse(options, max_records if on else None)  # validated either way
        return cls(
            id_base=id_base,
            max_records=max_records,
            clock=clock,
            controller=budget if on else None,
        )


class FrontReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of every flamestream front."""

    def __init__(self, source: FrontSource, config: ReaderConfig) -> None:
        self.source = source
        self.id_base = config.id_base
        self.max_records = config.max_records
        self.clock = config.clock
        self.budget = config.controller
        self._target: dict[str, int] | None = None  # AvailableNow's end, driver side only
        self._controller: Controller | None = None  # driver side only
        self._shim: Shim | bool | None = False  # driver side: False = not looked for yet

    # --- planning (driver-side Python process) -----------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """No source read yet; the clock starts at 0."""
        return FrontOffset(self.source.kind, self.id_base, 0, 0, ()).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` if set, else everything available."""
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: what is available now, nothing later."""
        self._target = self.source.discover({})

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """What is available now, per source (for backlog in the query progress)."""
        available = self.source.discover({})
        return {"flamestream": OFFSET_VERSION, "available": dict(sorted(available.items()))}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next batch: per-source positions within ``limit``, plus stamping.

        With the controller on, its limit for the tick replaces ``limit``.
        """
        begin = FrontOffset.from_json(start)
        positions = begin.positions()
        available = self.source.discover(positions)
        if self._target is not None:
            available = {k: min(v, self._target.get(k, 0)) for k, v in available.items()}
        fronts = self._assign_ids(begin, available)
        starts = {
            f.key: positions.get(f.key, self.source.start_position(f.key, available[f.key]))
            for f in fronts
        }
        ends = {f.key: max(starts[f.key], available.get(f.key, 0)) for f in fronts}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        controller = self._control(begin)
        if controller is not None:
            budget = controller.next_limit()
        taken = None
        if budget is not None:
            ends, taken = self._within_budget(fronts, starts, ends, budget)
        longest = max((ends[k] - starts[k] for k in ends), default=0)
        self._push_metrics(fronts, available, ends, taken)
        if longest == 0 and len(fronts) == len(begin.fronts):
            return start  # nothing new: no batch
        extra = begin.extra
        if controller is not None:
            controller.planned(begin.seq + 1, taken or 0)
            record = ("controller", controller.record())
            extra = (*(e for e in begin.extra if e[0] != "controller"), record)
        # wall: ts follow the planning clock in µs; logical: ts depend on the input alone
        now = time.time_ns() // 1000 if self.clock == "wall" else 0
        base = max(now, begin.horizon)
        end = FrontOffset(
            self.source.kind,
            self.id_base,
            base,
            base + longest,
            tuple(FrontState(f.key, f.front, ends[f.key]) for f in fronts),
            extra,
            begin.seq + 1,
        )
        crash_point("front.plan", end.seq)
        return end.to_json()

    def _control(self, begin: FrontOffset) -> Controller | None:
        """The controller, told that the previous tick ended and what progress says."""
        if self.budget is None:
            return None
        if self._controller is None:
            self._controller = Controller(self.budget)
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
        fronts = list(begin.fronts)
        next_id = max((f.front + 1 for f in fronts), default=self.id_base)
        known = {f.key for f in fronts}
        for key in sorted(k for k in available if k not in known):
            if next_id > MAX_FRONT:
                msg = f"front {self.source.kind}: more than {MAX_FRONT} fronts"
                raise ConfigError(self.source.kind, "frontIdBase", self.id_base, msg)
            fronts.append(FrontState(key, next_id, 0))
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
        """One task per source that moved, carrying everything needed to stamp it."""
        begin, finish = FrontOffset.from_json(start), FrontOffset.from_json(end)
        before = begin.positions()
        parts = []
        for f in finish.fronts:
            first = before.get(f.key, self.source.start_position(f.key, f.position))
            if f.position > first:
                parts.append(
                    InputPartition(FrontRange(f.key, f.front, first, f.position, finish.base))
                )
        return parts

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: positions live in Spark's offset log."""

    def stop(self) -> None:
        """Close the connector's driver-side clients."""
        self.source.close()

    # --- reading (executors) -----------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches, stamped with their global times."""
        part: FrontRange = partition.value
        schema = pa.schema(META_FIELDS + self.source.payload_fields())
        batch_id = batch_id_of_task()
        front = pa.scalar(part.front, pa.int32())
        source = pa.scalar(self.source.source_name(part.key), pa.string())
        for batch in self.source.read_range(part):
            crash_point("front.read", batch_id)
            if batch.num_rows == 0:
                continue
            position = batch.column("position")
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
        state["_controller"] = None
        state["_shim"] = False
        return state


class FrontBatchReader(DataSourceReader):
    """``spark.read.format("flamestream")``: what is available now, as one bounded batch.

    Planned and stamped exactly like the first batch of a stream without a read limit, so a
    graph applied to it sees the items (and, with ``clock=logical``, the global times) that a
    stream reading the same input in one batch would.
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


def batch_id_of_task() -> int:
    """The micro-batch a task belongs to (-1 outside streaming)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context else None
    return int(value) if value else -1
