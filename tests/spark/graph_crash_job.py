"""Word count on Spark (files front -> graph -> files sink), run as a child by the crash tests.

    python -m tests.spark.graph_crash_job <input dir> <output dir> <checkpoint dir> [--elastic]
        [--columns=<the sink's columns option>] [--empty] [--sketched]

Trigger.AvailableNow with maxRecordsPerTrigger and clock=logical: the same input always makes
the same batches and global times, so an interrupted and restarted run must release exactly
what an unbroken one does. ``--elastic``: key ranges move between the two keyed partitions on
every imbalance (the state per slot must survive the crashes too). ``--columns=…``: the files
sink's ``columns`` option (default ``all``). ``--empty``: the empty graph (source straight
to sink) through ``write_stream``, ``release=tasks``: the fronts send the sink its rows in
blocks. ``--sketched``: approximate aggregations instead of the word count (:func:`sketches`),
rendered by ``render_json``: the sketches are keyed state, their bytes released.
"""

from __future__ import annotations

import zlib
from operator import add

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream import Dataflow, distinct_count, heavy_hitters, map_reduce, quantiles
from flamestream.approx import render_json
from flamestream.spark import SparkGraph, apply_graph
from flamestream.spark.control.key_layout import ElasticPolicy

from ..crash import job_main

RECORDS_PER_BATCH = 4
#: How many values each letter gives the quantiles (:func:`readings`).
READINGS = 8
#: Moves key ranges on any imbalance, even of a few items (the default waits for 200).
EAGER = ElasticPolicy(skew=1.01, even=1.0, min_items=1, gain=0.99)


def word_count() -> Dataflow:
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=add)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def letters(line: str) -> list[tuple[str, int, str]]:
    """``(line, position, letter)`` for each letter of ``line``."""
    return [(line, i, ch) for i, ch in enumerate(line) if not ch.isspace()]


def spot(letter: tuple[str, int, str]) -> str:
    """Where a letter stands: a value of its own for each letter of the input."""
    return f"{letter[0]}/{letter[1]}"


def vowel(letter: tuple[str, int, str]) -> bool:
    """Whether the letter is a vowel."""
    return letter[2] in "aeiou"


def readings(letter: tuple[str, int, str]) -> list[tuple[str, int]]:
    """READINGS distinct numbers for a letter, keyed by the letter: enough values for KLL
    sketches of k=8 to compact dozens of times on this small input, under a dozen keys that
    spread over the slots. crc32: the same in every process (unlike ``hash`` of a str)."""
    return [(letter[2], zlib.crc32(f"{spot(letter)}/{j}".encode())) for j in range(READINGS)]


def sketches() -> Dataflow:
    """Approximate aggregations of the input's letters, each small enough to leave its exact
    mode on this input: an HLL and a theta distinct count, KLL quantiles that compact (k=8)
    and frequent items that purge (8 counters, more letters than that)."""
    flow = Dataflow("sketches")
    marks = flow.flat_map("letters", flow.source("lines"), letters)
    to_hll, to_theta, to_quantiles, to_hot = flow.broadcast("each", marks, 4)
    hll = distinct_count(flow, "hll", to_hll, key=vowel, value=spot, sketch="hll", lg_k=4)
    theta = distinct_count(flow, "theta", to_theta, key=vowel, value=spot, sketch="theta", lg_k=5)
    q = quantiles(
        flow,
        "quantiles",
        flow.flat_map("readings", to_quantiles, readings),
        ranks=(0.1, 0.5, 0.9),
        key=lambda r: r[0],
        value=lambda r: r[1],
        k=8,
    )
    hot = heavy_hitters(flow, "hot", to_hot, key=lambda m: "all", value=lambda m: m[2], lg_max_k=3)
    for name, estimates in (("hll", hll), ("theta", theta), ("quantiles", q), ("hot", hot)):
        flow.sink(f"{name}_out", estimates)
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
    sketched: bool = False,
) -> StreamingQuery:
    """Start the query on ``spark`` (``empty``: the passthrough's; ``sketched``: the
    approximate aggregations')."""
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
    rendered = {"render": render_json} if sketched else {}
    return (
        apply_graph(
            sketches() if sketched else word_count(),
            reader,
            **rendered,
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
    job_main(start)
