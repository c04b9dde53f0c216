"""A fused graph query's progress counts the records its fronts read, not the rows they send.

A front running a graph's first stage sends items, packed rows or blocks (one per key
partition), so Spark's ``numInputRows`` counts those. ``apply`` adds the observed metric
``flamestream.records``: every listener's progress events carry the true count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from flamestream import Dataflow, map_reduce
from flamestream.spark import SparkGraph

from .conftest import released, run_writer, write_lines

LINES = [f"w{n % 7} w{n % 5} w{n % 3}" for n in range(120)] + ["", "   "] * 5
LIMIT = 25


class Recorder(StreamingQueryListener):
    """Every progress event this driver's listeners get, as they get them."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to keep."""

    def onQueryProgress(self, event: Any) -> None:
        """Keep the progress."""
        self.events.append(event.progress)

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to keep."""

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to keep."""


def word_count() -> Dataflow:
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=int.__add__)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def nothing_kept() -> Dataflow:
    """A stateless graph whose first stage sends nothing: the records still count."""
    flow = Dataflow("none")
    flow.sink("out", flow.filter("none", flow.source("lines"), lambda line: line == "x"))
    return flow


def passthrough() -> Dataflow:
    """The empty graph: write_stream's fronts send the sink their rows in blocks."""
    flow = Dataflow("passthrough")
    flow.sink("out", flow.source("lines"))
    return flow


CASES = {
    "every-update-blocks": (word_count, "every"),
    "passthrough-blocks": (passthrough, "every"),
    "latest-combined-blocks": (word_count, "latest"),
    "nothing-sent": (nothing_kept, "every"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_fused_querys_progress_counts_records(spark: SparkSession, tmp_path: Path, case: str):
    build, release = CASES[case]
    write_lines(tmp_path / "in" / "a.txt", LINES[::2])
    write_lines(tmp_path / "in" / "b.txt", LINES[1::2])
    graph = SparkGraph(build(), release=release)
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(tmp_path / "in"))
        .option("clock", "logical")
        .option("maxRecordsPerTrigger", LIMIT)
    )
    checkpoint = str(tmp_path / "ck")
    listener = Recorder()
    spark.streams.addListener(listener)
    try:
        if graph.keyed or graph.plan.passthrough:
            query = run_writer(graph.write_stream(reader, checkpoint_location=checkpoint), tmp_path)
        else:
            rows = graph.apply(reader, checkpoint_location=checkpoint)
            writer = rows.writeStream.format("flamestream").option("checkpointLocation", checkpoint)
            query = run_writer(writer, tmp_path / "out")
        seen = [p.observedMetrics["flamestream"]["records"] for p in query.recentProgress]
        sent = [p.numInputRows for p in query.recentProgress]
    finally:
        spark.streams.removeListener(listener)
    assert sum(seen) == len(LINES)  # every record read counted once
    assert max(seen) <= LIMIT and len([s for s in seen if s]) >= len(LINES) // LIMIT
    if case == "nothing-sent":
        assert not released(tmp_path / "out") and sum(sent) >= 1  # rows that only count
    else:
        assert sum(sent) < len(LINES) / 2  # Spark's own count: the blocks sent
        assert released(tmp_path)
    # a listener's events carry the same counts (Spark posts them asynchronously)
    heard = {p.batchId: p.observedMetrics["flamestream"]["records"] for p in listener.events}
    want = {p.batchId: p.observedMetrics["flamestream"]["records"] for p in query.recentProgress}
    assert {b: heard[b] for b in heard if b in want} == {b: want[b] for b in heard if b in want}
    assert heard
