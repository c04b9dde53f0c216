"""bench-sketches' queries (sketches, exact state, Spark's sketches) and their final values.

flamestream's declared sketches, the exact state a user would write instead, and plain
Spark's sketch aggregations; per key, the value each released last.

Every query reads the files of :mod:`benchmarks.lib.keyed_events` one file's events a trigger
(flamestream: ``maxRecordsPerTrigger``; Spark's file source: ``maxFilesPerTrigger=1``), with
``Trigger.AvailableNow``, and writes Parquet: flamestream through ``SparkGraph(...,
release="latest")`` into the files sink (each batch the latest value of each key it updated),
Spark's aggregations in update mode through ``foreachBatch`` (a directory per batch id).
flamestream's rows are ``"key,value[,extra]"``.
"""

from __future__ import annotations

import json
from bisect import insort
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.lib.keyed_events import KeyedEvents, quantile
from benchmarks.lib.workloads import files_options

RANK = 0.99
EVENT_DDL = "key long, user long, ms double"
Event = tuple[int, int, float]


def parse(text: str) -> Event:
    """An event line's ``(key, user, ms)``."""
    found = json.loads(text)
    return found["key"], found["user"], found["ms"]


def graph(name: str, build: Callable[[Any, Any], Any]) -> Any:
    """``source -> parse -> build(flow, events) -> sink``."""
    from flamestream import Dataflow

    flow = Dataflow(name)
    flow.sink("out", build(flow, flow.map("parse", flow.source("events"), parse)))
    return flow


def hll(flow: Any, events: Any) -> Any:
    """A. ``distinct_count`` (HLL, lg_k 12) of users per key; rows ``key,estimate``."""
    from flamestream.graph.approximate import distinct_count

    seen = distinct_count(
        flow, "users", events, key=lambda e: e[0], value=lambda e: e[1], sketch="hll", lg_k=12
    )
    return flow.map("render", seen, lambda r: f"{r.key},{r.value.estimate}")


def exact_set(flow: Any, events: Any) -> Any:
    """B. The exact set of users per key, as a user writes it; rows ``key,size``."""
    from flamestream import map_reduce

    seen = map_reduce(
        flow,
        "users",
        events,
        mapper=lambda e: (e[0], e[1]),
        initial=lambda v: frozenset([v]),
        reducer=lambda s, v: s | {v},
    )
    return flow.map("render", seen, lambda r: f"{r.key},{len(r.value)}")


def kll(groups: int, flow: Any, events: Any) -> Any:
    """E. ``quantiles`` (KLL, k 200) p99 of ``ms`` per ``key % groups``; ``key,p99,rank_error``."""
    from flamestream.graph.approximate import quantiles

    p99 = quantiles(
        flow, "p99", events, ranks=(RANK,), key=lambda e: e[0] % groups, value=lambda e: e[2]
    )
    return flow.map("render", p99, lambda r: f"{r.key},{r.value.values[0]},{r.value.rank_error}")


def _insorted(values: tuple[float, ...], value: float) -> tuple[float, ...]:
    """A new sorted tuple with ``value`` in its place."""
    found = list(values)
    insort(found, value)
    return tuple(found)


def exact_sorted(groups: int, flow: Any, events: Any) -> Any:
    """F. Every ``ms`` per ``key % groups`` in a sorted tuple, its p99; rows ``key,p99``."""
    from flamestream import map_reduce

    ordered = map_reduce(
        flow,
        "p99",
        events,
        mapper=lambda e: (e[0] % groups, e[2]),
        initial=lambda v: (v,),
        reducer=_insorted,
    )
    return flow.map("render", ordered, lambda r: f"{r.key},{quantile(r.value, RANK)}")


def flamestream_query(
    spark: Any, made: KeyedEvents, build: Callable[[Any, Any], Any], out: Path, ck: Path
) -> Any:
    """The files front (``made.batch`` records a trigger) -> the graph -> the files sink."""
    from flamestream.spark import SparkGraph

    events = spark.readStream.format("flamestream").option("front", "files")
    events = events.option("path", str(made.path))
    events = events.option("maxRecordsPerTrigger", made.batch)
    compiled = SparkGraph(graph("sketches", build), release="latest")
    writer = compiled.write_stream(events, checkpoint_location=str(ck))
    return files_options(writer, out, fmt="parquet").trigger(availableNow=True)


def spark_query(spark: Any, made: KeyedEvents, how: str, out: Path, ck: Path) -> Any:
    """Spark's file source (one file a trigger) -> from_json -> ``how`` per key -> Parquet."""
    from pyspark.sql import functions as F

    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(made.path))
    events = lines.select(F.from_json("value", EVENT_DDL).alias("e")).select("e.*")
    grouped = events.groupBy("key")
    if how == "approx_count_distinct":
        found = grouped.agg(F.approx_count_distinct("user").alias("value"))
    else:
        found = grouped.agg(F.hll_sketch_agg("user").alias("sketch"))
        found = found.select("key", F.hll_sketch_estimate("sketch").alias("value"))

    def write_batch(batch: Any, batch_id: int) -> None:
        # a replayed batch overwrites its own directory: idempotent
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    writer = found.writeStream.outputMode("update").foreachBatch(write_batch)
    return writer.option("checkpointLocation", str(ck)).trigger(availableNow=True)


#: Per workload, its variants: ``define(spark, made, groups, out, ck)`` gives the writer.
VARIANTS: dict[str, dict[str, Callable[..., Any]]] = {
    "distinct": {
        "flamestream_hll": lambda s, m, g, o, c: flamestream_query(s, m, hll, o, c),
        "flamestream_exact_set": lambda s, m, g, o, c: flamestream_query(s, m, exact_set, o, c),
        "spark_approx_count_distinct": lambda s, m, g, o, c: spark_query(
            s, m, "approx_count_distinct", o, c
        ),
        "spark_hll_sketch": lambda s, m, g, o, c: spark_query(s, m, "hll_sketch_agg", o, c),
    },
    "p99": {
        "flamestream_kll": lambda s, m, g, o, c: flamestream_query(s, m, partial(kll, g), o, c),
        "flamestream_exact_sorted": lambda s, m, g, o, c: flamestream_query(
            s, m, partial(exact_sorted, g), o, c
        ),
    },
}


def final_values(spark: Any, variant: str, out: Path) -> dict[int, tuple[float, ...]]:
    """Per key the values of the last batch that released it: ``(value[, extra])``."""
    from pyspark.sql import functions as F

    found = spark.read.parquet(str(out))
    if variant.startswith("spark_"):
        rows = found.select("key", F.col("value").cast("double").alias("value"), "batch")
        latest = rows.groupBy("key").agg(F.max_by("value", "batch").alias("v"))
        return {int(r["key"]): (float(r["v"]),) for r in latest.collect()}
    batch = F.regexp_extract(F.input_file_name(), r"part-(\d+)[^/]*$", 1).cast("long")
    rows = found.select(F.col("value").alias("line"), batch.alias("batch"))
    latest = rows.groupBy(F.split("line", ",")[0].alias("key")).agg(F.max_by("line", "batch"))
    return {
        int(key): tuple(float(x) for x in line.split(",")[1:]) for key, line in latest.collect()
    }
