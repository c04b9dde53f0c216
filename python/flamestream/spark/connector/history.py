"""A history, then live: one front that backfills a bounded history and goes on live.

``.option("history", "delta" | "files")`` on a live front (kafka, files, delta) makes the
query read the whole history first, at batch speed (``history.maxRecordsPerTrigger`` records
a batch, not the live source's per-trigger limit), then switch to the live source without
stopping: one checkpoint, one grouping state, one sequence of global times.

How it stays exact (see docs/backfill.md):

1. **The history's extent is fixed** at the query's first planning: per history source, the
   position it reaches then (``reach``) goes into the offset log's ``history`` record. Rows
   added to the history later are not read (they are the live source's).
2. **Backfill**: only history sources are planned, each range ending at or before its reach.
   A history source that reached its reach is *finished*: it reports the horizon, so it
   holds no release back.
3. **The switch** is planned in the first batch whose start has every history source at its
   reach: the boundary (:mod:`flamestream.spark.connector.boundary`) gives each live source's
   start, and the offset of that batch records the starts (``firstSeen``), what they were
   derived from and the gaps, before the batch runs. Replays and restarts read them there.
4. **Live**: the history is never listed or read again (a restart checks only that it did
   not shrink, and warns if it did). Live sources first seen later start at their earliest.

Global time continues across the switch: live fronts are first seen at the switch and start
at the horizon, above every history time; with ``clock=record`` their record times are
clamped from there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.datasource import ReadLimit

from flamestream.spark.connector.boundary import (
    FoundPositions,
    Held,
    Switch,
    listed,
    position_switch,
    time_switch,
)
from flamestream.spark.connector.front import FrontReader, FrontSource, ReaderConfig
from flamestream.spark.connector.history_options import Boundary
from flamestream.spark.connector.history_rows import (
    boundary_columns,
    int_column,
    json_rows,
    projected,
    row_topics,
)
from flamestream.spark.connector.offsets import FrontOffset, FrontRange
from flamestream.spark.control.admission import AdmissionController

log = logging.getLogger(__name__)

#: Key prefixes of the two sides inside the hybrid front.
HISTORY, LIVE = "history:", "live:"
#: The offset log's record of the backfill and the switch.
RECORD = "history"
#: A record's time, carried beside the payload from ``read_range`` to ``record_times``.
TIME_COLUMN = "__record_time"


@dataclass
class BackfillState:
    """The offset log's ``history`` record: the history's extent, progress, the switch."""

    #: per history key: where it starts and the position it reaches (fixed at batch 0)
    starts: dict[str, int] = field(default_factory=dict)
    reach: dict[str, int] = field(default_factory=dict)
    rows_read: int = 0
    #: the history's size by ``records_between`` (records, or bytes for files)
    size: int = 0
    #: boundary ``position``: per live source name, what the history holds (``Held``)
    held: dict[str, list[Any]] = field(default_factory=dict)
    #: None while backfilling; then the switch's batch, starts, derivation and gaps
    switch: dict[str, Any] | None = None
    fixed: bool = False

    @property
    def live(self) -> bool:
        """Whether the switch is planned (in this batch or before)."""
        return self.switch is not None

    def to_json(self) -> dict[str, Any]:
        """What the offset records."""
        return {
            "phase": "live" if self.live else "backfill",
            "starts": dict(sorted(self.starts.items())),
            "reach": dict(sorted(self.reach.items())),
            "rowsRead": self.rows_read,
            "size": self.size,
            "held": self.held,
            "switch": self.switch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> BackfillState:
        """The record read back (a fresh state when the offset has none: batch 0)."""
        if not data:
            return cls()
        return cls(
            starts={str(k): int(v) for k, v in data["starts"].items()},
            reach={str(k): int(v) for k, v in data["reach"].items()},
            rows_read=int(data["rowsRead"]),
            size=int(data.get("size", 0)),
            held=dict(data.get("held", {})),
            switch=data.get("switch"),
            fixed=True,
        )


class HistoryThenLive(FrontSource):
    """The two sides as one front source: history keys first, then (after the switch) live.

    Keys are the sides' own keys prefixed ``history:`` or ``live:``. Both sides are pickled
    to executors; the backfill state lives on the driver and is restored from the start
    offset before every planning (:class:`HistoryThenLiveReader`).
    """

    limit_alias: ClassVar[str | None] = None

    def __init__(
        self, history: FrontSource, live: FrontSource, boundary: Boundary, *, json_lines: bool
    ) -> None:
        self.history = history
        self.live = live
        self.boundary = boundary
        #: a files history whose lines are JSON objects giving the live columns by name
        #: (``history.format=json``); else each line is the record's ``value`` (``text``)
        self.json_lines = json_lines
        self.kind = f"{history.kind}+{live.kind}"  # type: ignore[misc]
        self.limit_alias = live.limit_alias  # type: ignore[misc]
        self.record_time_from = live.record_time_from
        #: attach record times when stamping needs them or the cut filters by them
        self.timed = boundary.kind == "time"
        self.state = BackfillState()  # driver side, restored per planning
        self.planning = False  # driver side: discover may plan the switch
        self._checked = False  # driver side: the history's shrink check after a restart

    # --- keys ---------------------------------------------------------------------------

    @staticmethod
    def side_key(key: str) -> tuple[bool, str]:
        """(is history, the side's own key)."""
        if key.startswith(HISTORY):
            return True, key[len(HISTORY) :]
        return False, key[len(LIVE) :]

    def _side(self, key: str) -> tuple[FrontSource, str]:
        past, inner = self.side_key(key)
        return (self.history if past else self.live), inner

    def source_name(self, key: str) -> str:
        """The side's own source name."""
        side, inner = self._side(key)
        return side.source_name(inner)

    def payload_fields(self) -> list[pa.Field]:
        """The live front's payload columns (history rows are projected onto them)."""
        return self.live.payload_fields()

    # --- planning (driver) ----------------------------------------------------------------

    @property
    def backfilling(self) -> bool:
        """Whether the batch being planned reads the history (no switch planned yet)."""
        return not self.state.live

    def restore(self, record: Mapping[str, Any] | None) -> None:
        """The state as the start offset recorded it; ``planning`` allows the switch."""
        self.state = BackfillState.from_json(record)

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """Backfill: the history up to its fixed reach; from the switch on: both sides."""
        state = self.state
        if not state.fixed:
            self._fix_history()
        past = {k: known.get(k, state.starts[k]) for k in state.reach}
        if state.live:
            self._check_history_once()
            live_known = {self.side_key(k)[1]: v for k, v in known.items() if k.startswith(LIVE)}
            return {**past, **self._live_discover(live_known)}
        done = all(past[k] >= state.reach[k] for k in state.reach)
        if not (done and self.planning):
            return dict(state.reach)
        available = self._live_discover({})
        self._plan_switch(available)
        return {**past, **available}

    def _live_discover(self, known: Mapping[str, int]) -> dict[str, int]:
        return {LIVE + k: v for k, v in self.live.discover(known).items()}

    def _fix_history(self) -> None:
        """Batch 0: the history's sources, where they start and what they reach now."""
        found = self.history.discover({})
        state = self.state
        for inner, reach in sorted(found.items()):
            start = self.history.start_position(inner, reach, at_query_start=True)
            state.starts[HISTORY + inner] = start
            state.reach[HISTORY + inner] = max(start, reach)
            state.size += self.history.records_between(inner, start, max(start, reach))
        if self.boundary.kind == "position":
            state.held = self._scan_positions()
        state.fixed = True
        log.info("history %s: %d sources, size %d", self.history.kind, len(found), state.size)

    def _check_history_once(self) -> None:
        """After the switch: warn (once per query run) if the history shrank or went away."""
        if self._checked:
            return
        self._checked = True
        try:
            now = {HISTORY + k: v for k, v in self.history.discover({}).items()}
        except Exception as exc:  # a history gone after the switch only warns
            now, reason = {}, f"listing it failed: {exc!r}"
        else:
            reason = "changed"
        shrunk = sorted(k for k, reach in self.state.reach.items() if now.get(k, -1) < reach)
        if shrunk:
            log.warning(
                "history %s %s after the switch (batch %s): %s no longer reach their "
                "positions in the offset log. The query's state holds the history as read "
                "then; it is not read again",
                self.history.kind,
                reason,
                (self.state.switch or {}).get("batch"),
                ", ".join(shrunk[:5]),
            )

    def _plan_switch(self, available: Mapping[str, int]) -> None:
        """Decide the live starts from the boundary; warn about gaps (logged and recorded)."""
        live_keys = {self.side_key(k)[1]: v for k, v in available.items()}
        warnings: list[str] = []
        if self.boundary.kind == "time":
            switch = self._time_switch(live_keys, warnings)
        else:
            switch = self._position_switch(live_keys, warnings)
        warnings += [
            f"positions {gap.first}..{gap.last} of {gap.source} are in neither the history "
            f"nor the live source ({gap.where})"
            for gap in switch.gaps
        ]
        for text in warnings:
            log.warning("history then %s: %s", self.live.kind, text)
        self.state.switch = {
            "boundary": self.boundary.kind,
            "cut": self.boundary.cut,
            "starts": {LIVE + k: v for k, v in sorted(switch.starts.items())},
            "derivedFrom": switch.derived,
            "gaps": listed(switch.gaps),
            "gapPositions": switch.gap_positions,
            "warnings": warnings[:20],
        }

    def _earliest(self, live_available: Mapping[str, int]) -> Any:
        def earliest(key: str) -> int:
            return self.live.start_position(key, live_available[key], at_query_start=False)

        return earliest

    def _time_switch(self, live_available: Mapping[str, int], warnings: list[str]) -> Switch:
        cut = self.boundary.cut
        assert cut is not None  # noqa: S101 - parse() sets it for time
        switch = time_switch(
            live_available,
            lambda key: self.live.position_at_time(key, cut),
            self._earliest(live_available),
        )
        at_end = [k for k, s in switch.starts.items() if s >= live_available[k]]
        if live_available and len(at_end) == len(live_available):
            warnings.append(
                f"no live record at or after history.cutTime={cut} yet: the cut lies in the "
                "future of the live source; live starts at its end"
            )
        return switch

    def _position_switch(self, live_available: Mapping[str, int], warnings: list[str]) -> Switch:
        by_name = {self.live.source_name(k): k for k in live_available}
        held = {name: Held.from_json(data) for name, data in self.state.held.items()}
        foreign = sorted(set(held) - set(by_name))
        if foreign:
            warnings.append(
                f"the history holds positions of {', '.join(foreign[:5])}, which the live "
                "source does not have (now): they move no live start"
            )
        return position_switch(
            held,
            by_name,
            self.live.position_after,
            self._earliest(live_available),
            counted=self.live.positions_count_records,
        )

    def _scan_positions(self) -> dict[str, list[Any]]:
        """Batch 0, boundary ``position``: what the history holds of each live source.

        Read once, when the history's extent is fixed (the boundary columns only, where the
        history can project them), so the switch itself reads nothing of the history.
        """
        found: dict[str, FoundPositions] = {}
        for names, positions in self._history_positions():
            encoded = names.dictionary_encode()
            index = encoded.indices.to_numpy(zero_copy_only=False)
            for i, name in enumerate(encoded.dictionary.to_pylist()):
                found.setdefault(str(name), FoundPositions()).add(positions[index == i])
        counted = self.live.positions_count_records
        return {
            name: Held.of(name, f, counted=counted).to_json()
            for name, f in sorted(found.items())
            if f.top is not None
        }

    def _history_positions(self) -> Iterator[tuple[pa.Array, Any]]:
        """Per chunk of the history: each row's live source name and live position."""
        b = self.boundary
        assert b.position_column is not None  # noqa: S101 - parse() sets it for position
        for key, start in sorted(self.state.starts.items()):
            inner = self.side_key(key)[1]
            part = FrontRange(inner, 0, start, self.state.reach[key], 0)
            for batch in self._history_batches(part, b.columns()):
                if not batch.num_rows:
                    continue
                table = boundary_columns(batch, b.columns(), f"history {self.history.kind}", inner)
                positions = int_column(table, b.position_column, "history.positionColumn")
                if b.source_column is not None:
                    names = pc.cast(table.column(b.source_column), pa.string())
                else:
                    assert b.partition_column is not None  # noqa: S101
                    int_column(table, b.partition_column, "history.partitionColumn")
                    parts = pc.cast(table.column(b.partition_column), pa.string())
                    topics = row_topics(table, b.topic_column, self._liverow_topics(), len(parts))
                    names = pc.binary_join_element_wise(topics, parts, "-")
                if isinstance(names, pa.ChunkedArray):
                    names = names.combine_chunks()
                yield names, positions

    def _liverow_topics(self) -> list[str]:
        topics: list[str] = getattr(self.live, "topics", [])
        return topics

    def _history_batches(self, part: FrontRange, columns: list[str]) -> Iterator[pa.RecordBatch]:
        scan = getattr(self.history, "scan_columns", None)
        if scan is not None:
            yield from scan(part.key, part.start, part.end, columns)
        else:
            yield from self.history.read_range(part)

    def advance(self, key: str, start: int, end: int, records: int) -> tuple[int, int]:
        """The side's own ``advance``."""
        side, inner = self._side(key)
        return side.advance(inner, start, end, records)

    def start_position(self, key: str, available: int, *, at_query_start: bool) -> int:
        """History: its own start; live: the switch's start, else its earliest."""
        side, inner = self._side(key)
        if side is self.history:
            return self.state.starts.get(key, 0)
        starts = (self.state.switch or {}).get("starts", {})
        if key in starts:
            return int(starts[key])
        return self.live.start_position(inner, available, at_query_start=False)

    def finished(self, key: str, position: int) -> bool:
        """A history source at its fixed reach is finished; live ones as their side says."""
        if key in self.state.reach:
            return position >= self.state.reach[key]
        side, inner = self._side(key)
        return side.finished(inner, position)

    def split_positions(self, key: str, start: int, end: int, records: int) -> list[int]:
        """The side's own cuts."""
        side, inner = self._side(key)
        return side.split_positions(inner, start, end, records)

    def records_between(self, key: str, start: int, end: int) -> int:
        """The side's own measure."""
        side, inner = self._side(key)
        return side.records_between(inner, start, end)

    def close(self) -> None:
        """Both sides' driver clients."""
        self.history.close()
        self.live.close()

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the sides and the boundary, not the planning state."""
        state = dict(self.__dict__)
        state["state"] = BackfillState()
        state["planning"] = False
        return state

    # --- reading (executors, and the driver with clock=record) -----------------------------

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The side's rows; history rows projected onto the live columns; cut by time."""
        side, inner = self._side(part.key)
        past = side is self.history
        fields = self.payload_fields()
        cut = self.boundary.cut
        for batch in side.read_range(replace(part, key=inner)):
            if not batch.num_rows:
                continue
            times = side.record_times(inner, batch) if (self.timed or part.record_time) else None
            if past:
                step = f"history {self.history.kind}"
                if self.json_lines:  # an archive's lines: JSON objects, fields by name
                    batch = json_rows(batch, fields, step, inner)
                batch = projected(batch, fields, step, inner)
            if times is not None:
                batch = batch.append_column(TIME_COLUMN, pc.cast(times, pa.int64()))
                if cut is not None:
                    keep = pc.less(times, cut) if past else pc.greater_equal(times, cut)
                    batch = batch.filter(keep)
            if batch.num_rows:
                yield batch

    def read_times(self, part: FrontRange) -> Iterator[pa.Array]:
        """The side's own times (a projection where it has one), cut as ``read_range`` cuts."""
        side, inner = self._side(part.key)
        past = side is self.history
        cut = self.boundary.cut
        for times in side.read_times(replace(part, key=inner)):
            times = pc.cast(times, pa.int64())
            if cut is not None:
                times = times.filter(pc.less(times, cut) if past else pc.greater_equal(times, cut))
            if len(times):
                yield times

    def record_times(self, key: str, batch: pa.RecordBatch) -> pa.Array:
        """The time ``read_range`` attached."""
        return batch.column(TIME_COLUMN)


class HistoryThenLiveReader(FrontReader):
    """The stream reader of a history-then-live front: restores and records its state."""

    source: HistoryThenLive

    def __init__(self, source: HistoryThenLive, config: ReaderConfig, backfill_limit: int):
        super().__init__(source, config)
        self.backfill_limit = backfill_limit

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Plan the next batch, the backfill's state restored from ``start`` first."""
        begin = self._begin(start)
        self.source.restore(dict(begin.extra).get(RECORD))
        self.source.planning = True
        try:
            end = super().latestOffset(start, limit)
        finally:
            self.source.planning = False
        if end is not start:
            end[RECORD]["done"] = self._done({k: p for k, _, p, _ in end["fronts"]})
        return end

    def _done(self, positions: Mapping[str, int]) -> int:
        """How much of the history the batch's end has read, in its ``records_between``."""
        state = self.source.state
        return sum(
            self.source.records_between(k, state.starts[k], min(positions[k], state.reach[k]))
            for k in state.reach
            if k in positions
        )

    def _within_target(
        self, discovered: Mapping[str, int], positions: Mapping[str, int]
    ) -> dict[str, int]:
        """AvailableNow caps live sources only: the history's fixed reach is its end.

        The run's end is fixed at its first planning; a run that switches sees the live
        sources first at the switch, and takes what they have then as their end.
        """
        target = self._target
        if target is not None:  # live sources first seen at the switch: their end is now
            target.update({k: v for k, v in discovered.items() if k not in target})
        capped = super()._within_target(discovered, positions)
        capped.update({k: v for k, v in discovered.items() if k.startswith(HISTORY)})
        return capped

    def _tick_limit(
        self, limit: ReadLimit, begin: FrontOffset
    ) -> tuple[int | None, AdmissionController | None, dict[str, Any] | None]:
        """Backfill batches take ``history.maxRecordsPerTrigger`` (a loop gate's 0 wins)."""
        budget, controller, published = super()._tick_limit(limit, begin)
        if self.source.backfilling and budget != 0:
            budget = self.backfill_limit
        return budget, controller, published

    def _extra(
        self,
        begin: FrontOffset,
        controller: AdmissionController | None,
        budget: int | None,
        taken: int | None,
        published: dict[str, Any] | None,
    ) -> tuple[tuple[str, Any], ...]:
        """The other records, and the backfill's: rows read, the switch once planned."""
        extra = super()._extra(begin, controller, budget, taken, published)
        state = self.source.state
        if state.switch is not None and "batch" not in state.switch:
            state.switch = {"batch": begin.seq + 1, **state.switch}
        elif state.switch is None:
            state.rows_read += taken or 0
        return (*(e for e in extra if e[0] != RECORD), (RECORD, state.to_json()))

    def _push_metrics(self, fronts: Any, available: Any, ends: Any, taken: int | None) -> None:
        """The front's gauges, and the backfill's: phase, rows read, share of the history."""
        super()._push_metrics(fronts, available, ends, taken)
        shim = self._find_shim()
        if shim is None:
            return
        state = self.source.state
        done = self._done(ends)
        values = {
            "live": 1.0 if state.live else 0.0,
            "historyRowsRead": float(state.rows_read + (taken or 0) * (not state.live)),
            "historyShare": done / state.size if state.size else 1.0,
            "gapPositions": float((state.switch or {}).get("gapPositions", 0)),
        }
        shim.push_metrics(f"front.{self.source.kind}.history", values)
