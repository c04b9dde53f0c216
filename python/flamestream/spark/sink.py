"""The generic barrier sink: stage on executors, release once per batch on the driver.

Delivery guarantee: **exactly once**. Every row a query's fronts admitted is released once,
in global-time order within a batch's release, only when the min-time has passed it, even if
the query is killed at any moment and restarted from its checkpoint: staged rows and the
buffer are durable, a batch's commit is deterministic and marked done, and outputs are named
by batch id so a repeated release overwrites instead of duplicating.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from flamestream.errors import ConfigError
from flamestream.spark.barrier import BarrierStore, StagedPart, read_min_time
from flamestream.spark.config import OptionReader
from flamestream.spark.faults import crash_point
from flamestream.spark.front import batch_id_of_task

#: Columns a barrier sink needs: the global time of every row.
REQUIRED_COLUMNS = ("ts", "front")


class SinkOutput:
    """Where released rows go; one subclass per sink kind. Must be idempotent per batch id."""

    kind: ClassVar[str]

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Write ``rows`` (sorted by global time) as batch ``batch_id``'s output."""
        raise NotImplementedError


class StagedMessage(WriterCommitMessage):
    """A write task's commit message: its staged part."""

    def __init__(self, part: StagedPart) -> None:
        self.part = part


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
        self.checkpoint = options.string("checkpointLocation", required=True)
        self.store = BarrierStore(
            options.string("stateLocation", self.checkpoint.rstrip("/") + "/flamestream-sink")
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        """Stage this task's rows durably (executors)."""
        context = TaskContext.get()
        assert context is not None  # write() runs in a task  # noqa: S101
        batch_id = batch_id_of_task()
        batches = list(iterator)
        table = pa.Table.from_batches(batches) if batches else pa.table({})
        message = StagedMessage(self.store.stage(batch_id, context.partitionId(), table))
        crash_point("sink.write", batch_id)
        return message

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Merge the staged rows and release what the min-time allows (driver host)."""
        crash_point("sink.commit.start", batchId)
        parts = [m.part for m in messages if isinstance(m, StagedMessage)]
        min_time = read_min_time(self.checkpoint, batchId)

        def release(batch_id: int, rows: pa.Table) -> None:
            self.output.release(batch_id, rows)
            crash_point("sink.commit.released", batch_id)

        self.store.commit(batchId, parts, min_time, release)
        crash_point("sink.commit.marked", batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: staged parts are overwritten when the batch runs again."""
