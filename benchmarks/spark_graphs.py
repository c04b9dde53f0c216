"""Spark graph benchmark: a streaming word count against Spark's, and fused against unfused.

One SparkSession (``local[2]``, 2 shuffle partitions), one generated corpus
(:class:`benchmarks.lib.workloads.Corpus`), ``Trigger.AvailableNow``, variants interleaved
(:func:`benchmarks.lib.timing.interleave`). Prints one JSON object::

    python -m benchmarks.spark_graphs [--lines N] [--files F] [--repeat R] [--warmup W]
        [--cases wordcount wordcount_latest chain] [--batches B] [--format json|parquet]
        [--work DIR]

``wordcount``: flamestream (files front -> ``apply_graph`` word count -> files sink,
``release=tasks``, every input word yields its updated count) against plain PySpark
(``groupBy("word").count()`` in ``update`` mode, ``foreachBatch`` to Parquet per batch id);
``wordcount_latest`` the same with ``release="latest"``; ``chain``: six stateless steps with
``fusion=True`` against ``fusion=False`` into the ``noop`` sink. Every output is checked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import emit, machine
from benchmarks.lib.session import local_spark
from benchmarks.lib.stats import median
from benchmarks.lib.timing import TIMING_NOTE, Run, interleave
from benchmarks.lib.workloads import (
    Corpus,
    chain_expected,
    chain_graph,
    files_sink,
    word_count_graph,
    word_counts,
)

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


def main(argv: list[str] | None = None) -> int:
    """Run the cases, check their outputs, print JSON."""
    parser = cli.parser(__doc__, timeout=1800.0)
    cli.corpus_flags(parser, 200_000)
    cli.flag(parser, "--cases", list(CASES), nargs="+", choices=list(CASES))
    cli.flag(
        parser, "--format", "json", "the word count's sink format", choices=["json", "parquet"]
    )
    args = parser.parse_args(argv)
    cli.check_batches(parser, args)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from flamestream.spark import apply_graph

    work = cli.Workdir(args.work, "flamestream-graphs-")
    corpus = Corpus.write(work.path / "in", args.lines, args.files, args.batches)
    counts = word_counts(args.lines)
    words = sum(counts.values())
    chain_want = chain_expected(args.lines) if "chain" in args.cases else (0, 0)
    spark = local_spark("flamestream-spark-graphs")

    def flamestream_wordcount(out: Path, ck: Path, *, latest: bool = False) -> Any:
        graph = word_count_graph(commutative=latest)
        rows = apply_graph(
            graph,
            corpus.front(spark),
            checkpoint_location=str(ck),
            release="latest" if latest else "every",
        )
        return files_sink(rows, out, ck, args.format, "tasks").trigger(availableNow=True)

    def plain_wordcount(out: Path, ck: Path) -> Any:
        found = corpus.text(spark).select(F.explode(F.split(F.col("value"), " ")).alias("word"))
        found = found.where(F.col("word") != "").groupBy("word").count()

        def write_batch(batch: DataFrame, batch_id: int) -> None:
            # a replayed batch overwrites its own directory: idempotent, so exactly once
            batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        writer = found.writeStream.outputMode("update").foreachBatch(write_batch)
        return writer.option("checkpointLocation", str(ck)).trigger(availableNow=True)

    def chain_with(fusion: bool) -> Callable[[Path, Path], Any]:
        def define(out: Path, ck: Path) -> Any:
            rows = apply_graph(chain_graph(), corpus.front(spark), fusion=fusion)
            value = F.col("value").cast("binary")
            observed = rows.observe(
                CHAIN_METRICS,
                F.count(F.lit(1)).alias("rows"),
                F.sum(F.crc32(value)).alias("values"),
                F.sum(F.crc32(F.concat(F.col("trace"), value))).alias("traces"),
            )
            writer = observed.writeStream.format("noop").option("checkpointLocation", str(ck))
            return writer.trigger(availableNow=True)

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

    def wrong_words(found: dict[str, Any], ok: Callable[[str], bool], label: str) -> str | None:
        wrong = [w for w in counts.keys() | found.keys() if not ok(w)]
        sample = {w: [counts[w], found.get(w)] for w in sorted(wrong)[:5]}
        return f"{len(wrong)} words {label}, e.g. {sample}" if wrong else None

    written: dict[tuple[str, str], set[int]] = {}
    errors: list[dict[str, Any]] = []

    def check(key: tuple[str, str], out: Path, run: Run) -> None:
        """Note the rows the run wrote, and why its output is wrong if it is."""
        variant = key[1]
        if variant == "flamestream":
            found = flamestream_counts(out)
            rows = sum(released for _, released, _ in found.values())
            problem = wrong_words(
                found,
                lambda w: found.get(w) == (counts[w],) * 3,
                "whose (max count, rows, distinct counts) released differ from the corpus' count",
            )
        elif variant == "flamestream_latest":  # per batch, each updated word once
            found = flamestream_counts(out)
            rows = sum(released for _, released, _ in found.values())
            problem = wrong_words(
                found,
                lambda w: w in found and found[w][0] == counts[w] and found[w][1] == found[w][2],
                "released wrongly (latest mode)",
            )
        elif variant == "plain_pyspark":
            batches = spark.read.parquet(str(out)).groupBy("word")
            latest = batches.agg(F.max_by("count", "batch"), F.count(F.lit(1))).collect()
            rows = sum(int(r[2]) for r in latest)
            last = {r[0]: int(r[1]) for r in latest}
            problem = wrong_words(
                last, lambda w: last.get(w) == counts[w], "whose latest count differs"
            )
        else:
            rows, values = run.metrics.get("rows", 0), run.metrics.get("values", 0)
            problem = None
            if (rows, values) != chain_want:
                problem = f"(rows, crc32 sum) {(rows, values)}, expected {chain_want}"
        written.setdefault(key, set()).add(rows)
        if problem is not None:
            errors.append({"case": key[0], "variant": variant, "run": work.count, "error": problem})

    variants: dict[str, Callable[[Path, Path], Any]] = {
        "flamestream": flamestream_wordcount,
        "flamestream_latest": partial(flamestream_wordcount, latest=True),
        "plain_pyspark": plain_wordcount,
        "fused": chain_with(True),
        "unfused": chain_with(False),
    }
    cases = {(c, v): variants[v] for c in args.cases for v in CASES[c]}
    try:
        spark_version = spark.version
        rounds = interleave(cases, work, args, observed=CHAIN_METRICS, check=check)
    finally:
        spark.stop()
    chain_outputs = {
        tuple(sorted(run.metrics.items()))
        for timed in (rounds.warmups, rounds.runs)
        for (case, _), done in timed.items()
        if case == "chain"
        for run in done
    }
    if len(chain_outputs) > 1:
        problem = "fused and unfused emitted different rows (rows, crc32 sums)"
        errors.append({"case": "chain", "error": problem, "observed": sorted(chain_outputs)})
    if errors:  # the outputs were removed; the input stays in ``work`` to reproduce it
        return emit({"error": "wrong output", "failures": errors, "work": str(work.path)})

    def seconds(key: tuple[str, str], steady: bool = False) -> float:
        return median((r.triggers if steady else r.seconds for r in rounds.runs[key]), None)

    def variant(key: tuple[str, str]) -> dict[str, Any]:
        done, wall, steady = rounds.runs[key], seconds(key), seconds(key, steady=True)
        return {
            "seconds_median": round(wall, 3),
            "seconds_runs": [round(r.seconds, 3) for r in done],
            "seconds_warmup": [round(r.seconds, 3) for r in rounds.warmups[key]],
            "words_per_second": round(words / wall),
            "lines_per_second": round(args.lines / wall),
            "steady_seconds_median": round(steady, 3),
            "steady_words_per_second": round(words / steady),
            "batches": sorted({r.batches for r in done}),
            "output_rows": sorted(written[key]),
            "phases_median_seconds": {
                "start_to_first_batch": median(r.first_batch for r in done),
                "add_batch": median(r.add_batch for r in done),
            },
        }

    results: dict[str, Any] = {}
    for case in args.cases:
        first, second = ((case, v) for v in CASES[case])
        ratio = seconds(second) / seconds(first)
        steady = seconds(second, steady=True) / seconds(first, steady=True)
        names = "_vs_".join(CASES[case])
        results[case] = {
            "variants": {key[1]: variant(key) for key in (first, second)},
            f"ratio_{names}": round(ratio, 3),
            f"steady_ratio_{names}": round(steady, 3),
            "target": TARGETS[case],
            "target_met": ratio >= TARGETS[case],
            "steady_target_met": steady >= TARGETS[case],
        }
    report = {
        "machine": machine(spark_version, shuffle_partitions=2),
        "input": corpus.report(
            words=words, distinct_words=len(counts), wordcount_sink_format=args.format
        ),
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
    return emit(report, work)


NOTES = [
    TIMING_NOTE,
    "words_per_second = input words (whitespace-separated tokens of the corpus, line numbers "
    "included) / seconds; ratios divide the first variant's rate by the second's.",
    "Corpus: benchmarks.lib.workloads.Corpus: lines of a 10-digit line number and 8 words of "
    "a 26-word vocabulary, cut or padded with dots to 59 characters; the line numbers make "
    "the keys mostly distinct (about one new key per line), the vocabulary words are hot keys.",
    "wordcount/flamestream: files front -> apply_graph(flat_map str.split -> map_reduce("
    "mapper=w -> (w, 1), reducer=add) -> map 'word=count') with checkpoint_location = the "
    "writer's checkpoint -> flamestream files sink, release=tasks. Stages: split and the "
    "mapper fused in one mapInArrow pass, a shuffle by key (2 partitions), the keyed stage "
    "(the map_reduce cycle run to quiescence per item in the task, state snapshot per "
    "partition and batch), the render map, then the barrier sink. Every input word yields "
    "one released row with its updated count, exactly once, in global-time order per part.",
    "wordcount/plain_pyspark: readStream.text -> explode(split(value, ' ')) without empty "
    "words -> groupBy('word').count() in update output mode -> foreachBatch writing each "
    "batch's updated counts to Parquet dir batch=<id>, mode overwrite (idempotent per batch "
    "id, so exactly once). Plain emits the latest count per key per batch, flamestream one row "
    "per input word (every update): compare their output_rows.",
    "wordcount_latest/flamestream_latest: the same graph with map_reduce(commutative=True) "
    "and apply_graph(release='latest'): per batch only the latest count of each updated word "
    "leaves the keyed stage (plain's update-mode semantics), and the split+map pass "
    "pre-combines each task's (word, 1) pairs before the shuffle.",
    "wordcount check (every run, warm-up included): flamestream's 'word=n' rows read back: "
    "per word the highest n, the rows and the distinct n must all equal the word's count in "
    "a Python Counter over the corpus (latest: the highest n equals it, no n twice); plain's "
    "count from the latest batch per word must equal it too. Else exit 1.",
    "chain: apply_graph of 6 stateless steps (flat_map str.split, filter not-a-number, map "
    "upper, map (len, w), filter odd length, map 'W:len') with fusion=True (one mapInArrow "
    "pass) vs fusion=False (six passes, each a Python worker round trip with Arrow "
    "serialization). Sink: noop, which isolates the graph (it still pulls every row through "
    "every pass). Rows are counted with DataFrame.observe (count, sum crc32(value), sum "
    "crc32(trace || value)) in the timed query: both variants must emit the Python-computed "
    "row count and crc32 sum, and the same trace checksum.",
]


if __name__ == "__main__":
    raise SystemExit(main())
