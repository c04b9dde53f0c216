"""History-then-live options: the boundary, the split of ``history.*``, the start checks.

Everything here runs when the query is defined (``load()``), before any batch: options are
parsed once and every error names the option, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from flamestream.errors import ConfigError
from flamestream.spark.connector.front import FrontSource
from flamestream.spark.connector.options import OptionReader

#: The kinds a history may be (bounded reads of files or of a Delta table).
HISTORY_KINDS = ("delta", "files")
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
