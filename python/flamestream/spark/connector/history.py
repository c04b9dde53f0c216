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

import io
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from pyspark.sql.streaming.datasource import ReadLimit

from flamestream.errors import ConfigError
from flamestream.spark.connector.boundary import (
    FoundPositions,
    Held,
    Switch,
    listed,
    position_switch,
    time_switch,
)
from flamestream.spark.connector.front import FrontReader, FrontSource, ReaderConfig
from flamestream.spark.connector.offsets import FrontOffset, FrontRange, OffsetError
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.control.admission import AdmissionController

log = logging.getLogger(__name__)

#: The kinds a history may be (bounded reads of files or of a Delta table).
HISTORY_KINDS = ("delta", "files")
#: Key prefixes of the two sides inside the hybrid front.
HISTORY, LIVE = "history:", "live:"
#: The offset log's record of the backfill and the switch.
RECORD = "history"
#: A record's time, carried beside the payload from ``read_range`` to ``record_times``.
TIME_COLUMN = "__record_time"
#: Default records per backfill batch.
BACKFILL_LIMIT = 1_000_000


@dataclass(frozen=True)
class Boundary:
    """How the history and the live source meet (declared once, by the user)."""

    kind: str  # "position" or "time"
    #: position: the history's column with the live position (Kafka's offset)
    position_column: str | None = None
    #: position: the history's column with the live source's name (its ``source`` column)
    source_column: str | None = None
    #: position, Kafka: the partition (and topic) columns instead of ``source_column``
    partition_column: str | None = None
    topic_column: str | None = None
    #: time: history rows below it, live rows at or above it (the record times' unit)
    cut: int | None = None

    @classmethod
    def parse(cls, options: OptionReader, live: FrontSource) -> Boundary:
        """``history.boundary`` and its columns or cut time, checked against the live front."""
        kind = options.choice("history.boundary", ["position", "time"], "")
        if not kind:
            raise ConfigError(options.step, "history.boundary", None, "position or time (required)")
        if kind == "time":
            cut = options.integer("history.cutTime")
            if live.record_time_from is None:
                raise ConfigError(
                    options.step,
                    "history.boundary",
                    "time",
                    f"position: the live {live.kind} front's records have no time here "
                    "(give it its record-time option, e.g. timestampField with clock=record)",
                )
            return cls("time", cut=cut)
        default = "offset" if live.kind == "kafka" else "position"
        position = options.string("history.positionColumn", default, what="column name")
        source = options.optional_string("history.sourceColumn", what="column name")
        partition = options.optional_string("history.partitionColumn", what="column name")
        topic = options.optional_string("history.topicColumn", what="column name")
        if source is None and partition is None:
            partition = "partition" if live.kind == "kafka" else None
            source = None if live.kind == "kafka" else "source"
        if source is not None and partition is not None:
            raise ConfigError(
                options.step,
                "history.partitionColumn",
                partition,
                "either history.sourceColumn or history.partitionColumn, not both",
            )
        if partition is not None and live.kind != "kafka":
            raise ConfigError(
                options.step,
                "history.partitionColumn",
                partition,
                f"only with a kafka live front (this one is {live.kind}): "
                "history.sourceColumn names the live source per row",
            )
        return cls("position", position, source, partition, topic)

    def columns(self) -> list[str]:
        """The history's columns the boundary reads."""
        names = [self.position_column, self.source_column, self.partition_column]
        return [n for n in (*names, self.topic_column) if n is not None]

    def describe(self) -> str:
        """One line for logs and ``describe``."""
        if self.kind == "time":
            return f"time: history below {self.cut}, live at or above it"
        where = self.source_column or f"{self.topic_column or 'topic'}-{self.partition_column}"
        return f"position: live after the history's largest {self.position_column} per {where}"


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


class MissingHistory(FrontSource):
    """A history that could not be opened at query start (its folder or table is gone).

    A query past its switch never reads the history again, so that is no error for it: only a
    planning that still needs the history raises the error the history's front gave.
    """

    def __init__(self, kind: str, error: ConfigError) -> None:
        self.kind = kind  # type: ignore[misc]
        self.error = error

    def payload_fields(self) -> list[pa.Field]:
        """None known."""
        return []

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """The error the history's front raised at query start."""
        raise self.error


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
                table = _columns(batch, b.columns(), f"history {self.history.kind}", inner)
                positions = _int_column(table, b.position_column, "history.positionColumn")
                if b.source_column is not None:
                    names = pc.cast(table.column(b.source_column), pa.string())
                else:
                    assert b.partition_column is not None  # noqa: S101
                    _int_column(table, b.partition_column, "history.partitionColumn")
                    parts = pc.cast(table.column(b.partition_column), pa.string())
                    topics = _topics(table, b.topic_column, self._live_topics(), len(parts))
                    names = pc.binary_join_element_wise(topics, parts, "-")
                if isinstance(names, pa.ChunkedArray):
                    names = names.combine_chunks()
                yield names, positions

    def _live_topics(self) -> list[str]:
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
                    batch = _json_rows(batch, fields, step, inner)
                batch = _projected(batch, fields, step, inner)
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


def _columns(batch: pa.RecordBatch, names: list[str], step: str, key: str) -> pa.Table:
    """``names`` from ``batch``: its columns, or the JSON fields of its ``value`` lines."""
    if all(n in batch.schema.names for n in names):
        return pa.Table.from_batches([batch]).select(names)
    if "value" not in batch.schema.names:
        missing = [n for n in names if n not in batch.schema.names]
        msg = f"{step}: {key} has no column {missing[0]!r} (columns: {batch.schema.names})"
        raise OffsetError(msg)
    text = "\n".join(v if v is not None else "{}" for v in batch.column("value").to_pylist())
    options = pa_json.ParseOptions(unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(io.BytesIO(text.encode()), parse_options=options)
    except pa.ArrowInvalid as exc:
        msg = f"{step}: {key}'s lines are not JSON objects with the boundary's fields: {exc}"
        raise OffsetError(msg) from exc
    missing = [n for n in names if n not in table.column_names]
    if missing:
        msg = f"{step}: {key}'s lines have no field {missing[0]!r} (a boundary column)"
        raise OffsetError(msg)
    return table.select(names)


def _int_column(table: pa.Table, name: str, option: str) -> Any:
    """A boundary column as an int64 numpy array; nulls or other types are errors."""
    column = table.column(name)
    if not pa.types.is_integer(column.type) or column.null_count:
        what = f"type {column.type}" if not pa.types.is_integer(column.type) else "nulls"
        step = "history"
        raise ConfigError(step, option, name, f"a column of integers without nulls ({what})")
    return column.to_numpy().astype("int64")


def _topics(table: pa.Table, column: str | None, topics: list[str], rows: int) -> Any:
    """Each row's topic: the topic column, or the live front's only topic."""
    if column is not None:
        return pc.cast(table.column(column), pa.string())
    if len(topics) != 1:
        step = "history"
        raise ConfigError(
            step,
            "history.topicColumn",
            None,
            f"a column naming each row's topic: the live front subscribes to {topics}",
        )
    return pa.repeat(pa.scalar(topics[0], pa.string()), rows)


def _json_rows(batch: pa.RecordBatch, fields: list[pa.Field], step: str, key: str) -> Any:
    """An archive's lines (JSON objects) as their fields named like the live columns.

    Binary live columns (Kafka's key and value) are read as text and cast to bytes.
    """
    wanted = pa.schema(
        [pa.field(f.name, pa.string() if pa.types.is_binary(f.type) else f.type) for f in fields]
    )
    options = pa_json.ParseOptions(explicit_schema=wanted, unexpected_field_behavior="ignore")
    lines = batch.column("value")
    text = "\n".join(v if v is not None else "{}" for v in lines.to_pylist()).encode()
    try:
        table = pa_json.read_json(io.BytesIO(text), parse_options=options)
    except pa.ArrowInvalid as exc:
        msg = f"{step}: {key}'s lines are not JSON objects with the live columns' types: {exc}"
        raise OffsetError(msg) from exc
    if table.num_rows != batch.num_rows:
        msg = f"{step}: {key}: {batch.num_rows} lines gave {table.num_rows} JSON objects"
        raise OffsetError(msg)
    columns = [batch.column("position"), *(table.column(f.name).combine_chunks() for f in fields)]
    return pa.RecordBatch.from_arrays(columns, names=["position", *(f.name for f in fields)])


def _projected(batch: pa.RecordBatch, fields: list[pa.Field], step: str, key: str) -> Any:
    """History rows as the live front's columns: by name, cast; a missing one null."""
    columns = [batch.column("position")]
    for f in fields:
        if f.name in batch.schema.names:
            try:
                columns.append(pc.cast(batch.column(f.name), f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                msg = f"{step}: {key}'s column {f.name!r} does not cast to {f.type}: {exc}"
                raise OffsetError(msg) from exc
        else:
            columns.append(pa.nulls(batch.num_rows, f.type))
    names = ["position", *(f.name for f in fields)]
    return pa.RecordBatch.from_arrays(columns, names=names)


def check_projection(history: FrontSource, live: FrontSource, step: str) -> None:
    """At query start: the history must give the live payload's ``value`` column.

    A files history's lines are JSON objects whose fields give the columns (checked as read).
    """
    have = {f.name: f.type for f in history.payload_fields()}
    if history.kind == "files":
        return  # JSON lines give the columns by name; text lines the value (checked in parse)
    if "value" not in have:
        raise ConfigError(
            step,
            "history",
            history.kind,
            f"a history with a 'value' column (its columns: {sorted(have)}); the live "
            f"{live.kind} front's rows have {[f.name for f in live.payload_fields()]}",
        )


#: The hybrid's own options (read with their ``history.`` prefix); the rest of ``history.*``
#: goes to the history's front.
OWN_OPTIONS = frozenset(
    {
        "boundary",
        "positioncolumn",
        "sourcecolumn",
        "partitioncolumn",
        "topiccolumn",
        "cuttime",
        "maxrecordspertrigger",
        "format",
    }
)


def split_options(
    options: Mapping[str, str],
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(the live front's options, the history front's, the hybrid's own ``history.*``)."""
    live: dict[str, str] = {}
    past: dict[str, str] = {}
    own: dict[str, str] = {}
    for name, value in options.items():
        lowered = name.lower()
        if not lowered.startswith("history."):
            live[name] = value
        elif lowered[len("history.") :] in OWN_OPTIONS:
            own[name] = value
        else:
            past[name[len("history.") :]] = value
    return live, past, own


def check_history(
    history: FrontSource, live: FrontSource, boundary: Boundary, clock: str, step: str
) -> None:
    """At query start: the history gives ``value`` and, with ``clock=record``, times."""
    if isinstance(history, MissingHistory):
        return  # raised at the first planning that needs it
    check_projection(history, live, step)
    if history.kind != "files":  # a table's columns are known now; a file's lines are JSON
        check_boundary_columns(history, boundary, step)
    if clock == "record" and history.record_time_from is None:
        where = f"history {history.kind}"
        raise ConfigError(
            where,
            "clock",
            "record",
            "a history with record times (its record-time option, e.g. history.timestampField)",
        )


def check_boundary_columns(history: FrontSource, boundary: Boundary, step: str) -> None:
    """The boundary's columns exist in the history, integers where they are positions."""
    have = {f.name: f.type for f in history.payload_fields()}
    b = boundary
    named = {
        "history.positionColumn": (b.position_column, True),
        "history.partitionColumn": (b.partition_column, True),
        "history.sourceColumn": (b.source_column, False),
        "history.topicColumn": (b.topic_column, False),
    }
    for option, (column, integer) in named.items():
        if column is None:
            continue
        if column not in have:
            allowed = f"a column of the history {history.kind} ({', '.join(sorted(have))})"
            raise ConfigError(step, option, column, allowed)
        if integer and not pa.types.is_integer(have[column]):
            allowed = f"an integer column ({column} is {have[column]})"
            raise ConfigError(step, option, column, allowed)


def history_format(options: OptionReader, history_kind: str, live: FrontSource) -> bool:
    """``history.format`` of a files history: whether its lines are JSON objects.

    ``text`` (each line is the record's ``value``, as the files front reads it) is the default
    for a live front whose payload is a text ``value`` alone (files); ``json`` otherwise.
    """
    fields = live.payload_fields()
    text_live = [f.name for f in fields] == ["value"] and pa.types.is_string(fields[0].type)
    chosen = options.choice("history.format", ["json", "text"], "text" if text_live else "json")
    if history_kind != "files":
        if options.raw("history.format") is not None:
            raise ConfigError(
                options.step,
                "history.format",
                chosen,
                "only with history=files (a table has columns)",
            )
        return False
    if chosen == "text" and not text_live:
        raise ConfigError(
            options.step,
            "history.format",
            "text",
            f"json: the live {live.kind} front's rows have "
            f"{', '.join(f.name for f in fields)}, which text lines cannot give",
        )
    return chosen == "json"
