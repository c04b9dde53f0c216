"""Spark graph benchmark: a streaming word count against Spark's, and fused against unfused.

Interleaved ``Trigger.AvailableNow`` runs on one generated corpus, every output checked:
``wordcount`` (flamestream, ``release=tasks``, every word's updated count, against plain
PySpark's ``groupBy("word").count()`` in update mode into ``foreachBatch``), the same with
``release="latest"`` (``wordcount_latest``), and six stateless steps fused against unfused
(``chain``, into ``noop``). See docs/benchmarks.md. Prints one JSON object::

    python -m benchmarks.spark_graphs [--lines N] [--files F] [--repeat R] [--warmup W]
        [--cases wordcount wordcount_latest chain] [--batches B] [--format json|parquet]
        [--work DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import machine
from benchmarks.lib.stats import median
from benchmarks.lib.timing import TIMING_NOTE, Rounds, Run, run_cases
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

Key = tuple[str, str]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The corpus, the cases and the word count's sink format."""
    parser = cli.parser(__doc__, timeout=1800.0)
    cli.corpus_flags(parser, 200_000)
    cli.flag(parser, "--cases", list(CASES), nargs="+", choices=list(CASES))
    cli.flag(parser, "--format", "json", "word count sink format", choices=["json", "parquet"])
    return cli.parse(parser, argv)


class Graphs:
    """The variants' queries on one corpus, and the checks of what they wrote."""

    def __init__(self, spark: Any, args: argparse.Namespace, work: cli.Workdir) -> None:
        self.spark, self.args, self.work = spark, args, work
        self.corpus = Corpus.write(work.path / "in", args.lines, args.files, args.batches)
        self.counts = word_counts(args.lines)
        self.chain_want = chain_expected(args.lines) if "chain" in args.cases else (0, 0)
        self.written: dict[Key, set[int]] = {}
        self.errors: list[dict[str, Any]] = []

    def cases(self) -> dict[Key, Callable[[Path, Path], Any]]:
        """Each case's two variants, each a ``define(out, checkpoint)``."""
        define: dict[str, Callable[[Path, Path], Any]] = {
            "flamestream": self.wordcount,
            "flamestream_latest": partial(self.wordcount, latest=True),
            "plain_pyspark": self.plain,
            "fused": partial(self.chain, True),
            "unfused": partial(self.chain, False),
        }
        return {(c, v): define[v] for c in self.args.cases for v in CASES[c]}

    def wordcount(self, out: Path, ck: Path, *, latest: bool = False) -> Any:
        """Files front -> the word count graph -> the files sink (``release=tasks``)."""
        from flamestream.spark import apply_graph

        rows = apply_graph(
            word_count_graph(commutative=latest),
            self.corpus.front(self.spark),
            checkpoint_location=str(ck),
            release="latest" if latest else "every",
        )
        return files_sink(rows, out, ck, self.args.format, "tasks").trigger(availableNow=True)

    def plain(self, out: Path, ck: Path) -> Any:
        """Spark's text source -> ``groupBy("word").count()`` -> Parquet per batch id."""
        from pyspark.sql import functions as F

        words = F.explode(F.split(F.col("value"), " ")).alias("word")
        found = self.corpus.text(self.spark).select(words)
        found = found.where(F.col("word") != "").groupBy("word").count()

        def write_batch(batch: Any, batch_id: int) -> None:
            # a replayed batch overwrites its own directory: idempotent, so exactly once
            batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        writer = found.writeStream.outputMode("update").foreachBatch(write_batch)
        return writer.option("checkpointLocation", str(ck)).trigger(availableNow=True)

    def chain(self, fusion: bool, _out: Path, ck: Path) -> Any:
        """The six-step chain into ``noop``, its rows and checksums observed."""
        from pyspark.sql import functions as F

        from flamestream.spark import apply_graph

        rows = apply_graph(chain_graph(), self.corpus.front(self.spark), fusion=fusion)
        value = F.col("value").cast("binary")
        observed = rows.observe(
            CHAIN_METRICS,
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.crc32(value)).alias("values"),
            F.sum(F.crc32(F.concat(F.col("trace"), value))).alias("traces"),
        )
        writer = observed.writeStream.format("noop").option("checkpointLocation", str(ck))
        return writer.trigger(availableNow=True)

    def check(self, key: Key, out: Path, run: Run) -> None:
        """Note the rows the run wrote, and why its output is wrong if it is."""
        variant = key[1]
        if variant.startswith("flamestream"):
            rows, problem = self.check_flamestream(out, latest=variant.endswith("latest"))
        elif variant == "plain_pyspark":
            rows, problem = self.check_plain(out)
        else:
            rows, values = run.metrics.get("rows", 0), run.metrics.get("values", 0)
            problem = None
            if (rows, values) != self.chain_want:
                problem = f"(rows, crc32 sum) {(rows, values)}, expected {self.chain_want}"
        self.written.setdefault(key, set()).add(rows)
        if problem is not None:
            error = {"case": key[0], "variant": variant, "run": self.work.count, "error": problem}
            self.errors.append(error)

    def check_flamestream(self, out: Path, latest: bool) -> tuple[int, str | None]:
        """Per word the highest count, the rows and the distinct counts released."""
        from pyspark.sql import functions as F

        reader = self.spark.read.format(self.args.format)
        if self.args.format == "json":
            reader = reader.schema("value string")
        parsed = reader.load(str(out)).select(
            F.regexp_extract("value", r"^(.*)=\d+$", 1).alias("word"),
            F.regexp_extract("value", r"=(\d+)$", 1).cast("long").alias("n"),
        )
        summary = parsed.groupBy("word").agg(F.max("n"), F.count(F.lit(1)), F.count_distinct("n"))
        found = {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in summary.collect()}

        def ok(word: str) -> bool:
            got, want = found.get(word), self.counts[word]
            if latest:  # per batch, each updated word once
                return got is not None and got[0] == want and got[1] == got[2]
            return got == (want,) * 3

        label = "whose (max count, rows, distinct counts) released differ from the corpus' count"
        problem = self.wrong_words(found, ok, "released wrongly (latest mode)" if latest else label)
        return sum(released for _, released, _ in found.values()), problem

    def check_plain(self, out: Path) -> tuple[int, str | None]:
        """Per word the count of its latest batch."""
        from pyspark.sql import functions as F

        batches = self.spark.read.parquet(str(out)).groupBy("word")
        latest = batches.agg(F.max_by("count", "batch"), F.count(F.lit(1))).collect()
        last = {r[0]: int(r[1]) for r in latest}
        problem = self.wrong_words(
            last, lambda w: last.get(w) == self.counts[w], "whose latest count differs"
        )
        return sum(int(r[2]) for r in latest), problem

    def wrong_words(
        self, found: dict[str, Any], ok: Callable[[str], bool], label: str
    ) -> str | None:
        """How many words are not ``ok``, with a sample."""
        wrong = [w for w in self.counts.keys() | found.keys() if not ok(w)]
        sample = {w: [self.counts[w], found.get(w)] for w in sorted(wrong)[:5]}
        return f"{len(wrong)} words {label}, e.g. {sample}" if wrong else None

    def analyse(self, rounds: Rounds[Key], spark_version: str) -> dict[str, Any]:
        """The report; an error if an output was wrong."""
        self.check_chain(rounds)
        if self.errors:  # the outputs were removed; the input stays in ``work`` to reproduce it
            return {"error": "wrong output", "failures": self.errors, "work": str(self.work.path)}
        return report(rounds, self, spark_version)

    def check_chain(self, rounds: Rounds[Key]) -> None:
        """Fused and unfused must have emitted the same rows (every run, warm-ups too)."""
        outputs = {
            tuple(sorted(run.metrics.items()))
            for timed in (rounds.warmups, rounds.runs)
            for (case, _), done in timed.items()
            if case == "chain"
            for run in done
        }
        if len(outputs) > 1:
            problem = "fused and unfused emitted different rows (rows, crc32 sums)"
            self.errors.append({"case": "chain", "error": problem, "observed": sorted(outputs)})


def seconds(rounds: Rounds[Key], key: Key, steady: bool = False) -> float:
    """The median wall (or steady: summed triggerExecution) seconds of a variant's runs."""
    return median((r.triggers if steady else r.seconds for r in rounds.runs[key]), None)


def variant_report(rounds: Rounds[Key], key: Key, graphs: Graphs) -> dict[str, Any]:
    """One variant's seconds, rates, batches, output rows and phases."""
    words, lines = sum(graphs.counts.values()), graphs.args.lines
    done, wall, steady = rounds.runs[key], seconds(rounds, key), seconds(rounds, key, True)
    return {
        "seconds_median": round(wall, 3),
        "seconds_runs": [round(r.seconds, 3) for r in done],
        "seconds_warmup": [round(r.seconds, 3) for r in rounds.warmups[key]],
        "words_per_second": round(words / wall),
        "lines_per_second": round(lines / wall),
        "steady_seconds_median": round(steady, 3),
        "steady_words_per_second": round(words / steady),
        "batches": sorted({r.batches for r in done}),
        "output_rows": sorted(graphs.written[key]),
        "phases_median_seconds": {
            "start_to_first_batch": median(r.first_batch for r in done),
            "add_batch": median(r.add_batch for r in done),
        },
    }


def case_report(rounds: Rounds[Key], case: str, graphs: Graphs) -> dict[str, Any]:
    """A case's two variants, their ratios and whether they meet the target."""
    first, second = ((case, v) for v in CASES[case])
    variants = {key[1]: variant_report(rounds, key, graphs) for key in (first, second)}
    ratio = seconds(rounds, second) / seconds(rounds, first)
    steady = seconds(rounds, second, True) / seconds(rounds, first, True)
    names = "_vs_".join(CASES[case])
    return {
        "variants": variants,
        f"ratio_{names}": round(ratio, 3),
        f"steady_ratio_{names}": round(steady, 3),
        "target": TARGETS[case],
        "target_met": ratio >= TARGETS[case],
        "steady_target_met": steady >= TARGETS[case],
    }


def report(rounds: Rounds[Key], graphs: Graphs, spark_version: str) -> dict[str, Any]:
    """Per case its variants and ratios, and the report around them."""
    results = {case: case_report(rounds, case, graphs) for case in graphs.args.cases}
    names = {case: "_vs_".join(CASES[case]) for case in results}
    return {
        "machine": machine(spark_version, shuffle_partitions=2),
        "input": graphs.corpus.report(
            words=sum(graphs.counts.values()),
            distinct_words=len(graphs.counts),
            wordcount_sink_format=graphs.args.format,
        ),
        "repeat": graphs.args.repeat,
        "warmup": graphs.args.warmup,
        "cases": results,
        "ratios": {f"{c}_{names[c]}": r[f"ratio_{names[c]}"] for c, r in results.items()},
        "targets_met": {case: r["target_met"] for case, r in results.items()},
        "notes": NOTES,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the cases, check their outputs, print JSON."""
    return run_cases("graphs", arguments(argv), Graphs, CHAIN_METRICS)


NOTES = [
    TIMING_NOTE,
    "words_per_second = input words (whitespace-separated tokens, line numbers included) / "
    "seconds; ratios divide the first variant's rate by the second's.",
    "the corpus, the graphs and the variants: docs/benchmarks.md, 'Graphs on Spark'. "
    "flamestream releases one row per input word (every update), plain PySpark and "
    "flamestream_latest the latest count per updated word per batch: compare output_rows.",
    "checks (every run, warm-ups included): flamestream's 'word=n' rows read back, per word "
    "the highest n, the rows and the distinct n equal the word's count in a Python Counter "
    "(latest: the highest n equals it, no n twice); plain's count from the latest batch per "
    "word equals it; chain: both variants emit the Python-computed row count and crc32 sum "
    "and the same trace checksum (DataFrame.observe in the timed query). Else exit 1.",
]


if __name__ == "__main__":
    raise SystemExit(main())
