"""Spark graph benchmark: a streaming word count against Spark's, and fused against unfused.

One SparkSession (``local[2]``, 2 shuffle partitions), one generated corpus (the passthrough
benchmark's lines: a 10-digit line number and 8 words, 60 bytes a line), every query run with
``Trigger.AvailableNow`` into fresh output and checkpoint directories, ``--repeat`` timed runs
after ``--warmup`` untimed ones, cases interleaved. Prints one JSON object::

    python -m benchmarks.spark_graphs [--lines N] [--files F] [--repeat R] [--warmup W]
        [--cases wordcount chain] [--batches B] [--format json|parquet] [--work DIR]

Two cases:

``wordcount``
    ``flamestream``: files front -> ``apply_graph`` (flat_map split -> ``map_reduce`` counting
    -> map ``"word=count"``) -> flamestream files sink (``release=tasks``), exactly once; every
    input word yields its updated count. ``plain_pyspark``: ``readStream.text`` -> split /
    explode -> ``groupBy("word").count()`` in ``update`` mode -> ``foreachBatch`` overwriting
    one Parquet directory per batch id (idempotent, so exactly once too). Both must end with the
    corpus' counts (a Python ``Counter``); the ratio is flamestream's input words/s over plain's.

``chain``
    Six stateless steps (split, filter, upper, tag, filter, render) applied with
    ``fusion=True`` (one ``mapInArrow`` pass) and ``fusion=False`` (six), into the ``noop``
    sink; both must emit the same rows. The ratio is fused over unfused throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable
from functools import partial
from operator import add
from pathlib import Path
from typing import Any

from benchmarks.common import Run, local_spark, run_query
from benchmarks.spark_passthrough import LINE_BYTES, generate, line

#: The cases and, per case, its two variants (the first is measured against the second).
CASES: dict[str, tuple[str, str]] = {
    "wordcount": ("flamestream", "plain_pyspark"),
    "wordcount_latest": ("flamestream_latest", "plain_pyspark"),
    "chain": ("fused", "unfused"),
}

#: The ratio each case should reach (first variant's throughput over the second's).
TARGETS = {"wordcount": 1.0, "wordcount_latest": 1.0, "chain": 3.0}

#: The name of the observed metrics of the chain queries (rows and checksums of the output).
CHAIN_METRICS = "flamestream_chain_output"


def word_count_graph(*, commutative: bool = False) -> Any:
    """flat_map split -> map_reduce (word, 1) with + -> map ``"word=count"`` -> sink."""
    from flamestream import Dataflow, map_reduce

    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(
        flow, "count", words, mapper=lambda w: (w, 1), reducer=add, commutative=commutative
    )
    flow.sink("out", flow.map("render", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def _not_a_number(word: str) -> bool:
    return not word.isdigit()


def _odd_length(tagged: tuple[int, str]) -> bool:
    return tagged[0] % 2 == 1


def _tag(word: str) -> tuple[int, str]:
    return len(word), word


def _render(tagged: tuple[int, str]) -> str:
    return f"{tagged[1]}:{tagged[0]}"


def chain_graph() -> Any:
    """Six stateless steps: split, drop line numbers, upper, tag (len, w), odd only, render."""
    from flamestream import Dataflow

    flow = Dataflow("chain")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    kept = flow.filter("words-only", words, _not_a_number)
    upper = flow.map("upper", kept, str.upper)
    tagged = flow.map("tag", upper, _tag)
    odd = flow.filter("odd", tagged, _odd_length)
    flow.sink("out", flow.map("render", odd, _render))
    return flow


def chain_expected(lines: int) -> tuple[int, int]:
    """Rows and crc32 sum of the values the chain graph emits for the corpus (pure Python)."""
    rows = checksum = 0
    for i in range(lines):
        for word in line(i).split():
            if _not_a_number(word):
                tagged = _tag(word.upper())
                if _odd_length(tagged):
                    rows += 1
                    checksum += zlib.crc32(_render(tagged).encode())
    return rows, checksum


def main(argv: list[str] | None = None) -> int:
    """Run the cases, check their outputs, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each variant first")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument(
        "--batches",
        type=int,
        default=1,
        help="split the input into this many batches (maxFilesPerTrigger = files / B for "
        "Spark's file source, maxRecordsPerTrigger = lines / B for flamestream); must divide "
        "--files",
    )
    parser.add_argument(
        "--format",
        choices=["json", "parquet"],
        default="json",
        help="the flamestream files sink's format (word count)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per query")
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.batches < 1 or args.files % args.batches:
        parser.error(f"--batches must divide --files ({args.files}); got {args.batches}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import DataFrame  # imported here: the input needs no Spark
    from pyspark.sql import functions as F

    from flamestream.spark import apply_graph

    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-graphs-"))
    source = work / "in"
    input_bytes = generate(source, args.lines, args.files)
    counts = Counter(word for i in range(args.lines) for word in line(i).split())
    words = sum(counts.values())
    chain_want = chain_expected(args.lines) if "chain" in args.cases else (0, 0)

    spark = local_spark("flamestream-spark-graphs")
    spark_version = spark.version

    def fronts() -> DataFrame:
        reader = spark.readStream.format("flamestream").option("front", "files")
        if args.batches > 1:
            reader = reader.option("maxRecordsPerTrigger", -(-args.lines // args.batches))
        return reader.option("path", str(source)).load()

    def flamestream_wordcount(out: Path, checkpoint: Path, *, latest: bool = False) -> Any:
        graph = apply_graph(
            word_count_graph(commutative=latest),
            fronts(),
            checkpoint_location=str(checkpoint),
            release="latest" if latest else "every",
        )
        return (
            graph.writeStream.format("flamestream")
            .option("sink", "files")
            .option("format", args.format)
            .option("release", "tasks")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
        )

    def plain_wordcount(out: Path, checkpoint: Path) -> Any:
        reader = spark.readStream
        if args.batches > 1:
            reader = reader.option("maxFilesPerTrigger", args.files // args.batches)
        found = (
            reader.text(str(source))
            .select(F.explode(F.split(F.col("value"), " ")).alias("word"))
            .where(F.col("word") != "")
            .groupBy("word")
            .count()
        )

        def write_batch(batch: DataFrame, batch_id: int) -> None:
            # a replayed batch overwrites its own directory: idempotent, so exactly once
            batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        return (
            found.writeStream.outputMode("update")
            .foreachBatch(write_batch)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
        )

    def chain_with(fusion: bool) -> Callable[[Path, Path], Any]:
        def define(out: Path, checkpoint: Path) -> Any:
            rows = apply_graph(chain_graph(), fronts(), fusion=fusion)
            observed = rows.observe(
                CHAIN_METRICS,
                F.count(F.lit(1)).alias("rows"),
                F.sum(F.crc32(F.col("value").cast("binary"))).alias("values"),
                F.sum(F.crc32(F.concat(F.col("trace"), F.col("value").cast("binary")))).alias(
                    "traces"
                ),
            )
            return (
                observed.writeStream.format("noop")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
            )

        return define

    def flamestream_counts(out: Path) -> dict[str, tuple[int, int, int]]:
        """Per word: the highest count released, the rows released, the distinct counts."""
        reader = spark.read.format(args.format)
        if args.format == "json":
            reader = reader.schema("value string")
        parsed = reader.load(str(out)).select(
            F.regexp_extract("value", r"^(.*)=\d+$", 1).alias("word"),
            F.regexp_extract("value", r"=(\d+)$", 1).cast("long").alias("n"),
        )
        summary = parsed.groupBy("word").agg(F.max("n"), F.count(F.lit(1)), F.count_distinct("n"))
        return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in summary.collect()}

    def plain_counts(out: Path) -> tuple[dict[str, int], int]:
        """Per word the count of the latest batch that updated it; the rows written in all."""
        latest = (
            spark.read.parquet(str(out))
            .groupBy("word")
            .agg(F.max_by("count", "batch"), F.count(F.lit(1)))
            .collect()
        )
        return {r[0]: int(r[1]) for r in latest}, sum(int(r[2]) for r in latest)

    def check(variant: str, out: Path, run: Run) -> tuple[str | None, int]:
        """Why the run's output is wrong (or None), and the rows it wrote."""
        if variant == "flamestream":
            found = flamestream_counts(out)
            rows = sum(released for _, released, _ in found.values())
            wrong = [w for w in counts.keys() | found.keys() if found.get(w) != (counts[w],) * 3]
            if wrong:
                sample = {w: [counts[w], found.get(w)] for w in sorted(wrong)[:5]}
                return (
                    f"{len(wrong)} words whose (max count, rows, distinct counts) released "
                    f"differ from the corpus' count, e.g. {sample}"
                ), rows
        elif variant == "flamestream_latest":  # per batch, each updated word once
            found = flamestream_counts(out)
            rows = sum(released for _, released, _ in found.values())
            wrong = [
                w
                for w in counts.keys() | found.keys()
                if w not in found or found[w][0] != counts[w] or found[w][1] != found[w][2]
            ]
            if wrong:
                sample = {w: [counts[w], found.get(w)] for w in sorted(wrong)[:5]}
                return f"{len(wrong)} words released wrongly (latest mode), e.g. {sample}", rows
        elif variant == "plain_pyspark":
            latest, rows = plain_counts(out)
            wrong = [w for w in counts.keys() | latest.keys() if latest.get(w) != counts[w]]
            if wrong:
                sample = {w: [counts[w], latest.get(w)] for w in sorted(wrong)[:5]}
                return f"{len(wrong)} words whose latest count differs, e.g. {sample}", rows
        else:
            rows, values = run.metrics.get("rows", 0), run.metrics.get("values", 0)
            if (rows, values) != chain_want:
                return f"(rows, crc32 sum) {(rows, values)}, expected {chain_want}", rows
        return None, rows

    definitions: dict[tuple[str, str], Callable[[Path, Path], Any]] = {}
    if "wordcount" in args.cases:
        definitions["wordcount", "flamestream"] = flamestream_wordcount
        definitions["wordcount", "plain_pyspark"] = plain_wordcount
    if "wordcount_latest" in args.cases:
        definitions["wordcount_latest", "flamestream_latest"] = partial(
            flamestream_wordcount, latest=True
        )
        definitions["wordcount_latest", "plain_pyspark"] = plain_wordcount
    if "chain" in args.cases:
        definitions["chain", "fused"] = chain_with(True)
        definitions["chain", "unfused"] = chain_with(False)
    runs: dict[tuple[str, str], list[Run]] = {key: [] for key in definitions}
    warmups: dict[tuple[str, str], list[Run]] = {key: [] for key in definitions}
    written: dict[tuple[str, str], set[int]] = {key: set() for key in definitions}
    errors: list[dict[str, Any]] = []
    counter = 0
    try:
        for attempt in range(args.warmup + args.repeat):
            for (case, variant), define in definitions.items():  # interleaved
                counter += 1
                out, checkpoint = work / f"out-{counter}", work / f"ck-{counter}"
                run = run_query(
                    partial(define, out, checkpoint), args.timeout, observed=CHAIN_METRICS
                )
                (warmups if attempt < args.warmup else runs)[case, variant].append(run)
                problem, rows = check(variant, out, run)
                written[case, variant].add(rows)
                if problem is not None:
                    errors.append(
                        {"case": case, "variant": variant, "run": counter, "error": problem}
                    )
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(checkpoint, ignore_errors=True)
    finally:
        spark.stop()
    chain_outputs = {
        tuple(sorted(run.metrics.items()))
        for timed in (warmups, runs)
        for (case, _), done in timed.items()
        if case == "chain"
        for run in done
    }
    if len(chain_outputs) > 1:
        errors.append(
            {
                "case": "chain",
                "error": "fused and unfused emitted different rows (rows, crc32 sums)",
                "observed": sorted(chain_outputs),
            }
        )
    if errors:
        # the outputs were removed; the input stays in ``work`` to reproduce the failure
        report = {"error": "wrong output", "failures": errors, "work": str(work)}
        print(json.dumps(report, indent=2))
        return 1

    median = {key: statistics.median(r.seconds for r in done) for key, done in runs.items()}
    steady_seconds = {
        key: statistics.median(r.triggers for r in done) for key, done in runs.items()
    }
    rate = {key: words / seconds for key, seconds in median.items()}
    steady = {key: words / seconds for key, seconds in steady_seconds.items()}
    results: dict[str, Any] = {}
    for case in args.cases:
        first, second = CASES[case]
        ratio = rate[case, first] / rate[case, second]
        steady_ratio = steady[case, first] / steady[case, second]
        results[case] = {
            "variants": {
                variant: {
                    "seconds_median": round(median[case, variant], 3),
                    "seconds_runs": [round(r.seconds, 3) for r in runs[case, variant]],
                    "seconds_warmup": [round(r.seconds, 3) for r in warmups[case, variant]],
                    "words_per_second": round(rate[case, variant]),
                    "lines_per_second": round(args.lines / median[case, variant]),
                    "steady_seconds_median": round(steady_seconds[case, variant], 3),
                    "steady_words_per_second": round(steady[case, variant]),
                    "batches": sorted({r.batches for r in runs[case, variant]}),
                    "output_rows": sorted(written[case, variant]),
                    "phases_median_seconds": {
                        "start_to_first_batch": round(
                            statistics.median(r.first_batch for r in runs[case, variant]), 3
                        ),
                        "add_batch": round(
                            statistics.median(r.add_batch for r in runs[case, variant]), 3
                        ),
                    },
                }
                for variant in (first, second)
            },
            f"ratio_{first}_vs_{second}": round(ratio, 3),
            f"steady_ratio_{first}_vs_{second}": round(steady_ratio, 3),
            "target": TARGETS[case],
            "target_met": ratio >= TARGETS[case],
            "steady_target_met": steady_ratio >= TARGETS[case],
        }
    report = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "spark": spark_version,
            "master": "local[2]",
            "shuffle_partitions": 2,
        },
        "input": {
            "lines": args.lines,
            "words": words,
            "distinct_words": len(counts),
            "bytes": input_bytes,
            "files": args.files,
            "line_bytes": LINE_BYTES,
            "batches": args.batches,
            "wordcount_sink_format": args.format,
        },
        "repeat": args.repeat,
        "warmup": args.warmup,
        "cases": results,
        "ratios": {
            f"{case}_{'_vs_'.join(CASES[case])}": result[f"ratio_{'_vs_'.join(CASES[case])}"]
            for case, result in results.items()
        },
        "targets_met": {case: result["target_met"] for case, result in results.items()},
        "notes": NOTES,
    }
    print(json.dumps(report, indent=2))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


NOTES = [
    "Timing: seconds is wall time from writeStream.start() to the query's termination "
    "(Trigger.AvailableNow; with --batches B > 1 maxRecordsPerTrigger / maxFilesPerTrigger "
    "split the input into B batches), the median of the timed runs after untimed warm-up "
    "runs, variants interleaved, each run into fresh output and checkpoint directories. "
    "steady_seconds sums the batches' triggerExecution (planning, the batch, offset and commit "
    "logs) from query.recentProgress: what a long-running stream sees, without the query's "
    "one-time start (for a Python data source such as flamestream's fronts about 1 s here). "
    "words_per_second = input words (whitespace-separated tokens of the corpus, line numbers "
    "included) / seconds; ratios divide the first variant's rate by the second's.",
    "Corpus: benchmarks.spark_passthrough.generate(): lines of a 10-digit line number and 8 "
    "words of a 26-word vocabulary, cut or padded with dots to 59 characters; the line "
    "numbers make the keys mostly distinct (about one new key per line), the vocabulary words "
    "are hot keys.",
    "wordcount/flamestream: spark.readStream.format('flamestream') files front -> apply_graph("
    "flat_map str.split -> map_reduce(mapper=w -> (w, 1), reducer=add) -> map 'word=count') "
    "with checkpoint_location = the writer's checkpoint -> writeStream.format('flamestream') "
    "files sink, release=tasks. Stages: split and the mapper fused in one mapInArrow pass, a "
    "shuffle by key (2 partitions), the keyed stage (grouping + the map_reduce cycle run to "
    "quiescence per item in the task, state snapshot per partition and batch under the "
    "checkpoint), the render map in a third pass, then the barrier sink. Semantics: every "
    "input word yields one released row with its updated count (the model's), released "
    "exactly once in global-time order per task part.",
    "wordcount/plain_pyspark: spark.readStream.text -> explode(split(value, ' ')) without "
    "empty words -> groupBy('word').count() (Spark's state store) in update output mode -> "
    "foreachBatch writing each batch's updated counts to Parquet dir batch=<id> with mode "
    "overwrite (idempotent per batch id, so exactly once end to end). Semantics differ: plain "
    "emits the latest count per key per batch (one row per distinct word per batch), "
    "flamestream one row per input word (every update): compare their output_rows.",
    "wordcount_latest/flamestream_latest: the same graph with map_reduce(commutative=True) "
    "and apply_graph(release='latest'): per batch only the latest count of each updated word "
    "leaves the keyed stage (the semantics plain's update mode has), and the split+map pass "
    "pre-combines each task's (word, 1) pairs per word before the shuffle. Check: per word "
    "the highest count released equals the Counter's, and no count is released twice.",
    "wordcount check (every run, warm-up included): flamestream's output read back, 'word=n' "
    "parsed: per word the highest n, the number of rows and the number of distinct n must all "
    "equal the word's count in a Python Counter over the corpus (every update released once); "
    "plain's count from the latest batch per word must equal it too. Else exit 1.",
    "chain: apply_graph of 6 stateless steps (flat_map str.split, filter not-a-number, map "
    "upper, map (len, w), filter odd length, map 'W:len') with fusion=True (one mapInArrow "
    "pass) vs fusion=False (six passes, each a Python worker round trip with Arrow "
    "serialization, plus a where(to == step) between them). Sink: Spark's noop sink, chosen "
    "because it isolates the graph: it still pulls every row through every pass, while the "
    "flamestream files sink would add the same staging, sorting and JSON writing to both "
    "variants and only dilute the ratio. Rows are counted with DataFrame.observe (count, "
    "sum crc32(value), sum crc32(trace || value)) in the timed query itself: both variants "
    "must emit the Python-computed row count and crc32 sum, and the same trace checksum.",
]


if __name__ == "__main__":
    raise SystemExit(main())
