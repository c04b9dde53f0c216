"""A files -> files flamestream query run as a child process by the crash tests.

    python -m tests.spark.crash_job <input dir> <output dir> <checkpoint dir> [<master>] [<release>]

With a master such as ``local-cluster[2,1,1024]``, executors are separate JVMs; the
``FLAMESTREAM_CRASH_*`` variables of this process are then handed to them as executor
environment, so a crash point can kill one executor (see flamestream.spark.faults).

Runs with Trigger.AvailableNow and maxRecordsPerTrigger, so the same input always makes the
same batches; ``clock=logical`` makes the global times depend on the input alone. ``release``
is the sink's release mode (``commit`` or ``tasks``).
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from flamestream.spark import faults

#: Records per batch: with CRASH_INPUT below, three batches.
RECORDS_PER_BATCH = 10


def main(
    source: str, out: str, checkpoint: str, master: str = "local[2]", release: str = "commit"
) -> None:
    faults.arm()  # a crash point anywhere kills this driver's whole process group
    builder = (
        SparkSession.builder.master(master)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    for name in (faults.ENV, faults.SCOPE_ENV, faults.ONCE_ENV):
        if name in os.environ:
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    spark = builder.getOrCreate()
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
        .option("release", release)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
