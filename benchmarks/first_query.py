"""The first query a new user runs: from a fresh process to its first released row.

Each run is a fresh Python process (``python -m benchmarks.first_query --child VARIANT``, as
a user's script would be): it imports PySpark and flamestream, builds the README's session,
``flamestream.configure(SparkSession.builder.master("local[2]")).getOrCreate()``, starts a
word count over a folder of ``--lines`` text lines (``--files`` files) and stops at its first
released row. Variants:

* ``flamestream``: the README's first graph (``flat_map(str.split)`` into ``map_reduce``
  with lambdas, into a sink), ``SparkGraph(flow).write_stream`` from the files front
  (``format("flamestream")``) to the files sink, as the README shows it;
* ``plain``: the same word count in plain PySpark: ``readStream.text`` ->
  ``explode(split(value, " "))`` -> ``groupBy("word").count()`` (update mode) ->
  ``foreachBatch`` writing each batch's counts as JSON lines;
* ``flamestream-p200``, ``plain-p200``: the same with ``spark.sql.shuffle.partitions=200``
  set on the builder (Spark's default, what ``configure`` left before it chose the cores).

The time of a run: from just before the parent starts the process to the moment the child
sees the first released row in the output folder (polled every 5 ms), with the child's
phases (imports, session, query start, first row). Runs are interleaved (A B A B ...),
``--warmup`` rounds untimed first, then ``--repeat`` rounds; reported as JSON: every run with
the load averages before it, the medians per variant, and the median flamestream run over the
median plain one (target: at most 2). Other work on the machine skews every figure: rerun
alone::

    python -m benchmarks.first_query [--lines N] [--files F] [--repeat R] [--warmup W]
        [--variants ...] [--timeout S] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import Record, emit, load_averages
from benchmarks.lib.stats import median
from benchmarks.lib.workloads import line

VARIANTS = ["flamestream", "plain", "flamestream-p200", "plain-p200"]
#: The most the median flamestream run may take, in median plain runs.
TARGET = 2.0


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The input's size, the rounds, the variants (``--child``: one run, in this process)."""
    parser = cli.parser(__doc__, timeout=300.0, repeat=5)
    cli.flag(parser, "--lines", 2000, "input lines, all there before the query starts")
    cli.flag(parser, "--files", 2, "input files")
    cli.flag(parser, "--variants", VARIANTS[:2], nargs="+", choices=VARIANTS)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--began", type=float, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def write_input(folder: Path, lines: int, files: int) -> None:
    """``lines`` corpus lines (:func:`benchmarks.lib.workloads.line`) over ``files`` files."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        text = "".join(line(i) + "\n" for i in range(f, lines, files))
        (folder / f"part-{f}.txt").write_text(text)


# -- the child: one fresh process, one query, until its first released row ------------------


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``args.child`` once; its phases as seconds since ``args.began``."""
    began = float(args.began)
    from pyspark.sql import SparkSession

    import flamestream

    phases = {"imported": time.time() - began}
    builder = SparkSession.builder.master("local[2]")
    if args.child.endswith("-p200"):
        builder = builder.config("spark.sql.shuffle.partitions", "200")
    spark = flamestream.configure(builder).getOrCreate()
    phases["session"] = time.time() - began
    work = Path(args.work)
    out = work / "out"
    if args.child.startswith("flamestream"):
        query = start_flamestream(spark, work / "in", out, work / "ck")
        released = flamestream_released
    else:
        query = start_plain(spark, work / "in", out, work / "ck")
        released = plain_released
    phases["started"] = time.time() - began
    deadline = time.monotonic() + args.timeout
    while not released(out):
        if not query.isActive or time.monotonic() > deadline:
            error = query.exception()
            msg = f"no released row: {error or 'timed out'}"
            raise RuntimeError(msg)
        time.sleep(0.005)
    phases["first_row"] = time.time() - began
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    query.stop()
    spark.stop()
    return {"phases_s": {k: round(v, 3) for k, v in phases.items()}, "partitions": partitions}


def start_flamestream(spark: Any, source: Path, out: Path, ck: Path) -> Any:
    """The README's first graph, written to the files sink as the README shows."""
    from flamestream import Dataflow, map_reduce
    from flamestream.spark import SparkGraph

    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=lambda a, b: a + b)
    flow.sink("counts", counts)
    graph = SparkGraph(flow)
    front = spark.readStream.format("flamestream").option("front", "files")
    front = front.option("path", str(source))
    writer = graph.write_stream(front, checkpoint_location=str(ck))
    return writer.option("sink", "files").option("path", str(out)).start()


def flamestream_released(out: Path) -> bool:
    """Whether the files sink released a row (a part file with a line)."""
    return any(p.stat().st_size > 0 for p in out.glob("part-*")) if out.exists() else False


def start_plain(spark: Any, source: Path, out: Path, ck: Path) -> Any:
    """The same word count in plain PySpark: update mode, each batch's counts as JSON lines."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    counts = (
        spark.readStream.text(str(source))
        .select(F.explode(F.split(F.col("value"), " ")).alias("word"))
        .where(F.col("word") != "")
        .groupBy("word")
        .count()
    )

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").json(str(out / f"batch={batch_id}"))

    writer = counts.writeStream.outputMode("update").foreachBatch(write_batch)
    return writer.option("checkpointLocation", str(ck)).start()


def plain_released(out: Path) -> bool:
    """Whether a batch's counts were written whole (a batch folder with ``_SUCCESS``)."""
    if not out.exists():
        return False
    return any(
        (batch / "_SUCCESS").exists() and any(p.stat().st_size for p in batch.glob("part-*"))
        for batch in out.glob("batch=*")
    )


# -- the parent: fresh processes, interleaved ---------------------------------------------


def run_once(args: argparse.Namespace, variant: str, work: Path) -> dict[str, Any]:
    """One fresh process running ``variant`` on a fresh copy of the input."""
    cli.Workdir.drop(work)
    write_input(work / "in", args.lines, args.files)
    loads = load_averages()
    began = time.time()
    command = [sys.executable, "-m", "benchmarks.first_query", "--child", variant]
    command += ["--began", repr(began), "--work", str(work), "--timeout", str(args.timeout)]
    done = subprocess.run(  # noqa: S603 - this module, this interpreter
        command,
        capture_output=True,
        text=True,
        timeout=args.timeout + 120,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
        env=dict(os.environ),
    )
    took = time.time() - began
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        return {"variant": variant, "error": done.stderr[-2000:], "load_before": loads}
    found = json.loads(lines[-1][len("RESULT ") :])
    return {"variant": variant, "load_before": loads, "process_s": round(took, 3), **found}


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Warm-up rounds, then ``--repeat`` rounds of every variant in turn."""
    for _ in range(args.warmup):
        for variant in args.variants:
            run_once(args, variant, work / variant)
    runs = [
        run_once(args, variant, work / variant)
        for _ in range(args.repeat)
        for variant in args.variants
    ]
    medians: dict[str, Any] = {}
    for variant in args.variants:
        mine = [r for r in runs if r["variant"] == variant and "error" not in r]
        if mine:
            phases = mine[0]["phases_s"].keys()
            medians[variant] = {p: median([r["phases_s"][p] for r in mine]) for p in phases}
    report: dict[str, Any] = {"runs": runs, "medians_s": medians}
    if "flamestream" in medians and "plain" in medians:
        ratio = medians["flamestream"]["first_row"] / medians["plain"]["first_row"]
        report["ratio_flamestream_over_plain"] = round(ratio, 3)
        report["target"] = {"bound": TARGET, "met": ratio <= TARGET}
    if any("error" in r for r in runs):
        report["failed_runs"] = sum("error" in r for r in runs)
    return report


def main(argv: list[str] | None = None) -> int:
    """The benchmark (one JSON object), or one child run (one ``RESULT`` line)."""
    args = arguments(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0
    record = Record(library=True)
    workdir = cli.Workdir(args.work, "bench-first-query-")
    report: dict[str, Any] = {
        "benchmark": "first_query",
        "input": {"lines": args.lines, "files": args.files},
        "rounds": {"warmup": args.warmup, "repeat": args.repeat, "order": args.variants},
    }
    report |= measure(args, workdir.path)
    report["machine"] = record.machine("4.3", session="flamestream.configure(local[2])")
    report["seconds"] = record.seconds()
    return emit(report, workdir)


if __name__ == "__main__":
    raise SystemExit(main())
