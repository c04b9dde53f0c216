"""Connected components on Spark through the loop channel, run as a child by the crash tests.

    python -m tests.spark.loop_crash_job <input dir> <output dir> <checkpoint dir>

Trigger.AvailableNow (which runs until the loop is empty), maxRecordsPerTrigger and
clock=logical: the same input always makes the same batches and global times, so an
interrupted and restarted run must release exactly what an unbroken one does.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.examples.components import components
from flamestream.spark import apply_graph

from ..crash import job_main

RECORDS_PER_BATCH = 3
KEY_PARTITIONS = 2


def start(spark: SparkSession, source: str, out: str, checkpoint: str) -> StreamingQuery:
    """Start the query on ``spark``."""
    df = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
        .load()
    )
    released = apply_graph(
        components(), df, checkpoint_location=checkpoint, partitions=KEY_PARTITIONS
    )
    return (
        released.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    job_main(start)
