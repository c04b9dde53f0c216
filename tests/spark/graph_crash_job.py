"""Word count on Spark (files front -> graph -> files sink), run as a child by the crash tests.

    python -m tests.spark.graph_crash_job <input dir> <output dir> <checkpoint dir> [elastic]
        [columns=<the sink's columns option>] [passthrough]

Trigger.AvailableNow with maxRecordsPerTrigger and clock=logical: the same input always makes
the same batches and global times, so an interrupted and restarted run must release exactly
what an unbroken one does. ``elastic``: key ranges move between the two keyed partitions on
every imbalance (the state per slot must survive the crashes too). ``columns=…``: the files
sink's ``columns`` option (default ``all``). ``passthrough``: the empty graph (source straight
to sink) through ``write_stream``, ``release=tasks``: the fronts send the sink its rows in
blocks.
"""

from __future__ import annotations

import sys
from operator import add

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream import Dataflow, map_reduce
from flamestream.spark import SparkGraph, apply_graph
from flamestream.spark.control.key_layout import ElasticPolicy

from ..crash import job_main

RECORDS_PER_BATCH = 4
#: Moves key ranges on any imbalance, even of a few items (the default waits for 200).
EAGER = ElasticPolicy(skew=1.01, even=1.0, min_items=1, gain=0.99)


def word_count() -> Dataflow:
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=add)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def passthrough() -> Dataflow:
    """The empty graph: the source straight to the sink."""
    flow = Dataflow("passthrough")
    flow.sink("out", flow.source("lines"))
    return flow


def start(
    spark: SparkSession,
    source: str,
    out: str,
    checkpoint: str,
    elastic: bool = False,
    columns: str = "all",
    empty: bool = False,
) -> StreamingQuery:
    """Start the query on ``spark`` (``empty``: the passthrough's)."""
    # the reader, not loaded: apply runs the graph's first stage in the front's reads
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    if empty:
        writer = SparkGraph(passthrough()).write_stream(reader, checkpoint_location=checkpoint)
        writer = writer.option("sink", "files").option("path", out).option("release", "tasks")
        return writer.option("columns", columns).trigger(availableNow=True).start()
    return (
        apply_graph(
            word_count(),
            reader,
            checkpoint_location=checkpoint,
            partitions=2,
            elastic=EAGER if elastic else False,
        )
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .option("columns", columns)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    source, out, checkpoint = sys.argv[1:4]
    rest = sys.argv[4:]
    elastic = "elastic" in rest
    columns = next((a.split("=", 1)[1] for a in rest if a.startswith("columns=")), "all")
    empty = "passthrough" in rest
    job_main(lambda spark: start(spark, source, out, checkpoint, elastic, columns, empty))
