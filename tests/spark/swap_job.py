"""Word count with a swappable split (files front -> graph -> files sink), run by the swap tests.

    python -m tests.spark.swap_job <input dir> <output dir> <checkpoint dir>

Trigger.AvailableNow, ``maxRecordsPerTrigger`` and ``clock=logical``: the same input always
makes the same batches and global times (a line's ts is its byte position in its file), so a
run interrupted and restarted must release exactly what an unbroken one does, swap included.
The count is declared (``count``): its split runs in Arrow until the split is swapped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream import Dataflow
from flamestream.graph.mapreduce import count
from flamestream.spark import SparkGraph

from ..crash import job_main

RECORDS_PER_BATCH = 4


def word_count(split: Callable[[str], Any] = str.split) -> Dataflow:
    """lines -> split -> count -> show -> out."""
    flow = Dataflow("swapped_count")
    words = flow.flat_map("split", flow.source("lines"), split)
    counts = count(flow, "count", words)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def shouting() -> Callable[[str], list[str]]:
    """The split swapped in: upper-case words, the short ones left out (a closure, pickled by
    value: workers need not import this module)."""
    return lambda line: [w.upper() for w in line.split() if len(w) > 2]


def start(spark: SparkSession, source: str, out: str, checkpoint: str) -> StreamingQuery:
    """Start the query on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    graph = SparkGraph(word_count(), partitions=2, swappable=True)
    return (
        graph.write_stream(reader, checkpoint_location=checkpoint)
        .option("sink", "files")
        .option("path", out)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    job_main(start)
