"""The comparison's JSON: per variant medians, runs, rates and load; ratios; versions."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Ratios reported besides each word count variant's against ``counter``: (variant, measured
#: against). Targets (issue 33): lambdas >= 1.5x pyspark_udf and >= 0.5x flamestream_latest
#: (within 2x of the declared count), gaps >= 3x pyspark_gaps_pandas_state.
PAIRS = (
    ("flamestream_latest", "plain_pyspark"),
    ("flamestream_latest", "bytewax"),
    ("flamestream_latest", "pathway"),
    ("flamestream_every", "plain_pyspark"),
    ("flamestream_every_values", "plain_pyspark"),
    ("flamestream_lambdas", "pyspark_udf"),
    ("flamestream_lambdas", "flamestream_latest"),
    ("flamestream_lambdas", "plain_pyspark"),
    ("flamestream_readme", "plain_pyspark"),
    ("flamestream_readme_apply", "plain_pyspark"),
    ("flamestream_readme_apply", "flamestream_readme"),
    ("flamestream_gaps", "pyspark_gaps_pandas_state"),
    ("flamestream_gaps", "pyspark_gaps_transform_with_state"),
)


@dataclass
class Measured:
    """A variant's runs: the timed ones, the untimed warm-ups, its errors."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    warmups: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def median(self) -> float | None:
        """The median seconds of the timed runs (None without any)."""
        return statistics.median(r["seconds"] for r in self.runs) if self.runs else None


def variant_report(measured: Measured, units: dict[str, int]) -> dict[str, Any]:
    """One variant's section: median seconds, ``<unit>_per_second`` per unit, runs, errors.

    ``units``: what one run processes, e.g. ``{"words": .., "lines": ..}`` for the word count,
    ``{"events": .., "gaps": ..}`` for the gaps workload.
    """
    median = measured.median()
    found: dict[str, Any] = {"seconds_median": None if median is None else round(median, 3)}
    for unit, amount in units.items():
        found[f"{unit}_per_second"] = None if median is None else round(amount / median)
    found |= {"runs": measured.runs, "warmup": measured.warmups}
    if measured.errors:
        found["errors"] = measured.errors
    return found


def ratios(
    medians: dict[str, float | None], against_counter: Iterable[str] = ()
) -> dict[str, float | None]:
    """A variant's rate over another's (PAIRS, then each of ``against_counter`` over counter's).

    Both of a pair process the same input, so the ratio is their median seconds inverted.
    """
    pairs = [p for p in PAIRS if p[0] in medians and p[1] in medians]
    if "counter" in medians:
        pairs += [(v, "counter") for v in against_counter if v != "counter" and v in medians]
    found: dict[str, float | None] = {}
    for variant, other in pairs:
        mine, theirs = medians[variant], medians[other]
        found[f"{variant}_vs_{other}"] = round(theirs / mine, 4) if mine and theirs else None
    return found


def machine() -> dict[str, Any]:
    """Python, CPUs, platform and the load now."""
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_now": [round(x, 2) for x in os.getloadavg()],
    }


def git_commit() -> dict[str, Any]:
    """The commit of the checkout and whether the library's sources differ from it."""
    root = str(Path(__file__).resolve().parents[2])

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(  # noqa: S603
                ["git", "-C", root, *argv],  # noqa: S607
                capture_output=True,
                text=True,
                check=True,
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "python_modified": bool(git("status", "--porcelain", "--", "python")),
    }


NOTES = [
    "seconds: for the Spark variants wall time from writeStream.start() to the query's "
    "termination (Trigger.AvailableNow, one SparkSession local[2] with 2 shuffle partitions, "
    "each run into fresh output and checkpoint directories, after one untimed warm-up each); "
    "for bytewax and pathway the flow's run as timed inside the peer's script (run_main / "
    "pw.run), excluding the interpreter's start and imports (process_seconds includes them); "
    "for counter one pass of collections.Counter over the files in this process. Variants "
    "run interleaved (A B C .. A B C ..), the median of the rounds is reported; "
    "load_before/load_after are os.getloadavg() around each run.",
    "words_per_second = the word corpus' words / median seconds (gaps variants: "
    "events_per_second = the event corpus' events / median seconds); a ratio a_vs_b is a's "
    "rate over b's on the same input (above 1: a is faster). Targets: flamestream_lambdas_vs_"
    "pyspark_udf >= 1.5, flamestream_lambdas_vs_flamestream_latest >= 0.5 (within 2x of the "
    "declared count), flamestream_gaps_vs_pyspark_gaps_pandas_state >= 3, "
    "flamestream_every_values_vs_plain_pyspark >= 0.7.",
    "flamestream_latest / flamestream_every: the files front's reader -> SparkGraph("
    "flat_map(str.split) -> flamestream.count -> map Template('{key}={value}'), "
    "release=latest | every).write_stream (the first stage runs in the front's reads, for "
    "latest in Arrow, the keyed stage and its render step in the sink's write tasks, in "
    "Arrow) -> flamestream files sink (parquet, as plain_pyspark writes, release=tasks); "
    "_apply (only with --variants): apply on the loaded front then writeStream. latest "
    "releases each updated word's latest count once per batch, every releases every update. "
    "flamestream_every_values: flamestream_every with the sink's columns=value (the released "
    "rows' values only; the barrier still orders by the whole meta). "
    "Checked: the highest count released per word equals the Counter's, no count is released "
    "twice (every: one row per update).",
    "flamestream_lambdas: flamestream_latest with the count written the way a user writes "
    "their own reduce: flat_map(str.split) -> map_reduce(mapper=lambda w: (w, 1), "
    "reducer=operator.add, commutative=True) -> map(lambda r: f'{r.key}={r.value}'), "
    "release=latest, write_stream -> files sink (parquet): Python per word (the general "
    "path). Checked as flamestream_latest.",
    "flamestream_readme / flamestream_readme_apply: the README's first graph, "
    "flat_map(str.split) -> map_reduce(mapper=lambda w: (w, 1), reducer=lambda a, b: a + b) "
    "-> sink (Reduced items rendered by repr), release=every, into the files sink as JSON; "
    "through write_stream (the front's reader) and through apply on the loaded front then "
    "writeStream. Checked: per word every count 1..n released once, n the Counter's.",
    "own_work (in process, no Spark, --own-work-lines lines of the corpus): per word the "
    "CPU microseconds of a general-path stage (stage_us: the front's reads of the lambda word "
    "count latest and of the README graph, the README graph's keyed write task), of the "
    "user's functions called alone on the same inputs (user_us), and their difference, "
    "flamestream's own work (own_us; target <= 0.3).",
    "plain_pyspark: readStream.text -> explode(split(value, ' ')) -> groupBy(word).count() "
    "in update mode -> foreachBatch overwriting parquet dir batch=<id> (idempotent). Checked: "
    "the latest batch's count per word equals the Counter's.",
    "pyspark_udf: flamestream_lambdas' peer, the same Python split in PySpark: "
    "readStream.text -> explode(split_words(value)) with split_words = "
    "@udf(returnType=ArrayType(StringType()), useArrow=True) over line.split() (an "
    "Arrow-optimized Python UDF) -> groupBy(word).count() in update mode -> the same "
    "foreachBatch as plain_pyspark. Checked as plain_pyspark.",
    "gaps workload (events_input): JSON lines {key, time} in event_files files, times "
    "strictly increasing within a file and distinct across files, keys uniform over keys "
    "keys, so a key's events interleave across the files. Each variant releases, per key and "
    "for each event but the key's first in time order, (key, time, time - previous time); "
    "checked: the released rows equal exactly (as a multiset) the reference computed in "
    "plain Python by sorting each key's times.",
    "flamestream_gaps: files front with clock=record, timestampField=time (a record's global "
    "time is its time, so a key's global-time order is its time order across files) -> "
    "SparkGraph(map(lambda t: json.loads(t)) -> grouping(window=2, key=lambda e: e['key']) -> "
    "filter(lambda p: len(p) == 2) -> map(lambda p: 'key,time,gap'), release=every)"
    ".write_stream -> files sink (parquet, release=tasks). clock=record costs a second read "
    "of the input on the driver (the planner carries each front's clamp state in the "
    "offsets), part of its seconds.",
    "pyspark_gaps_pandas_state: readStream.text -> from_json(value, 'key string, time long') "
    "-> groupBy(key).applyInPandasWithState(fn, 'key string, time long, gap long', "
    "'last long', 'append', GroupStateTimeout.NoTimeout), fn sorting the key's times of the "
    "batch (numpy), prepending the state's last time, emitting the differences and keeping "
    "the last time -> foreachBatch overwriting parquet dir batch=<id>. "
    "pyspark_gaps_transform_with_state: the same with transformWithStateInPandas (a "
    "StatefulProcessor with a value state 'last', timeMode None, append), in "
    "spark.newSession() with the RocksDB state store provider (the SQL conf it requires; "
    "the same SparkContext). Both peers sort within a batch: they are correct only if no "
    "event of a key reaches a later batch than an event of that key with a greater time; "
    "here every run reads all files in one batch (AvailableNow, no maxFilesPerTrigger), so "
    "that holds. flamestream's grouping needs no such assumption (late events are replayed "
    "into place).",
    "bytewax: DirSource(*.txt) -> flat_map str.split -> count_final -> TestingSink, run_main "
    "(1 worker). pathway: pw.io.plaintext.read(static) -> apply_with_type(str.split) -> "
    "flatten -> groupby(word).reduce(count) -> pw.io.subscribe, PATHWAY_THREADS=1. Each runs "
    "in its own virtualenv under <work>/venvs; its counts come back as JSON and must equal "
    "the Counter's.",
    "A variant whose counts differ, or that fails, is listed under errors and in its "
    "variant's errors (and the exit status is 1); it is not retried in later rounds.",
]
