"""Two queries chained by a Delta table, run one after the other as a child by the crash tests.

    python -m tests.spark.delta_pipeline_job <input dir> <table> <output dir> <work dir>

Query A is :mod:`tests.spark.delta_job`'s word count (files front, graph, ``delta`` sink into
``<table>``, checkpoint ``<work>/ck-a``). Query B reads that table with the ``delta`` front from
version 0 (``startingVersion``: each of A's commits is a version, read in its own order; no
snapshot, whose file order would depend on delta-rs's random file names), ``clock=logical``,
:data:`ROWS_PER_BATCH` rows per batch, through the empty graph into a ``files`` sink with
``release=tasks`` (checkpoint ``<work>/ck-b``). Both run ``Trigger.AvailableNow`` to their end.
A's sink and B's sink have crash points of their own (``sink.delta.writing``,
``sink.commit.published``) besides the shared ones, which A reaches first.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.spark import SparkGraph

from ..crash import job_main
from . import delta_job
from .graph_crash_job import passthrough

#: Rows of A's table per batch of B.
ROWS_PER_BATCH = 12


def start_a(spark: SparkSession, source: str, table: str, work: str) -> StreamingQuery:
    """Query A on ``spark``."""
    return delta_job.start(spark, source, table, f"{work}/ck-a")


def start_b(spark: SparkSession, table: str, out: str, work: str) -> StreamingQuery:
    """Query B on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "delta")
        .option("path", table)
        .option("startingVersion", 0)
        .option("clock", "logical")
        .option("maxRecordsPerTrigger", ROWS_PER_BATCH)
    )
    graph = SparkGraph(passthrough())
    writer = graph.write_stream(reader, checkpoint_location=f"{work}/ck-b")
    writer = writer.option("sink", "files").option("path", out).option("release", "tasks")
    return writer.trigger(availableNow=True).start()


def both(spark: SparkSession, source: str, table: str, out: str, work: str) -> StreamingQuery:
    """Run A to its end, then start B (the child job waits for B)."""
    first = start_a(spark, source, table, work)
    first.awaitTermination()
    if first.exception():
        raise first.exception()  # type: ignore[misc]
    return start_b(spark, table, out, work)


if __name__ == "__main__":
    job_main(both)
