"""Word count on several files fronts, run as a child driver on a standalone cluster.

    python -m tests.cluster.wordcount_job <master> <work dir> [<work dir> ...]

Runs one query per work directory, one after the other in one Spark application: input from
``<work>/in``, output to ``<work>/out``, checkpoint in ``<work>/ck``. The graph releases each
word's running count (sink ``out``) and every line as read (sink ``lines``: the global times
the fronts stamped, for the reference runtime). Each input file is a front;
``maxRecordsPerTrigger`` and ``clock=logical`` make the same input give the same batches and
global times on any master, so runs on ``local[2]`` and on a ``spark://`` cluster must release
the same bytes.

If ``<work>/gate`` exists, the task splitting the line :data:`GATE_LINE` stops there (once: a
file in the gate directory says it did) and writes its process id to ``<work>/gate/reached``,
then waits up to :data:`GATE_WAIT_S` seconds for the test to kill its Worker; its retry
passes. After each query the driver writes its progress (batch id, start, duration) to
``<work>/progress.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from operator import add
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream import Dataflow, map_reduce
from flamestream.spark import apply_graph
from flamestream.testing.standalone import app_conf

from ..sessions import local_session

RECORDS_PER_BATCH = 4
GATE_LINE = "gate here"
GATE_WAIT_S = 120.0


def gated_split(gate: str | None) -> Callable[[str], list[str]]:
    """``str.split``, which stops in the task that splits :data:`GATE_LINE` first (see above)."""

    def split(line: str) -> list[str]:
        if gate is not None and line == GATE_LINE:
            try:  # the first task to get here waits; its retry (or any other) goes on
                os.close(os.open(os.path.join(gate, "once"), os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return line.split()
            reached = os.path.join(gate, "reached")
            with open(reached + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.replace(reached + ".tmp", reached)
            deadline = time.monotonic() + GATE_WAIT_S
            while time.monotonic() < deadline:  # the Worker's kill ends this process
                time.sleep(0.05)
        return line.split()

    return split


def word_count(gate: str | None = None) -> Dataflow:
    """Each word's running count (``out``), and every line as read (``lines``)."""
    flow = Dataflow("wordcount")
    to_split, to_show = flow.broadcast("both", flow.source("text"), 2)
    words = flow.flat_map("split", to_split, gated_split(gate))
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=add)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    flow.sink("lines", flow.map("line", to_show, lambda line: line))
    return flow


def start(
    spark: SparkSession, source: str, out: str, checkpoint: str, gate: str | None = None
) -> StreamingQuery:
    """Start the query on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    return (
        apply_graph(word_count(gate), reader, checkpoint_location=checkpoint, partitions=2)
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def progress(query: StreamingQuery) -> list[dict[str, object]]:
    """Per batch: its id, start (ISO time) and duration (ms)."""
    return [
        {
            "batchId": p["batchId"],
            "timestamp": p["timestamp"],
            "durationMs": p["durationMs"].get("triggerExecution"),
        }
        for p in query.recentProgress
    ]


def main(master: str, *works: str) -> None:
    """Run the query of each work directory on ``master`` in turn, each to its end."""
    conf = app_conf() if master.startswith("spark://") else {}
    spark = local_session(master, conf)
    for work in map(Path, works):
        gate = str(work / "gate") if (work / "gate").is_dir() else None
        paths = (str(work / d) for d in ("in", "out", "ck"))
        query = start(spark, *paths, gate)
        query.awaitTermination()
        (work / "progress.json").write_text(json.dumps(progress(query)))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
