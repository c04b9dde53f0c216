"""A files -> files flamestream query run as a child process by the crash tests.

    python -m tests.spark.crash_job <input dir> <output dir> <checkpoint dir> [<release>]
        [<read tasks>] [--master=<master>]

With a master such as ``local-cluster[2,1,1024]``, executors are separate JVMs; the
``FLAMESTREAM_CRASH_*`` variables of this process are then handed to them as executor
environment, so a crash point can kill one executor (see flamestream.spark.connector.faults).

Runs with Trigger.AvailableNow and maxRecordsPerTrigger, so the same input always makes the
same batches; ``clock=logical`` makes the global times depend on the input alone. ``release``
is the sink's release mode (``commit`` or ``tasks``); ``read tasks`` the front's ``readTasks``
(how a batch's sources are packed into tasks: with ``release=tasks``, the shape of its parts).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..crash import job_main

#: Records per batch: with the crash tests' input (27 lines), three batches.
RECORDS_PER_BATCH = 10


def start(
    spark: SparkSession,
    source: str,
    out: str,
    checkpoint: str,
    release: str = "commit",
    read_tasks: str = "",
) -> StreamingQuery:
    """Start the query on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    df = (reader.option("readTasks", read_tasks) if read_tasks else reader).load()
    return (
        df.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", out)
        .option("release", release)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    job_main(start)
