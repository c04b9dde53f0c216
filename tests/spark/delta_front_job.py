"""A files front written straight into a Delta table, run as a child by the crash tests.

    python -m tests.spark.delta_front_job <input dir> <table> <checkpoint dir>

Trigger.AvailableNow, ``maxRecordsPerTrigger`` lines per batch, clock=logical: the same input
always makes the same batches, global times and released rows.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..crash import job_main

#: Lines per batch.
RECORDS_PER_BATCH = 5_000


def start(spark: SparkSession, source: str, table: str, checkpoint: str) -> StreamingQuery:
    """Start the query on ``spark``."""
    front = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
        .load()
    )
    writer = (
        front.writeStream.format("flamestream")
        .option("sink", "delta")
        .option("path", table)
        .option("checkpointLocation", checkpoint)
    )
    return writer.trigger(availableNow=True).start()


if __name__ == "__main__":
    job_main(start)
