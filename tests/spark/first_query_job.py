"""A new user's first graph query, in a fresh driver set up by ``flamestream.configure``: the
key partitions ``P`` it runs with, and what ``describe()`` says about them. Prints one JSON
line (``RESULT {...}``) for ``test_first_query.py`` to check.

    python -m tests.spark.first_query_job <work dir>

The README's word count (``flat_map`` + ``map_reduce`` with lambdas) through ``write_stream``
from a files front, run with ``Trigger.AvailableNow``:

* ``configured``: no ``partitions=``, nothing set by hand: ``configure``'s default;
* ``given``: ``partitions=3`` on a new checkpoint, then the same checkpoint again without it
  (``recorded``): the checkpoint keeps its 3;
* ``user``: ``spark.sql.shuffle.partitions=4`` set on the session: a new checkpoint takes 4,
  the one that recorded 3 is refused naming the setting.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import flamestream
from flamestream import Dataflow, map_reduce
from flamestream.jvm import Shim
from flamestream.spark import SparkGraph


def readme_flow() -> Dataflow:
    """The README's first graph."""
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=lambda a, b: a + b)
    flow.sink("counts", counts)
    return flow


def run(spark: SparkSession, graph: SparkGraph, source: Path, out: Path, ck: Path) -> str:
    """The graph from ``source`` to ``out`` until the input is read; the query's id."""
    front = spark.readStream.format("flamestream").option("front", "files")
    front = front.option("path", str(source))
    writer = graph.write_stream(front, checkpoint_location=str(ck))
    query = writer.option("sink", "files").option("path", str(out))
    started = query.trigger(availableNow=True).start()
    started.awaitTermination(300)
    if started.exception() is not None:
        raise started.exception()  # type: ignore[misc]
    return str(started.id)


def stage_widths(shim: Shim, query: str) -> list[int]:
    """Per stage of the query's batches, its tasks (the shim's task listener)."""
    return [len(stage["tasks"]) for b in shim.tasks().get(query, []) for stage in b["stages"]]


def main(work: Path) -> dict[str, Any]:
    source = work / "in"
    source.mkdir(parents=True)
    (source / "a.txt").write_text("a b\nb\na a b a\n")
    out: dict[str, Any] = {}
    graph = SparkGraph(readme_flow())
    out["beforeSession"] = graph.describe()
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    spark = flamestream.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    shim = Shim.of_session(spark)
    assert shim is not None, "configure did not enable the shim"
    out["shufflePartitions"] = spark.conf.get("spark.sql.shuffle.partitions")
    out["sessionOnly"] = graph.describe()
    query = run(spark, graph, source, work / "out", work / "ck")
    out["configured"] = {
        "describe": graph.describe(),
        "layout": json.loads((work / "ck" / "flamestream-graph" / "layout.json").read_text()),
        "widths": stage_widths(shim, query),
        "rows": sum(1 for p in (work / "out").glob("part-*") for _ in p.open()),
    }
    given = SparkGraph(readme_flow(), partitions=3)
    query = run(spark, given, source, work / "out3", work / "ck3")
    out["given"] = {"describe": given.describe(), "widths": stage_widths(shim, query)}
    (source / "b.txt").write_text("b c\n")
    recorded = SparkGraph(readme_flow())
    query = run(spark, recorded, source, work / "out3", work / "ck3")
    out["recorded"] = {"describe": recorded.describe(), "widths": stage_widths(shim, query)}
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    user = SparkGraph(readme_flow())
    out["user"] = {"sessionOnly": user.describe()}
    try:
        run(spark, user, source, work / "out3", work / "ck3")
    except Exception as error:  # reported to the test, which checks it
        out["user"]["refused"] = str(error)
    query = run(spark, user, source, work / "out4", work / "ck4")
    out["user"] |= {"describe": user.describe(), "widths": stage_widths(shim, query)}
    spark.stop()
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))))
