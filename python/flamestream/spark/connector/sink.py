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
  commit only publishes the parts of the successful task attempts (a rename) and releases the
  rest (rows above the min-time, buffered earlier) as before. Each part is sorted by global
  time, a batch's parts become visible together, and every row is released once; what is
  given up is one total order over the batch. Outputs that cannot publish parts (Kafka's
  per-batch transaction) support ``commit`` only.
"""

from __future__ import annotations

import posixpath
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
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
from flamestream.spark.durable.barrier import BarrierStore, CommitOutcome, StagedPart
from flamestream.spark.durable.state import STATE_BYTES
from flamestream.spark.exec.items import (
    MAY_INVALIDATE,
    RELEASED_COLUMNS,
    TOMBSTONE,
    ascending,
)
from flamestream.spark.exec.shipping import OPTION as STAGE_OPTION
from flamestream.spark.exec.shipping import unship
from flamestream.spark.exec.worker_setup import setup_worker

#: ts above this (2001 in µs) come from the wall clock, not ``clock=logical``.
WALL_CLOCK_FLOOR = 10**15


#: Columns a barrier sink needs: the global time of every row.
REQUIRED_COLUMNS = ("ts", "front")


def _released(items: pa.RecordBatch) -> pa.RecordBatch:
    """Item rows leaving the last stage (``to`` a sink) as the rows ``apply`` returns."""
    columns = {name: items.column("to" if name == "sink" else name) for name in RELEASED_COLUMNS}
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


class _CollectedPart(PartWriter):
    """A part written at once by ``SinkOutput.write_part``, for outputs that cannot stream."""

    def __init__(self, output: SinkOutput, batch_id: int, partition_id: int) -> None:
        self.output, self.batch_id, self.partition_id = output, batch_id, partition_id
        self.blocks: list[pa.Table] = []

    def write(self, rows: pa.Table) -> None:
        self.blocks.append(rows)

    def close(self) -> str:
        rows = pa.concat_tables(self.blocks)
        return self.output.write_part(self.batch_id, self.partition_id, rows)

    def abort(self) -> None:
        self.blocks.clear()  # nothing was written yet


class SinkOutput:
    """Where released rows go; one subclass per sink kind. Must be idempotent per batch id."""

    kind: ClassVar[str]

    #: Whether write tasks may release parts of a batch themselves (``release=tasks``).
    supports_task_release: ClassVar[bool] = False

    def check(self) -> None:
        """Probe the destination at query start, after every option was validated."""

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Write ``rows`` (sorted by global time) as batch ``batch_id``'s output."""
        raise NotImplementedError

    def write_part(self, batch_id: int, partition_id: int, rows: pa.Table) -> str:
        """Write a task's part of batch ``batch_id`` where readers do not see it yet.

        Returns what :meth:`publish` needs to make it visible. A retried task overwrites it.
        """
        raise NotImplementedError

    def open_part(self, batch_id: int, partition_id: int) -> PartWriter:
        """A task's part of batch ``batch_id``, written as its rows come (:class:`PartWriter`).

        By default the blocks are collected and written by :meth:`write_part` at the end; an
        output that can append to a part streams them.
        """
        return _CollectedPart(self, batch_id, partition_id)

    def publish(self, batch_id: int, parts: list[str]) -> None:
        """Make the written ``parts`` batch ``batch_id``'s released output (idempotent)."""
        raise NotImplementedError

    def discard(self, batch_id: int, parts: list[str]) -> None:
        """Remove written ``parts`` of a batch whose commit was done before (a replay)."""
        raise NotImplementedError


def _ready(rows: pa.Table, min_time: GlobalTime) -> pa.Array:
    """Rows a write task may release: below the min-time, not flagged."""
    ready = below(rows, min_time)
    if "flags" in rows.column_names:
        plain = pc.equal(pc.bit_wise_and(rows.column("flags"), MAY_INVALIDATE | TOMBSTONE), 0)
        ready = pc.and_(ready, plain)
    return ready


def fill_part(
    part: OrderedPart, blocks: Iterable[pa.Table], min_time: GlobalTime
) -> pa.Table | None:
    """Steps 2 and 3 of ``BarrierWriter._release_part``; the rows left for the commit.

    ``blocks``' releasable rows go into ``part`` in meta order, as far as they come so.
    """
    held: list[pa.Table] = []
    for rows in blocks:
        if rows.num_rows and pc.all(_ready(rows, min_time)).as_py() and part.takes(rows):
            part.write(rows)
        elif rows.num_rows:
            held.append(rows)
    if not held:
        return None
    table = pa.concat_tables(held)
    out, rest = ready_and_rest(table, _ready(table, min_time))
    if out.num_rows and part.takes(out):
        part.write(out)
        return rest
    return pa.concat_tables([rest, out]) if out.num_rows else rest


class OrderedPart:
    """A task's part, opened at its first block, that takes blocks in meta order only."""

    def __init__(self, output: SinkOutput, batch_id: int, partition_id: int) -> None:
        self.output, self.batch_id, self.partition_id = output, batch_id, partition_id
        self.writer: PartWriter | None = None
        self.rows = 0
        self.last: list[Any] | None = None  # the meta (ts, front[, trace]) of the last row

    def takes(self, rows: pa.Table) -> bool:
        """Whether ``rows`` are in meta order and none sorts before the part's last row."""
        columns = [rows.column(n).combine_chunks() for n in _META if n in rows.column_names]
        if any(column.null_count for column in columns):
            return False
        if rows.num_rows > 1 and not ascending(columns):  # (one row is in order)
            return False
        return self.last is None or [column[0].as_py() for column in columns] >= self.last

    def write(self, rows: pa.Table) -> None:
        """Append ``rows`` (which it :meth:`takes`)."""
        if self.writer is None:
            self.writer = self.output.open_part(self.batch_id, self.partition_id)
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


class StagedMessage(WriterCommitMessage):
    """A write task's commit message: its staged rows and, with ``release=tasks``, its part."""

    def __init__(self, part: StagedPart | None, released: str | None = None, rows: int = 0):
        self.part = part
        self.released = released  #: the task's unpublished output part, if it wrote one
        self.released_rows = rows


class BarrierWriter(DataSourceStreamArrowWriter):
    """The stream writer of every flamestream sink."""

    def __init__(self, output: SinkOutput, options: OptionReader, schema: StructType) -> None:
        missing = [c for c in REQUIRED_COLUMNS if c not in schema.fieldNames()]
        if missing:
            raise ConfigError(
                options.step,
                "input columns",
                ", ".join(schema.fieldNames()),
                "rows with ts and front columns, as format('flamestream') fronts produce",
            )
        self.output = output
        modes = ["commit", "tasks"] if output.supports_task_release else ["commit"]
        self.release_in_tasks = options.choice("release", modes, "commit") == "tasks"
        self.checkpoint = options.string("checkpointLocation", required=True)
        self.store = BarrierStore(
            options.string("stateLocation", QueryCheckpoint(self.checkpoint).sink_url)
        )
        #: a graph's last keyed stage, run here on the shuffled rows (``write_stream``)
        stage = options.raw(STAGE_OPTION)
        self.stage = unship(stage) if stage else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        """Stage this task's rows durably (executors)."""
        setup_worker()
        context = TaskContext.get()
        assert context is not None  # write() runs in a task  # noqa: S101
        batch_id = batch_id_of_task()
        partition_id = context.partitionId()
        if self.stage is not None:  # the graph's keyed stage first, then its released rows
            iterator = (_released(rows) for rows in self.stage(iterator))
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
        """Write the rows below the batch's min-time as this task's part; stage the rest.

        1. Read the batch's min-time (in the offset log before the task ran).
        2. Write each block that is releasable whole (below the min-time and not flagged: a
           row flagged may-invalidate or tombstone, a graph's output after a replay, is
           decided across the batch and the buffer, in the commit), in meta order and not
           before the part's last row, to the part as it comes: a keyed stage yields its
           runs so, and they are not held all at once. Hold any other block.
        3. The held rows' releasable ones, sorted, end the part if none sorts before its last
           row; else they are staged with the rest, and the commit releases them as
           ``release=commit`` would.
        4. Close the part (the commit publishes it) and stage the rest.
        """
        # 1. the min-time
        min_time = read_min_time(self.checkpoint, batch_id, in_task=True)
        # 2. and 3.
        part = OrderedPart(self.output, batch_id, partition_id)
        try:
            rest = fill_part(part, (pa.Table.from_batches([b]) for b in blocks), min_time)
        except BaseException:  # a failed task (a step that raised) leaves no half part behind
            part.abort()
            raise
        # 4. the part and the rest
        staged = None
        if rest is not None and rest.num_rows:
            staged = self.store.stage(batch_id, partition_id, rest)
        if not part.rows:
            if staged is None:  # the task had no rows: staged as before, empty
                staged = self.store.stage(batch_id, partition_id, pa.table({}))
            return StagedMessage(staged)
        return StagedMessage(staged, part.close(), part.rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Merge the staged rows and release what the min-time allows (driver host)."""
        crash_point("sink.commit.start", batchId)
        staged = [m for m in messages if isinstance(m, StagedMessage)]
        parts = [m.part for m in staged]
        written = sorted(m.released for m in staged if m.released is not None)
        offsets = front_offsets(self.checkpoint, batchId)  # read once: min-time and metrics
        min_time = read_min_time(self.checkpoint, batchId, offsets=offsets)

        def release(batch_id: int, rows: pa.Table | None) -> None:
            if rows is not None:
                self.output.release(batch_id, rows)
            if self.release_in_tasks:
                self.output.publish(batch_id, written)
            crash_point("sink.commit.released", batch_id)

        outcome = self.store.commit(
            batchId,
            parts,
            min_time,
            release,
            released_in_tasks=sum(m.released_rows for m in staged),
        )
        if outcome.skipped and written:
            self.output.discard(batchId, written)
        crash_point("sink.commit.marked", batchId)
        self._push_metrics(outcome, offsets)

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
        """Nothing to undo: staged parts are overwritten when the batch runs again."""
