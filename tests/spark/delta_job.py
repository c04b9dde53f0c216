"""Word count on Spark into a Delta table (or into files), run as a child by the crash tests.

    python -m tests.spark.delta_job <input dir> <output> <checkpoint dir> [<sink>]

The graph and its batches are :mod:`tests.spark.graph_crash_job`'s (Trigger.AvailableNow,
maxRecordsPerTrigger, clock=logical: the same input always makes the same batches and global
times); the sink is ``delta`` (default: ``<output>`` is the table) or ``files``. ``start``'s
``options`` are further sink options (a table on S3: ``storageOptions``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.spark import apply_graph

from ..crash import job_main
from .graph_crash_job import RECORDS_PER_BATCH, word_count


def start(
    spark: SparkSession,
    source: str,
    out: str,
    checkpoint: str,
    sink: str = "delta",
    options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start the query on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    writer = (
        apply_graph(word_count(), reader, checkpoint_location=checkpoint, partitions=2)
        .writeStream.format("flamestream")
        .option("sink", sink)
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .options(**(options or {}))
    )
    return writer.trigger(availableNow=True).start()


if __name__ == "__main__":
    job_main(start)
