"""History then live: word count over an archive, then its live file, run as a crash child.

    python -m tests.spark.history_crash_job <history dir> <live dir> <output dir> <checkpoint dir>

Trigger.AvailableNow, ``history.maxRecordsPerTrigger`` 3 and ``maxRecordsPerTrigger`` 2 with
clock=logical: the same input always makes the same batches (backfill in batches 0 and 1, the
switch in batch 2, live after it) and global times.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.spark import apply_graph

from ..crash import job_main
from .graph_crash_job import word_count


def start(
    spark: SparkSession, history: str, live: str, out: str, checkpoint: str
) -> StreamingQuery:
    """Start the query on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", live)
        .option("maxRecordsPerTrigger", 2)
        .option("clock", "logical")
        .option("history", "files")
        .option("history.path", history)
        .option("history.format", "json")
        .option("history.boundary", "position")
        .option("history.maxRecordsPerTrigger", 3)
    )
    return (
        apply_graph(word_count(), reader, checkpoint_location=checkpoint, partitions=2)
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    job_main(start)
