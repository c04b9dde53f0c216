"""Per-batch cost on small batches: flamestream's micro-batches against Spark's own.

A streaming query at a steady rate spends most of each micro-batch on fixed work (planning,
offsets, the commit, Python workers), not on its rows. Two cases, each flamestream's way
against Spark's built-in way, on the same rate and trigger, interleaved (A B A B):

* ``front``: the ``generator`` front -> ``noop`` against the ``rate`` source -> ``noop``,
  and against the floor of any Python front: a minimal PySpark streaming data source
  (``benchmarks.lib.python_source``: one Arrow batch per partition, nothing else) -> ``noop``;
* ``wordcount``: the ``generator`` front -> ``SparkGraph(count of the records' keys,
  release="latest").write_stream`` -> the flamestream files sink (``release=tasks``) against
  ``rate`` -> ``groupBy(key).count()`` in update mode -> ``foreachBatch`` writing each batch's
  counts as Parquet (idempotent per batch id). Both count 100 keys and write each batch's
  updated counts.

Each run has a processing-time trigger of ``--trigger`` seconds at ``--rate`` records per
second (so about rate x trigger records a batch) and runs ``--skip`` + ``--measure`` batches;
its first ``--skip`` batches (planning, worker start) are not measured. A batch's cost is its
``triggerExecution`` in the query's progress; per variant the median over all measured
batches of all runs. Ratios are flamestream's median over Spark's (below 1: cheaper); for
``front`` also flamestream's over the minimal Python source's, and that one's over Spark's.
Checks: every measured batch read rows; flamestream released every key, and its released
counts per key only grow and never repeat; Spark's foreachBatch wrote every batch.
Prints one JSON object::

    python -m benchmarks.spark_batches [--rate R] [--trigger S] [--measure B] [--skip K]
        [--repeat N] [--cases front wordcount] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.lib import cli, python_source
from benchmarks.lib.record import emit, load_averages, machine
from benchmarks.lib.session import local_spark
from benchmarks.lib.stats import median
from benchmarks.lib.workloads import files_options

#: Per case: flamestream's variant, then Spark's.
CASES: dict[str, tuple[str, str]] = {
    "front": ("generator_noop", "rate_noop"),
    "wordcount": ("generator_count", "rate_groupby"),
}

#: Per case, the least a Python data source costs on the same work (reported, no target).
FLOORS = {"front": "python_noop"}

#: The issue's targets: flamestream's median batch over Spark's, at most.
TARGETS = {"front": 1.5, "wordcount": 1.0}

KEYS = 100


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The rate, the trigger and how many batches."""
    made = cli.parser(__doc__, timeout=300.0, repeat=3)
    cli.flag(made, "--rate", 2000, "records per second")
    cli.flag(made, "--trigger", 1.0, "processing-time trigger, seconds")
    cli.flag(made, "--measure", 10, "measured batches per run")
    cli.flag(made, "--skip", 3, "first batches of a run not measured")
    cli.flag(made, "--cases", list(CASES), nargs="+", choices=list(CASES))
    return cli.parse(made, argv)


def generator(spark: Any, rate: int) -> Any:
    """The generator front's reader: two partitions, 100 keys, ``rate`` records a second."""
    reader = spark.readStream.format("flamestream").option("front", "generator")
    options = {"rowsPerSecond": rate, "partitions": 2, "keys": KEYS, "seed": 7}
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader


def rate_source(spark: Any, rate: int) -> Any:
    """Spark's rate source, two partitions, with a ``key`` of 100 values like the generator's."""
    from pyspark.sql import functions as F

    rows = spark.readStream.format("rate").option("rowsPerSecond", rate)
    rows = rows.option("numPartitions", 2).load()
    return rows.select(F.concat(F.lit("k"), (F.col("value") % KEYS).cast("string")).alias("key"))


def count_graph() -> Any:
    """``count`` of the records (their keys) -> ``"key=count"`` (a ``Template``) -> sink."""
    from flamestream import Dataflow, Template, count

    flow = Dataflow("keycount")
    counts = count(flow, "count", flow.source("keys"))
    flow.sink("out", flow.map("render", counts, Template("{key}={value}")))
    return flow


def writer(spark: Any, variant: str, args: argparse.Namespace, out: Path, ck: Path) -> Any:
    """The variant's query, defined, not started."""
    if variant == "generator_noop":
        rows = generator(spark, args.rate).load()
        made = rows.writeStream.format("noop").option("checkpointLocation", str(ck))
    elif variant == "python_noop":
        reader = spark.readStream.format(python_source.NAME).option("rowsPerSecond", args.rate)
        reader = reader.option("partitions", 2).option("keys", KEYS)
        made = reader.load().writeStream.format("noop").option("checkpointLocation", str(ck))
    elif variant == "rate_noop":
        made = rate_source(spark, args.rate).writeStream.format("noop")
        made = made.option("checkpointLocation", str(ck))
    elif variant == "generator_count":
        from flamestream.spark import SparkGraph

        graph = SparkGraph(count_graph(), release="latest")
        made = graph.write_stream(
            generator(spark, args.rate), checkpoint_location=str(ck), payload="key"
        )
        made = files_options(made, out)
    else:
        counts = rate_source(spark, args.rate).groupBy("key").count()

        def write_batch(batch: Any, batch_id: int) -> None:
            # a replayed batch overwrites its own directory: idempotent, so exactly once
            batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        made = counts.writeStream.outputMode("update").foreachBatch(write_batch)
        made = made.option("checkpointLocation", str(ck))
    return made.trigger(processingTime=f"{args.trigger} seconds")


def run(spark: Any, variant: str, args: argparse.Namespace, work: cli.Workdir) -> dict[str, Any]:
    """One run: ``skip + batches`` batches; their costs, rows, and what the output says."""
    out, ck = work.fresh(variant)
    before = load_averages()
    query = writer(spark, variant, args, out, ck).start()
    deadline = time.monotonic() + args.timeout
    try:
        while len(_batches(query)) < args.skip + args.measure:
            if query.exception() is not None:
                return {"error": f"{variant}: {query.exception()}"}
            if time.monotonic() > deadline:
                return {"error": f"{variant}: {len(_batches(query))} batches in {args.timeout} s"}
            time.sleep(0.2)
    finally:
        query.stop()
    measured = _batches(query)[args.skip : args.skip + args.measure]
    done = {
        "batch_ms": [p["durationMs"]["triggerExecution"] for p in measured],
        "rows": [p["numInputRows"] for p in measured],
        "load_before": before,
    }
    problem = check(variant, out, measured, _batches(query))
    return done | ({"error": f"{variant}: {problem}"} if problem else {})


def _batches(query: Any) -> list[dict[str, Any]]:
    """The query's progress per batch that ran (not the idle polls), in order."""
    seen: dict[int, dict[str, Any]] = {}
    for progress in query.recentProgress:
        if "triggerExecution" in progress["durationMs"] and "addBatch" in progress["durationMs"]:
            seen[progress["batchId"]] = progress
    return [seen[b] for b in sorted(seen)]


def check(variant: str, out: Path, measured: list[Any], every: list[Any]) -> str | None:
    """Why the run's output is wrong, or None."""
    if any(p["numInputRows"] == 0 for p in measured):
        return "a measured batch read no rows"
    if variant == "generator_count":
        return _check_counts(out)
    if variant == "rate_groupby":
        written = {int(p.name.split("=")[1]) for p in out.glob("batch=*")}
        missing = {p["batchId"] for p in every if p["numInputRows"]} - written
        return f"foreachBatch wrote no output for batches {sorted(missing)}" if missing else None
    return None


def _check_counts(out: Path) -> str | None:
    """Released counts per key only grow and never repeat, and every key was released."""
    counts: dict[str, list[int]] = {}
    for part in sorted(out.glob("part-*.jsonl"), key=lambda p: int(p.name.split("-")[1])):
        for line in part.read_text().splitlines():
            key, _, n = json.loads(line)["value"].rpartition("=")
            counts.setdefault(key, []).append(int(n))
    if set(counts) != {f"k{i}" for i in range(KEYS)}:
        return f"released {len(counts)} keys, not the generator's {KEYS}"
    if any(a >= b for values in counts.values() for a, b in pairwise(values)):
        return "a key's released count did not grow"
    return None


def measure(args: argparse.Namespace, work: cli.Workdir) -> dict[str, Any]:
    """Every case's variants, interleaved over ``--repeat`` rounds; the report."""
    spark = local_spark("flamestream-batches")
    python_source.register(spark)
    variants = [v for case in args.cases for v in (*CASES[case], *_floor(case))]
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    try:
        for _ in range(args.repeat):
            for variant in variants:
                done = run(spark, variant, args, work)
                if "error" in done:
                    return {"error": done["error"], "runs": runs, "work": str(work.path)}
                runs[variant].append(done)
        version = spark.version
    finally:
        spark.stop()
    return report(args, runs, version)


def report(
    args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]], version: str
) -> dict[str, Any]:
    """Medians per variant, and per case flamestream's over Spark's against the target."""
    batch_ms = {
        v: median([ms for run in done for ms in run["batch_ms"]]) for v, done in runs.items()
    }
    medians = {
        variant: {
            "batch_ms_median": batch_ms[variant],
            "rows_per_batch_median": median([n for run in done for n in run["rows"]]),
            "runs": done,
        }
        for variant, done in runs.items()
    }
    cases = {}
    for case in args.cases:
        ours, spark = CASES[case]
        ratio = batch_ms[ours] / batch_ms[spark]
        cases[case] = {
            f"{ours}_over_{spark}": round(ratio, 3),
            "target_at_most": TARGETS[case],
            "target_met": ratio <= TARGETS[case],
        }
        for floor in _floor(case):
            cases[case][f"{ours}_over_{floor}"] = round(batch_ms[ours] / batch_ms[floor], 3)
            cases[case][f"{floor}_over_{spark}"] = round(batch_ms[floor] / batch_ms[spark], 3)
    return {
        "machine": machine(version, shuffle_partitions=2),
        "settings": {k: getattr(args, k) for k in ("rate", "trigger", "measure", "skip")},
        "repeat": args.repeat,
        "cases": cases,
        "variants": medians,
        "notes": [__doc__.split("\n\n")[2].replace("\n", " ") if __doc__ else ""],
    }


def _floor(case: str) -> tuple[str, ...]:
    """The case's floor variant, if it has one."""
    return (FLOORS[case],) if case in FLOORS else ()


def main(argv: list[str] | None = None) -> int:
    """Run the cases, check their outputs, print JSON."""
    args = arguments(argv)
    work = cli.Workdir(args.work, "flamestream-batches-")
    return emit(measure(args, work), work)


if __name__ == "__main__":
    raise SystemExit(main())
