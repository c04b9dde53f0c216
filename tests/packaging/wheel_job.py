"""Word count on local Spark, run by the wheel's virtualenv from outside the checkout.

``test_wheel.py`` copies this file out of the checkout and runs it with the virtualenv's
Python: everything it imports comes from the installed wheel. Prints one ``RESULT {...}`` line.

    python wheel_job.py <work dir>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import flamestream
from flamestream import Dataflow, map_reduce
from flamestream.jvm import Shim, locate_jar
from flamestream.spark import SparkGraph

#: Three small files for the files front: repeated words, an empty line.
FILES = {
    "a.txt": "the quick brown fox\njumps over the lazy dog\n\nthe end\n",
    "b.txt": "a fox a dog\na b c a\n",
    "c.txt": "lazy lazy fox\nthe quick one\n",
}


def word_count() -> Dataflow:
    """Split lines, count words (map_reduce: a grouping), render ``word=count``."""
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=int.__add__)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def main(base: Path) -> dict[str, Any]:
    for name, text in FILES.items():
        (base / "in").mkdir(parents=True, exist_ok=True)
        (base / "in" / name).write_text(text)
    builder = SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
    builder = builder.config("spark.ui.enabled", "false").config(
        "spark.ui.showConsoleProgress", "false"
    )
    spark = flamestream.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(base / "in"))
        .option("clock", "logical")
        .option("maxRecordsPerTrigger", 6)  # two batches: counts carried from one to the next
    )
    graph = SparkGraph(word_count(), partitions=2)
    query = (
        graph.write_stream(reader, checkpoint_location=str(base / "ck"))
        .option("sink", "files")
        .option("path", str(base / "out"))
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(300)
    if query.exception() or not finished:
        raise RuntimeError(f"the query failed or did not finish: {query.exception()}")
    parts = sorted((base / "out").glob("part-*.jsonl"))
    shim = Shim.of_session(spark)
    jvm_env = spark.sparkContext._jvm.java.lang.System  # type: ignore[union-attr]
    out = {
        "flamestream": flamestream.__file__,
        "jar": str(locate_jar()),
        "lines": [line for name in sorted(FILES) for line in FILES[name].splitlines()],
        "released": [
            json.loads(line)["value"] for p in parts for line in p.read_text().splitlines()
        ],
        "gauges": shim.request("gauges")["gauges"] if shim is not None else None,
        "runnerPython": jvm_env.getenv("PYSPARK_DRIVER_PYTHON"),
        "workerPython": spark.sparkContext.pythonExec,
        "plugins": spark.sparkContext.getConf().get("spark.plugins"),
    }
    spark.stop()
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))))
