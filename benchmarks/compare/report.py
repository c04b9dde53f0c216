"""The comparison's JSON: per variant medians, runs, rates and load; ratios; versions."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Ratios reported besides each variant's against ``counter``: (variant, measured against).
PAIRS = (
    ("flamestream_latest", "plain_pyspark"),
    ("flamestream_latest", "bytewax"),
    ("flamestream_latest", "pathway"),
    ("flamestream_every", "plain_pyspark"),
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


def variant_report(measured: Measured, words: int, lines: int) -> dict[str, Any]:
    """One variant's section: median seconds, words/s and lines/s, all runs, errors."""
    median = measured.median()
    found: dict[str, Any] = {
        "seconds_median": None if median is None else round(median, 3),
        "words_per_second": None if median is None else round(words / median),
        "lines_per_second": None if median is None else round(lines / median),
        "runs": measured.runs,
        "warmup": measured.warmups,
    }
    if measured.errors:
        found["errors"] = measured.errors
    return found


def ratios(medians: dict[str, float | None]) -> dict[str, float | None]:
    """words/s of a variant over another's (PAIRS, then each over ``counter``'s)."""
    pairs = [p for p in PAIRS if p[0] in medians and p[1] in medians]
    pairs += [(v, "counter") for v in medians if v != "counter" and "counter" in medians]
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
    "words_per_second = the corpus' words / median seconds; a ratio a_vs_b is a's words/s "
    "over b's (above 1: a is faster).",
    "flamestream_latest / flamestream_every: the files front's reader -> SparkGraph("
    "flat_map(str.split) -> flamestream.count -> map Template('{key}={value}'), "
    "release=latest | every).write_stream (the first stage runs in the front's reads, for "
    "latest in Arrow, the keyed stage and its render step in the sink's write tasks, in "
    "Arrow) -> flamestream files sink (parquet, as plain_pyspark writes, release=tasks); "
    "_opaque: the count as map_reduce with a lambda mapper and a lambda render, _apply: "
    "apply on the loaded front then writeStream. latest releases each "
    "updated word's latest count once per batch, every "
    "releases every update. Checked: the highest count released per word equals the "
    "Counter's, no count is released twice (every: one row per update).",
    "plain_pyspark: readStream.text -> explode(split(value, ' ')) -> groupBy(word).count() "
    "in update mode -> foreachBatch overwriting parquet dir batch=<id> (idempotent). Checked: "
    "the latest batch's count per word equals the Counter's.",
    "bytewax: DirSource(*.txt) -> flat_map str.split -> count_final -> TestingSink, run_main "
    "(1 worker). pathway: pw.io.plaintext.read(static) -> apply_with_type(str.split) -> "
    "flatten -> groupby(word).reduce(count) -> pw.io.subscribe, PATHWAY_THREADS=1. Each runs "
    "in its own virtualenv under <work>/venvs; its counts come back as JSON and must equal "
    "the Counter's.",
    "A variant whose counts differ, or that fails, is listed under errors and in its "
    "variant's errors (and the exit status is 1); it is not retried in later rounds.",
]
