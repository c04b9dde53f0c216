"""The generic barrier sink: stage on executors, release once per batch on the driver.

Delivery guarantee: **exactly once**. Every row a query's fronts admitted is released once,
only when the min-time has passed it, even if the query is killed at any moment and restarted
from its checkpoint: staged rows and the buffer are durable, a batch's commit is deterministic
and marked done, and outputs are named by batch id so a repeated release overwrites instead of
duplicating.

Two release modes (option ``release``):

* ``commit`` (default): every row goes through the driver's commit, which releases the batch
  as one output sorted by global time.
* ``tasks``: a batch's min-time is in the offset log before its tasks run, so each write task
  sorts the rows it may release and writes them as its own output part, in parallel; the
  commit only publishes the parts of the successful task attempts (a rename; a copy on an
  object store) and releases the rest (rows above the min-time, buffered earlier) as before.
  Each part is sorted by global time, a batch's parts become visible as its commit publishes
  them, and every row is released once; what is given up is one total order over the batch.
  Outputs that cannot publish parts (Kafka's per-batch transaction) support ``commit`` only.

What each released row carries out (option ``columns``, :data:`COLUMNS`): ``all`` (default)
writes the row as the barrier holds it, meta and determinant included; ``value`` writes its
payload only, ``value,time`` its global time ``(ts, front)`` and payload. The barrier keeps
the whole row wherever it needs it (staged, buffered, ordered, invalidated: trace and flags
decide the order within a global time and which updates a replay drops); only the output
is projected, at the last moment, so the release (its order, exactly once, a replay's bytes)
is the same and only what is written per row shrinks.
"""

from __future__ import annotations

import contextlib
import posixpath
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from flamestream.errors import ConfigError
from flamestream.jvm import Shim
from flamestream.model import GlobalTime
from flamestream.spark.connector.barrier import (
    below,
    front_offsets,
    read_min_time,
    ready_and_rest,
)
from flamestream.spark.connector.faults import crash_point
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.durable import QueryCheckpoint, batch_id_of_task
from flamestream.spark.durable.barrier import (
    KEEP_MARKERS,
    BarrierStore,
    CommitOutcome,
    StagedPart,
)
from flamestream.spark.durable.files import filesystem, write_atomically
from flamestream.spark.durable.loop import AckTable, loops_enabled
from flamestream.spark.durable.state import STATE_BYTES
from flamestream.spark.exec.general.items import (
    ITEM_FIELDS,
    MAY_INVALIDATE,
    RELEASED_COLUMNS,
    TOMBSTONE,
    ascending,
    lineage_column,
)
from flamestream.spark.exec.general.shipping import OPTION as STAGE_OPTION
from flamestream.spark.exec.general.shipping import SinkTask, unship
from flamestream.spark.exec.worker.worker_setup import setup_worker

#: ts above this (2001 in µs) come from the wall clock, not ``clock=logical``.
WALL_CLOCK_FLOOR = 10**15

#: The sink's retention (``BarrierWriter._retain``) runs at every batch whose id + 1 is a
#: multiple of this. It lists Spark's offset log, the markers and the output's log (and the
#: ack tables of a graph with loops): three LISTs a batch on an object store at every batch,
#: 0.3 at every 10th. What it keeps grows by at most 9 batches: 109 with Spark's default
#: ``minBatchesToRetain`` of 100, under 10% more, and bounded all the same. 10 is also Spark's
#: default compaction interval of its file sink log, whose old files can only go at a
#: compaction (``+ 1`` puts the run right after one): a shorter period would list for nothing.
RETAIN_EVERY = 10


#: Columns a barrier sink needs: the global time of every row.
REQUIRED_COLUMNS = ("ts", "front")

#: The ``columns`` option's choices: what a sink writes of each released row.
COLUMNS = ("all", "value", "value,time")

#: The columns the barrier itself reads, whatever a sink writes: the global time orders the
#: release, the trace orders a global time's rows, flags and trace decide invalidations.
BARRIER_COLUMNS = ("ts", "front", "trace", "flags")

#: A released row's meta and determinant; what ``columns=value`` leaves out (the rest is the
#: payload: a graph's ``value``, the payload columns of a front written directly).
META_COLUMNS = ("ts", "front", "trace", "flags", "source", "position", "sink")


def written_columns(choice: str, names: Sequence[str]) -> tuple[str, ...] | None:
    """The columns a sink writes of released rows with columns ``names``; None: every one.

    >>> written_columns("value,time", ["ts", "front", "trace", "flags", "sink", "value"])
    ('ts', 'front', 'value')
    >>> written_columns("value", ["ts", "front", "source", "position", "key", "value"])
    ('key', 'value')
    """
    if choice == "all":
        return None
    payload = tuple(name for name in names if name not in META_COLUMNS)
    return payload if choice == "value" else ("ts", "front", *payload)


def kept_columns(columns: Sequence[str] | None, names: Sequence[str]) -> list[str] | None:
    """What a write task keeps of rows with columns ``names`` when the sink writes ``columns``.

    None (all) when it writes every column; else what the barrier reads and what is written:
    the others are dropped before anything stages or sorts them.

    >>> kept_columns(("value",), ["ts", "front", "trace", "flags", "source", "value"])
    ['ts', 'front', 'trace', 'flags', 'value']
    """
    if columns is None:
        return None
    return [name for name in names if name in BARRIER_COLUMNS or name in columns]


def released_form(rows: pa.Table, columns: Sequence[str] | None) -> pa.Table:
    """``rows`` as a sink writes them: released traces and flags, only ``columns`` (None: all).

    The barrier orders and invalidates by the rows' own traces and flags; what it releases
    is a function of the input alone: each trace's lineage (:func:`lineage_column`: the
    logical times, which count a grouping's replays, set to 0; the order of a global time's
    released rows and their distinctness are kept) and no may-invalidate flag (a released row
    is valid, whatever replays made it), as the reference runtime releases them.
    """
    if columns is not None:
        rows = rows.select(list(columns))
    names = rows.column_names
    if "trace" in names:
        rows = rows.set_column(names.index("trace"), "trace", lineage_column(rows["trace"]))
    if "flags" in names:
        flags = pc.bit_wise_and(rows["flags"], pa.scalar(~MAY_INVALIDATE, rows["flags"].type))
        rows = rows.set_column(names.index("flags"), "flags", flags)
    return rows


@dataclass(frozen=True)
class ReleasedRows:
    """What a sink's query releases, known at query start: for checks of the destination.

    ``input``: the Spark schema of the rows the sink's tasks get; ``staged``: whether they
    run a graph's keyed stage (``write_stream``), whose released rows have the columns
    ``RELEASED_COLUMNS``; ``columns``: the columns written (None: all); ``choice`` and
    ``option``: the ``columns`` option's value and name, for messages.
    """

    input: StructType
    staged: bool
    columns: tuple[str, ...] | None
    choice: str
    option: str = "columns"

    def schema(self) -> pa.Schema:
        """The Arrow schema of the rows ``SinkOutput.release`` gets (and parts hold).

        Types and nullability as the rows declare them: Spark's (in Arrow, as Spark hands
        them to the tasks), or the item rows' for a keyed stage's output.
        """
        if self.staged:
            by_name = {field.name: field for field in ITEM_FIELDS}
            fields = [by_name["to" if n == "sink" else n].with_name(n) for n in RELEASED_COLUMNS]
        else:
            from pyspark.sql.pandas.types import to_arrow_schema

            fields = list(to_arrow_schema(self.input, timezone="UTC"))
        named = {field.name: field for field in fields}
        return pa.schema([named[n] for n in self.columns or [f.name for f in fields]])


def _released(items: pa.RecordBatch, names: Sequence[str] = RELEASED_COLUMNS) -> pa.RecordBatch:
    """Item rows leaving the last stage (``to`` a sink) as the rows ``apply`` returns.

    ``names``: only these of the released columns (:attr:`BarrierWriter.kept`).
    """
    columns = {name: items.column("to" if name == "sink" else name) for name in names}
    return pa.RecordBatch.from_pydict(columns)


class PartWriter(ABC):
    """A write task's part of a batch, written block by block where readers do not see it.

    Runs in the write task. The blocks come in global-time order (the caller sees to it)
    and all have one schema; ``close`` returns what ``SinkOutput.publish`` needs to make the
    part visible. A retried task writes its part anew, never into an attempt's file.
    """

    @abstractmethod
    def write(self, rows: pa.Table) -> None:
        """Append ``rows`` to the part."""

    @abstractmethod
    def close(self) -> str:
        """Finish the part (still hidden from readers); its name for ``publish``."""

    @abstractmethod
    def abort(self) -> None:
        """Drop what was written: the task failed before the part was finished."""


class BackgroundPart(PartWriter):
    """A part whose writes run on a thread of their own, one at a time, as the task goes on.

    A keyed task releasing every update makes its rows run by run; each run's write (Parquet
    encoding, the file's bytes) then runs while the task makes the next: pyarrow's writers
    and file writes let go of the GIL. Where a Spark stage waits for its longest task, that
    task has a core to itself at its end. Only a task that runs a keyed stage writes so
    (``TaskParts``' ``background``): a read task's rows (a passthrough) leave nothing to
    overlap, and there the thread measured slower. At most one write runs and none waits:
    ``write`` first waits for the one before (the task holds one run more than it did). A
    write that failed raises from the next call; ``close`` and ``abort`` wait for it first.
    """

    def __init__(self, inner: PartWriter) -> None:
        self.inner = inner
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flamestream-part")
        self._running: Future[None] | None = None

    def write(self, rows: pa.Table) -> None:
        """Hand ``rows`` to the thread once the write before them is done."""
        self._wait()
        self._running = self._thread.submit(self.inner.write, rows)

    def close(self) -> str:
        """The last write done, the part finished (an incomplete one is dropped, and raises)."""
        try:
            self._wait()
        except BaseException:  # the part is incomplete: drop the attempt's file
            self.inner.abort()
            raise
        finally:
            self._thread.shutdown()
        return self.inner.close()

    def abort(self) -> None:
        """The last write done or failed, the part dropped."""
        with contextlib.suppress(Exception):  # what it raised: the part is dropped either way
            self._wait()
        self._thread.shutdown()
        self.inner.abort()

    def _wait(self) -> None:
        """Wait for the running write; raise what it raised."""
        running, self._running = self._running, None
        if running is not None:
            running.result()


class ReleasedPart(PartWriter):
    """A part that writes its rows as released (:func:`released_form`).

    The barrier's whole rows in; the written columns (the sink's ``columns`` option), traces
    as lineages, out.
    """

    def __init__(self, inner: PartWriter, columns: Sequence[str] | None) -> None:
        self.inner, self.columns = inner, columns

    def write(self, rows: pa.Table) -> None:
        """Append ``rows`` as released."""
        self.inner.write(released_form(rows, self.columns))

    def close(self) -> str:
        """Finish the part."""
        return self.inner.close()

    def abort(self) -> None:
        """Drop the part."""
        self.inner.abort()


class _CollectedPart(PartWriter):
    """A part written at once by ``SinkOutput.write_part``, for outputs that cannot stream."""

    def __init__(self, output: SinkOutput, batch_id: int, partition_id: int, run: int) -> None:
        self.output, self.batch_id, self.partition_id = output, batch_id, partition_id
        self.run = run
        self.blocks: list[pa.Table] = []

    def write(self, rows: pa.Table) -> None:
        self.blocks.append(rows)

    def close(self) -> str:
        rows = pa.concat_tables(self.blocks)
        return self.output.write_part(self.batch_id, self.partition_id, rows, self.run)

    def abort(self) -> None:
        self.blocks.clear()  # nothing was written yet


class SinkOutput:
    """Where released rows go; one subclass per sink kind. Must be idempotent per batch id."""

    kind: ClassVar[str]

    #: Whether write tasks may release parts of a batch themselves (``release=tasks``).
    supports_task_release: ClassVar[bool] = False

    def check(self) -> None:
        """Probe the destination at query start, after every option was validated."""

    def check_rows(self, released: ReleasedRows) -> None:
        """Fail at query start if the destination cannot hold the ``released`` rows as they are.

        Runs after :meth:`check`. Outputs whose destination keeps a schema of its own (a
        table) compare it here, so that a mismatch stops the query before its first batch.
        """

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Write ``rows`` (sorted by global time) as batch ``batch_id``'s output."""
        raise NotImplementedError

    def write_part(self, batch_id: int, partition_id: int, rows: pa.Table, run: int = 0) -> str:
        """Write a task's part ``run`` of batch ``batch_id`` where readers do not see it yet.

        Returns what :meth:`publish` needs to make it visible. Each task attempt writes its
        own, once.
        """
        raise NotImplementedError

    def open_part(self, batch_id: int, partition_id: int, run: int = 0) -> PartWriter:
        """A task's part ``run`` of batch ``batch_id``, written as its rows come.

        A task writes one part per run of rows in meta order (``TaskParts``): most write
        one. By default the blocks are collected and written by :meth:`write_part` at the
        end; an output that can append to a part streams them.
        """
        return _CollectedPart(self, batch_id, partition_id, run)

    def publish(self, batch_id: int, parts: list[str]) -> None:
        """Make the written ``parts`` batch ``batch_id``'s released output (idempotent).

        Also removes whatever else of the batch is there: parts of attempts not named (killed
        or failed ones, or an earlier run of the batch before a crash).
        """
        raise NotImplementedError

    def discard(self, batch_id: int, parts: list[str]) -> None:
        """Remove written ``parts`` of a batch whose commit was done before (a replay)."""
        raise NotImplementedError

    def prepare(self, marked: int) -> None:
        """Get ready at query start (driver) for the batches after ``marked``.

        ``marked``: the newest batch the sink's commit marked done (-1: none). Called once the
        options are validated and the destination probed (:meth:`check`).
        """

    def committed(self, batch_id: int, replayed: bool) -> None:
        """Tell the output's readers that batch ``batch_id`` is committed (it is marked).

        Step 7 of :meth:`~flamestream.spark.durable.barrier.BarrierStore.commit`: after the
        marker, and again on a replay that finds it (``replayed``), so idempotent.
        """

    def forget_before(self, batch_id: int) -> None:
        """Drop what the output keeps for its readers of batches before ``batch_id`` only."""


def _ready(rows: pa.Table, min_time: GlobalTime) -> pa.Array:
    """Rows a write task may release: below the min-time, not flagged."""
    ready = below(rows, min_time)
    if "flags" in rows.column_names:
        plain = pc.equal(pc.bit_wise_and(rows.column("flags"), MAY_INVALIDATE | TOMBSTONE), 0)
        ready = pc.and_(ready, plain)
    return ready


def fill_parts(
    parts: TaskParts, blocks: Iterable[pa.Table], min_time: GlobalTime
) -> pa.Table | None:
    """Steps 2 and 3 of ``BarrierWriter._release_part``; the rows left for the commit.

    ``blocks``' releasable rows go into ``parts`` in meta order, as they come where they can
    (a keyed stage's runs into one part, a read task's ranges one part each); the others
    are held, and their releasable rows, sorted, go last into a part. What is left for the
    commit: the rows above the min-time or flagged.
    """
    held: list[pa.Table] = []
    for rows in blocks:
        if not rows.num_rows:
            continue
        if not (pc.all(_ready(rows, min_time)).as_py() and parts.stream(rows)):
            held.append(rows)
    if not held:
        return None
    table = pa.concat_tables(held)
    out, rest = ready_and_rest(table, _ready(table, min_time))
    if out.num_rows:
        parts.end(out)
    return rest


def first_meta(rows: pa.Table) -> list[Any] | None:
    """The meta (ts, front[, trace]) of the first of ``rows`` if they are in meta order."""
    columns = [_whole(rows.column(n)) for n in _META if n in rows.column_names]
    if any(column.null_count for column in columns):
        return None
    if rows.num_rows > 1 and not ascending(columns):  # (one row is in order)
        return None
    return [column[0].as_py() for column in columns]


def _whole(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array; a single chunk as it is (combining copies it: 72-byte traces)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


class OrderedPart:
    """A task's part, opened at its first block, that takes blocks in meta order only.

    ``background``: written on a thread of its own (:class:`BackgroundPart`). ``columns``:
    the columns written (None: all); the order is kept by the whole rows' meta all the same.
    """

    def __init__(
        self,
        output: SinkOutput,
        batch_id: int,
        partition_id: int,
        run: int = 0,
        background: bool = False,
        columns: Sequence[str] | None = None,
    ) -> None:
        self.output, self.batch_id, self.partition_id = output, batch_id, partition_id
        self.run, self.background, self.columns = run, background, columns
        self.writer: PartWriter | None = None
        self.rows = 0
        self.last: list[Any] | None = None  # the meta (ts, front[, trace]) of the last row

    def follows(self, first: list[Any]) -> bool:
        """Whether rows whose first meta is ``first`` (and in order) may be appended."""
        return self.last is None or first >= self.last

    def write(self, rows: pa.Table) -> None:
        """Append ``rows``, in meta order and :meth:`follows` the part's last row."""
        if self.writer is None:
            opened: PartWriter = ReleasedPart(
                self.output.open_part(self.batch_id, self.partition_id, self.run), self.columns
            )
            self.writer = BackgroundPart(opened) if self.background else opened
        self.writer.write(rows)
        self.rows += rows.num_rows
        self.last = [rows.column(n)[-1].as_py() for n in _META if n in rows.column_names]

    def close(self) -> str:
        """The part's name, once finished."""
        assert self.writer is not None  # noqa: S101
        return self.writer.close()

    def abort(self) -> None:
        """Drop the part, if begun."""
        if self.writer is not None:
            self.writer.abort()


#: The columns of a row's meta, most significant first (``trace`` where rows carry one).
_META = ("ts", "front", "trace")

#: The most parts a write task streams rows into; rows that fit none are held and, sorted,
#: end a part (or make one more). A read task packs its sources' ranges one after another,
#: each in meta order but overlapping the others in global time: a part per range.
STREAMED_PARTS = 8


class TaskParts:
    """A write task's parts (``release=tasks``): each one in meta order, most tasks one.

    A block in meta order goes into the part whose last row is the latest not after the
    block's first (the tightest fit), else into a new part while fewer than
    :data:`STREAMED_PARTS` are open; else it is held. Each part is a file, sorted on its
    own, as the parts of different tasks are. ``background``: the parts are written on
    threads of their own (the task runs a keyed stage: :class:`BackgroundPart`). ``columns``:
    the columns the parts write (None: all; :func:`written_columns`).
    """

    def __init__(
        self,
        output: SinkOutput,
        batch_id: int,
        partition_id: int,
        background: bool = False,
        columns: Sequence[str] | None = None,
    ) -> None:
        self.output, self.batch_id, self.partition_id = output, batch_id, partition_id
        self.background, self.columns = background, columns
        self.parts: list[OrderedPart] = []

    @property
    def rows(self) -> int:
        """Rows written into the parts."""
        return sum(part.rows for part in self.parts)

    def stream(self, rows: pa.Table) -> bool:
        """Write ``rows`` into a part as they come; False if they are to be held."""
        first = first_meta(rows)
        if first is None:
            return False
        part = self._fitting(first)
        if part is None and len(self.parts) >= STREAMED_PARTS:
            return False
        (part or self._opened()).write(rows)
        return True

    def end(self, rows: pa.Table) -> None:
        """Write sorted ``rows`` (the held ones) after a part's last row, or as a new part."""
        first = first_meta(rows)
        assert first is not None  # noqa: S101 - sorted by the caller
        (self._fitting(first) or self._opened()).write(rows)

    def _fitting(self, first: list[Any]) -> OrderedPart | None:
        fits = [part for part in self.parts if part.follows(first)]
        return max(fits, key=lambda part: part.last or [], default=None)

    def _opened(self) -> OrderedPart:
        part = OrderedPart(
            self.output,
            self.batch_id,
            self.partition_id,
            len(self.parts),
            self.background,
            self.columns,
        )
        self.parts.append(part)
        return part

    def close(self) -> list[str]:
        """The written parts' names, once finished."""
        return [part.close() for part in self.parts if part.rows]

    def abort(self) -> None:
        """Drop every part begun."""
        for part in self.parts:
            part.abort()


def _written(options: OptionReader, choice: str, names: Sequence[str]) -> tuple[str, ...] | None:
    """The ``columns`` option's ``choice``: the columns written of rows with columns ``names``."""
    columns = written_columns(choice, names)
    if columns is not None and not set(columns) - set(META_COLUMNS):  # no payload column
        raise ConfigError(
            options.step,
            options.label("columns"),
            choice,
            "all: the input has no payload column ("
            + ", ".join(names)
            + "), only meta that value and value,time leave out",
        )
    return columns


#: The file in a sink's state folder that records its ``columns`` option.
COLUMNS_FILE = "columns"


def _pin_columns(options: OptionReader, store_url: str, choice: str) -> None:
    """Keep the ``columns`` option of a sink's first run for the life of its checkpoint.

    A batch replayed after a restart must release the same bytes, and the rows buffered by
    the barrier keep the columns of the run that staged them. Until the sink has staged or
    committed anything (a first start that failed before its first batch) the choice may
    still change. A sink state folder without the record was written by a query that wrote
    every column (there was no option then). Runs at query start, on the driver.
    """
    fs, root = filesystem(store_url)
    path = posixpath.join(root, COLUMNS_FILE)
    if not _has_run(fs, root):
        write_atomically(fs, path, choice.encode())
        return
    before = fs.cat_file(path).decode() if fs.exists(path) else "all"
    if before != choice:
        raise ConfigError(
            options.step,
            options.label("columns"),
            choice,
            f"{before}, the columns this checkpoint's sink has released with (a replayed "
            "batch writes the same bytes); start a new checkpoint to change them",
        )


def _has_run(fs: Any, root: str) -> bool:
    """Whether the sink state folder ``root`` holds more than the ``columns`` record."""
    try:
        names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return False
    return any(name != COLUMNS_FILE and not name.startswith(".") for name in names)


class StagedMessage(WriterCommitMessage):
    """A write task's commit message: its staged rows and, with ``release=tasks``, its parts."""

    def __init__(self, part: StagedPart | None, released: Sequence[str] = (), rows: int = 0):
        self.part = part
        self.released = list(released)  #: the task's unpublished output parts
        self.released_rows = rows


class BarrierWriter(DataSourceStreamArrowWriter):
    """The stream writer of every flamestream sink."""

    def __init__(self, output: SinkOutput, options: OptionReader, schema: StructType) -> None:
        #: a graph's last keyed stage, run here on the shuffled rows (``write_stream``)
        stage = options.raw(STAGE_OPTION)
        self.stage: SinkTask | None = unship(stage) if stage else None
        missing = [c for c in REQUIRED_COLUMNS if c not in schema.fieldNames()]
        if missing and self.stage is None:  # a stage's input may be blocks (exec.shuffle.blocks)
            raise ConfigError(
                options.step,
                "input columns",
                ", ".join(schema.fieldNames()),
                "rows with ts and front columns, as format('flamestream') fronts produce",
            )
        self.output = output
        modes = ["commit", "tasks"] if output.supports_task_release else ["commit"]
        self.release_in_tasks = options.choice("release", modes, "commit") == "tasks"
        #: the columns written of each released row (None: all of them)
        names = RELEASED_COLUMNS if self.stage is not None else schema.fieldNames()
        choice = options.name_list("columns", COLUMNS, "all")
        self.columns = _written(options, choice, names)
        #: what the query releases, for the output's start check (``SinkOutput.check_rows``)
        self.released = ReleasedRows(
            schema, self.stage is not None, self.columns, choice, options.label("columns")
        )
        #: the columns a write task keeps of its rows (None: all): what the barrier reads and
        #: what the sink writes; the others are dropped before anything stages or sorts them
        self.kept = kept_columns(self.columns, names)
        if self.stage is not None and self.kept is not None:
            self.stage.keep_only(self.kept)  # the stage need not make what is dropped
        self.checkpoint = options.string("checkpointLocation", required=True)
        self.store = BarrierStore(
            options.string("stateLocation", QueryCheckpoint(self.checkpoint).sink_url)
        )
        _pin_columns(options, self.store.url, choice)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        """Stage this task's rows durably (executors)."""
        setup_worker()
        context = TaskContext.get()
        assert context is not None  # write() runs in a task  # noqa: S101
        batch_id = batch_id_of_task()
        partition_id = context.partitionId()
        if self.stage is not None:  # the graph's keyed stage first, then its released rows
            names = self.kept or RELEASED_COLUMNS
            iterator = (_released(rows, names) for rows in self.stage(iterator))
        elif self.kept is not None:
            iterator = (rows.select(self.kept) for rows in iterator)
        if self.release_in_tasks:
            message = self._release_part(batch_id, partition_id, iterator)
        else:
            batches = list(iterator)
            table = pa.Table.from_batches(batches) if batches else pa.table({})
            message = StagedMessage(self.store.stage(batch_id, partition_id, table))
        crash_point("sink.write", batch_id)
        return message

    def _release_part(
        self, batch_id: int, partition_id: int, blocks: Iterator[pa.RecordBatch]
    ) -> StagedMessage:
        """Write the rows below the batch's min-time as this task's parts; stage the rest.

        1. Read the batch's min-time (in the offset log before the task ran).
        2. Write each block that is releasable whole (below the min-time and not flagged: a
           row flagged may-invalidate or tombstone, a graph's output after a replay, is
           decided across the batch and the buffer, in the commit) and in meta order to a
           part as it comes, after the part's last row (``TaskParts``): a keyed stage yields
           its runs so, and they are not held all at once; a read task's ranges each make a
           part. Hold any other block.
        3. The held rows' releasable ones, sorted, end a part if none sorts before its last
           row, else make one more part.
        4. Close the parts (the commit publishes them) and stage the rest (rows above the
           min-time or flagged), which the commit releases as ``release=commit`` would.
        """
        # 1. the min-time
        min_time = read_min_time(self.checkpoint, batch_id, in_task=True)
        # 2. and 3.
        # a keyed stage's runs are written while the next are made (BackgroundPart)
        parts = TaskParts(
            self.output,
            batch_id,
            partition_id,
            background=self.stage is not None,
            columns=self.columns,
        )
        try:
            rest = fill_parts(parts, (pa.Table.from_batches([b]) for b in blocks), min_time)
        except BaseException:  # a failed task (a step that raised) leaves no half part behind
            parts.abort()
            raise
        # 4. the parts and the rest
        staged = None
        if rest is not None and rest.num_rows:
            staged = self.store.stage(batch_id, partition_id, rest)
        if not parts.rows:
            if staged is None:  # the task had no rows: staged as before, empty
                staged = self.store.stage(batch_id, partition_id, pa.table({}))
            return StagedMessage(staged)
        return StagedMessage(staged, parts.close(), parts.rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Merge the staged rows and release what the min-time allows (driver host)."""
        crash_point("sink.commit.start", batchId)
        staged = [m for m in messages if isinstance(m, StagedMessage)]
        parts = [m.part for m in staged]
        written = sorted(name for m in staged for name in m.released)
        offsets = front_offsets(self.checkpoint, batchId)  # read once: min-time and metrics
        min_time = read_min_time(self.checkpoint, batchId, offsets=offsets)

        def release(batch_id: int, rows: pa.Table | None) -> None:
            if rows is not None:
                self.output.release(batch_id, released_form(rows, self.columns))
            if self.release_in_tasks:
                self.output.publish(batch_id, written)
            crash_point("sink.commit.released", batch_id)

        def committed(batch_id: int, replayed: bool) -> None:
            if replayed and written:  # the batch's new hidden parts: it was released before
                self.output.discard(batch_id, written)
            crash_point("sink.commit.marked", batch_id)
            self.output.committed(batch_id, replayed)

        # the commit protocol, its steps in one place: BarrierStore.commit
        outcome = self.store.commit(
            batchId,
            parts,
            min_time,
            release,
            released_in_tasks=sum(m.released_rows for m in staged),
            committed=committed,
        )
        self._retain(batchId)
        self._push_metrics(outcome, offsets)

    def start(self) -> None:
        """Get the output ready for this query's batches (query start, driver)."""
        self.output.prepare(self.store.newest_marked())

    def _retain(self, batch_id: int) -> None:
        """Drop what no restart can need any more, in step with Spark's own logs.

        Spark keeps ``minBatchesToRetain`` batches of its offset and commit logs; the sink's
        markers, the graph's cached ack tables and the output's old log files of batches
        before the oldest it keeps go (the staging, pending, loop, slot and state files are
        bounded by their own stores). Every :data:`RETAIN_EVERY` batches: a few listings of
        folders that stay small, one a batch on average at most.
        """
        if (batch_id + 1) % RETAIN_EVERY:
            return
        checkpoint = QueryCheckpoint(self.checkpoint)
        before = checkpoint.retained_from(batch_id, KEEP_MARKERS)
        self.store.forget_before(before)
        if loops_enabled(self.checkpoint):
            AckTable(checkpoint.graph_url).collect(before)
        self.output.forget_before(before)

    def _push_metrics(self, outcome: CommitOutcome, offsets: list[dict[str, Any]]) -> None:
        """The barrier's gauges, through the JVM shim if this application runs one."""
        shim = Shim.find()
        if shim is None:
            return
        min_ts = outcome.min_time.ts
        values: dict[str, float] = {
            "batch": outcome.batch_id,
            "releasedRows": outcome.released,
            "bufferedRows": outcome.pending,
            "invalidationsDropped": outcome.dropped,
            "minTimeTs": min_ts,
            "stateBytes": STATE_BYTES.of(self.checkpoint),
        }
        if min_ts > WALL_CLOCK_FLOOR:  # wall-clock ts are µs: how far the min-time trails now
            values["minTimeLagMs"] = max(0.0, (time.time_ns() // 1000 - min_ts) / 1000)
        name = posixpath.basename(self.checkpoint.rstrip("/")) or "query"
        shim.push_metrics(f"sink.{self.output.kind}.{name}", values)
        # the memory the fronts' controllers budget for: found by the ids in this batch's offsets
        memory = {"bufferedRows": values["bufferedRows"], "stateBytes": values["stateBytes"]}
        for offset in offsets:
            controller = offset.get("controller")
            if isinstance(controller, dict) and "id" in controller:
                shim.push_metrics(f"controller.{controller['id']}", memory)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: no commit reads what the attempts staged, and the batch runs again.

        Its staged files go with the batch's staging folder; its hidden parts are removed by
        the batch's next commit (``SinkOutput.publish``).
        """
