"""A files -> files flamestream query run as a child process by the crash tests.

    python -m tests.spark.crash_job <input dir> <output dir> <checkpoint dir>

Runs with Trigger.AvailableNow and maxRecordsPerTrigger, so the same input always makes the
same batches; ``clock=logical`` makes the global times depend on the input alone.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from flamestream.spark import faults

#: Records per batch: with CRASH_INPUT below, three batches.
RECORDS_PER_BATCH = 10


def main(source: str, out: str, checkpoint: str) -> None:
    faults.arm()  # a crash point anywhere kills this driver's whole process group
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
        .load()
    )
    query = (
        df.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
