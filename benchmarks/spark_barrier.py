"""Barrier benchmarks: the barrier sink's overhead, and end-to-end latency at half the max rate.

One SparkSession (``local[2]``, 2 shuffle partitions). Prints one JSON object::

    python -m benchmarks.spark_barrier [--parts overhead latency] [--lines N] [--files F]
        [--repeat R] [--warmup W] [--graphs wordcount chain] [--variants ...] [--batches B]
        [--latency-graph wordcount|chain] [--release tasks|commit] [--trigger S]
        [--duration S] [--settle S] [--probe-rows N] [--probe-factor K] [--probes P]
        [--work DIR]

``overhead``
    The same graph (the word count and the 6-step chain of :mod:`benchmarks.spark_graphs`)
    applied with ``apply_graph`` to the files front (the passthrough benchmark's corpus), its
    rows written (a) through the flamestream barrier sink (``format("flamestream")``, sink
    ``files``, JSON lines; ``release=tasks`` and ``release=commit``) and (b) without a barrier
    by Spark's built-in JSON file sink (``format("json")``), plus ``noop`` (the graph alone)
    for reference. ``Trigger.AvailableNow``, runs interleaved; every output is read back and
    must have the rows and checksums Python computes for the corpus (else exit 1). The ratio
    is barrier time / no-barrier time; the issue's target is at most 1.15.

``latency``
    generator front (``rowsPerSecond``, 2 partitions, the graph applied to its ``key``
    column) -> graph -> barrier sink, with a processing-time trigger. First the max
    sustainable rate: the best rows/s of the pipeline fed from a backlog, at batch sizes
    (``maxRecordsPerTrigger``) growing until batches take twice as long as the smallest's.
    Then a run at half that rate for ``settle + duration`` seconds of input
    (``totalRows``), stopped once every row was processed; per released row, release time -
    admission time, over the rows admitted after the first ``settle`` seconds. See ``NOTES``
    for what admission and release mean exactly.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import Run, local_spark, run_query, timings
from benchmarks.spark_graphs import chain_expected, chain_graph, word_count_graph
from benchmarks.spark_passthrough import LINE_BYTES, generate, line
from flamestream.spark.connector.barrier import front_offsets
from flamestream.spark.durable import QueryCheckpoint

#: The graphs both parts can run (built fresh for every query).
GRAPHS: dict[str, Callable[[], Any]] = {"wordcount": word_count_graph, "chain": chain_graph}

#: Overhead variants: two with the barrier, the built-in JSON file sink without it, and noop.
VARIANTS = ("barrier_tasks", "barrier_commit", "json", "noop")

#: The barrier variants, each compared with ``BASELINE``.
BARRIERS = {"barrier_tasks": "tasks", "barrier_commit": "commit"}
BASELINE = "json"

#: Barrier time / no-barrier time should stay at or below this.
TARGET_RATIO = 1.15

#: The observed metrics of the noop variant (its rows and checksums, computed in the query).
METRICS = "flamestream_barrier_output"

#: The columns of JSON written from a graph's output, as read back (``trace`` as text: hex
#: from the flamestream sink, base64 from Spark's JSON writer).
OUTPUT_JSON_DDL = (
    "ts long, front int, trace string, flags int, source string, position long, "
    "sink string, value string"
)

#: Generator front settings of the latency part.
GENERATOR_PARTITIONS = 2
GENERATOR_KEYS = 100


def expected_output(graph: str, lines: int) -> tuple[int, int]:
    """Rows and crc32 sum of the values ``graph`` releases for the corpus (pure Python)."""
    if graph == "chain":
        return chain_expected(lines)
    counts = Counter(word for i in range(lines) for word in line(i).split())
    # every word occurrence releases the word's updated count: "word=1" .. "word=<count>"
    values = sum(
        zlib.crc32(f"{word}={n}".encode())
        for word, count in counts.items()
        for n in range(1, count + 1)
    )
    return sum(counts.values()), values


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of sorted values."""
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary_ms(values: list[float]) -> dict[str, float]:
    """p50, p99, max, mean and min of seconds, in milliseconds."""
    ordered = sorted(values)
    return {
        "p50": round(percentile(ordered, 50) * 1000, 1),
        "p99": round(percentile(ordered, 99) * 1000, 1),
        "max": round(ordered[-1] * 1000, 1),
        "min": round(ordered[0] * 1000, 1),
        "mean": round(statistics.fmean(ordered) * 1000, 1),
    }


def linear_fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a + b * x``: ``(b, a)``."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return slope, mean_y - slope * mean_x


@dataclass
class Watched:
    """A streaming query run until it had processed a number of rows (or a deadline)."""

    started: float  #: wall time (s) just before ``start()``
    progress: dict[int, dict[str, Any]]  #: batch id -> the progress of batches that read rows
    seen: dict[str, float] = field(default_factory=dict)  #: visible file -> first seen (s)
    finished: bool = True  #: every row was processed before the deadline

    @property
    def rows(self) -> int:
        """Input rows processed."""
        return sum(int(p["numInputRows"]) for p in self.progress.values())


def watch(query: Any, rows: int, deadline: float, started: float, out: Path | None) -> Watched:
    """Poll ``query`` until it processed ``rows`` input rows, then stop it.

    With ``out``, also note when each visible file first appears there (every 10 ms).
    """
    watched = Watched(started, {})
    polled = 0.0
    try:
        while True:
            now = time.time()
            if out is not None and out.is_dir():
                for entry in os.scandir(out):
                    if not entry.name.startswith((".", "_")):
                        watched.seen.setdefault(entry.name, now)
            if now - polled >= 0.25:
                polled = now
                for p in query.recentProgress:
                    if int(p["numInputRows"]):
                        watched.progress[int(p["batchId"])] = p
                if watched.rows >= rows:
                    break
                if not query.isActive:
                    watched.finished = watched.rows >= rows
                    break
                if now > deadline:
                    watched.finished = False
                    break
            time.sleep(0.01)
    finally:
        query.stop()
    if query.exception() is not None:
        raise query.exception()
    return watched


def read_offsets(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """Per batch, the flamestream front's end offset from Spark's offset log (one source)."""
    batches = QueryCheckpoint(str(checkpoint)).logged_batches()
    return {b: front_offsets(str(checkpoint), b)[0] for b in batches}


def main(argv: list[str] | None = None) -> int:
    """Run the parts, check every output, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts", nargs="+", choices=["overhead", "latency"], default=["overhead", "latency"]
    )
    parser.add_argument("--lines", type=int, default=20_000, help="overhead: corpus lines")
    parser.add_argument("--files", type=int, default=4, help="overhead: corpus files")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each variant first")
    parser.add_argument("--graphs", nargs="+", choices=list(GRAPHS), default=list(GRAPHS))
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument(
        "--batches",
        type=int,
        default=1,
        help="overhead: split the input into this many batches (maxRecordsPerTrigger)",
    )
    parser.add_argument("--latency-graph", choices=list(GRAPHS), default="wordcount")
    parser.add_argument(
        "--release",
        choices=["tasks", "commit"],
        default="tasks",
        help="latency: the barrier sink's release mode",
    )
    parser.add_argument(
        "--trigger",
        type=float,
        default=1.0,
        help="latency: processing-time trigger interval, seconds",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=25.0,
        help="latency: seconds of input measured (after --settle)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=10.0,
        help="latency: seconds of input admitted first and not measured",
    )
    parser.add_argument(
        "--probe-rows",
        type=int,
        default=2000,
        help="latency: rows per batch of the small max-rate probe",
    )
    parser.add_argument(
        "--probe-factor",
        type=int,
        default=4,
        help="latency: the large probe's batches are this many times larger",
    )
    parser.add_argument(
        "--probes",
        type=int,
        default=4,
        help="latency: max-rate probes at most",
    )
    parser.add_argument(
        "--probe-batches",
        type=int,
        default=3,
        help="latency: timed batches per probe (after one untimed)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per query")
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import Column, DataFrame  # imported here: the input needs no Spark
    from pyspark.sql import functions as F

    from flamestream.spark import apply_graph

    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-barrier-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    spark = local_spark("flamestream-spark-barrier")
    spark_version = spark.version
    errors: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    counter = 0

    def fresh(kind: str) -> tuple[Path, Path]:
        """New output and checkpoint directories (a reused --work may hold old ones)."""
        nonlocal counter
        counter += 1
        paths = work / f"{kind}-out-{counter}", work / f"{kind}-ck-{counter}"
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        return paths

    def checksums(rows: DataFrame, trace_hex: Column) -> list[Column]:
        """Rows, crc32 sum of the values, crc32 sum of the columns but ts (trace as hex).

        ``ts`` is left out: with the wall clock it differs from run to run (the planning time).
        """
        columns = [F.col("front").cast("string"), trace_hex]
        columns += [F.col(c).cast("string") for c in ("flags", "source")]
        columns += [F.col(c).cast("string") for c in ("position", "sink", "value")]
        return [
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.crc32(F.col("value").cast("binary"))).alias("values"),
            F.sum(F.crc32(F.concat_ws("|", *columns).cast("binary"))).alias("all"),
        ]

    # --- part 1: overhead ----------------------------------------------------------------
    def overhead() -> dict[str, Any]:
        source = work / "in"
        input_bytes = generate(source, args.lines, args.files)
        want = {graph: expected_output(graph, args.lines) for graph in args.graphs}

        def define(graph: str, variant: str, out: Path, checkpoint: Path) -> Any:
            reader = spark.readStream.format("flamestream").option("front", "files")
            if args.batches > 1:
                reader = reader.option("maxRecordsPerTrigger", -(-args.lines // args.batches))
            rows = apply_graph(
                GRAPHS[graph](),
                reader.option("path", str(source)).load(),
                checkpoint_location=str(checkpoint),
            )
            if variant in BARRIERS:
                writer = (
                    rows.writeStream.format("flamestream")
                    .option("sink", "files")
                    .option("format", "json")
                    .option("release", BARRIERS[variant])
                    .option("path", str(out))
                )
            elif variant == "json":
                writer = rows.writeStream.format("json").option("path", str(out))
            else:
                observed = rows.observe(METRICS, *checksums(rows, F.hex("trace")))
                writer = observed.writeStream.format("noop")
            return writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)

        def written(variant: str, out: Path, run: Run) -> tuple[int, int, int]:
            """The rows, values crc32 sum and all-columns crc32 sum the variant wrote."""
            if variant == "noop":
                m = run.metrics
                return m.get("rows", 0), m.get("values", 0), m.get("all", 0)
            rows = spark.read.schema(OUTPUT_JSON_DDL).json(str(out))
            trace = F.col("trace")
            trace_hex = F.upper(trace) if variant in BARRIERS else F.hex(F.unbase64(trace))
            (found,) = rows.agg(*checksums(rows, trace_hex)).collect()
            return int(found["rows"]), int(found["values"] or 0), int(found["all"] or 0)

        keys = [(g, v) for g in args.graphs for v in args.variants]
        runs: dict[tuple[str, str], list[Run]] = {key: [] for key in keys}
        warmups: dict[tuple[str, str], list[Run]] = {key: [] for key in keys}
        outputs: dict[tuple[str, str], set[tuple[int, int, int]]] = {key: set() for key in keys}
        for attempt in range(args.warmup + args.repeat):
            turn = attempt % len(args.variants)  # interleaved, the order rotated every round
            order = [
                (g, v) for g in args.graphs for v in args.variants[turn:] + args.variants[:turn]
            ]
            for graph, variant in order:
                out, checkpoint = fresh(f"{graph}-{variant}")
                run = run_query(
                    partial(define, graph, variant, out, checkpoint),
                    args.timeout,
                    observed=METRICS,
                )
                (warmups if attempt < args.warmup else runs)[graph, variant].append(run)
                found = written(variant, out, run)
                outputs[graph, variant].add(found)
                if found[:2] != want[graph]:
                    errors.append(
                        {
                            "part": "overhead",
                            "graph": graph,
                            "variant": variant,
                            "run": counter,
                            "error": f"(rows, crc32 sum of values) {found[:2]}, "
                            f"expected {want[graph]}",
                        }
                    )
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(checkpoint, ignore_errors=True)
        for graph in args.graphs:
            seen = {found for v in args.variants for found in outputs[graph, v]}
            if len(seen) > 1:
                errors.append(
                    {
                        "part": "overhead",
                        "graph": graph,
                        "error": "the variants wrote different rows (rows, crc32 sums)",
                        "observed": {v: sorted(outputs[graph, v]) for v in args.variants},
                    }
                )
        cases: dict[str, Any] = {}
        ratios: dict[str, float] = {}
        for graph in args.graphs:
            summary = timings(
                args.lines,
                {v: runs[graph, v] for v in args.variants},
                {v: warmups[graph, v] for v in args.variants},
            )
            case: dict[str, Any] = {
                **summary.report,
                "output_rows": want[graph][0],
                "output": {v: sorted(outputs[graph, v]) for v in args.variants},
            }
            if BASELINE in args.variants:
                for variant in (v for v in args.variants if v in BARRIERS):
                    wall = summary.rate[BASELINE] / summary.rate[variant]
                    steady = summary.steady[BASELINE] / summary.steady[variant]
                    name = f"{graph}_{variant}_vs_{BASELINE}"
                    ratios[name] = round(wall, 3)
                    case[f"ratio_{variant}_vs_{BASELINE}"] = round(wall, 3)
                    case[f"steady_ratio_{variant}_vs_{BASELINE}"] = round(steady, 3)
                    case[f"target_met_{variant}"] = wall <= TARGET_RATIO
                    case[f"steady_target_met_{variant}"] = steady <= TARGET_RATIO
            cases[graph] = case
        shutil.rmtree(source, ignore_errors=True)
        return {
            "input": {
                "lines": args.lines,
                "bytes": input_bytes,
                "files": args.files,
                "line_bytes": LINE_BYTES,
                "batches": args.batches,
            },
            "repeat": args.repeat,
            "warmup": args.warmup,
            "target": f"barrier / no-barrier seconds <= {TARGET_RATIO}",
            "cases": cases,
            "ratios": ratios,
        }

    # --- part 2: latency -----------------------------------------------------------------
    def start_pipeline(rate: float, total: int, cap: int | None, out: Path, ck: Path) -> Any:
        reader = (
            spark.readStream.format("flamestream")
            .option("front", "generator")
            .option("rowsPerSecond", rate)
            .option("totalRows", total)
            .option("partitions", GENERATOR_PARTITIONS)
            .option("keys", GENERATOR_KEYS)
        )
        if cap is not None:
            reader = reader.option("maxRecordsPerTrigger", cap)
        rows = apply_graph(
            GRAPHS[args.latency_graph](),
            reader.load(),
            payload="key",
            checkpoint_location=str(ck),
        )
        return (
            rows.writeStream.format("flamestream")
            .option("sink", "files")
            .option("format", "json")
            .option("release", args.release)
            .option("path", str(out))
            .option("checkpointLocation", str(ck))
            .trigger(processingTime=f"{args.trigger} seconds")
            .start()
        )

    def probe(batch_rows: int) -> dict[str, Any]:
        """Rows/s of the busy pipeline at ``batch_rows`` rows per batch, from a backlog."""
        out, ck = fresh("probe")
        total = batch_rows * (args.probe_batches + 1)
        started = time.time()
        query = start_pipeline(0, total, batch_rows, out, ck)  # rate 0: all available now
        watched = watch(query, total, started + args.timeout, started, None)
        if not watched.finished:
            msg = f"max-rate probe of {batch_rows} rows per batch did not finish in time"
            raise TimeoutError(msg)
        timed = [watched.progress[b] for b in sorted(watched.progress)[1:]]  # first: warm-up
        seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in timed]
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ck, ignore_errors=True)
        return {
            "batch_rows": batch_rows,
            "batch_seconds": [round(t, 3) for t in seconds],
            "batch_seconds_median": round(statistics.median(seconds), 3),
            "rows_per_second": round(batch_rows / statistics.median(seconds)),
        }

    def max_rate() -> dict[str, Any]:
        """The best rows/s a backlog probe sustained, and the fit seconds = a + b * rows.

        Batches grow by ``--probe-factor`` until they take twice as long as the first
        probe's (the rows' own cost at least the fixed cost, so the rate reached is at least
        half the asymptote 1 / b), ``--probes`` at most.
        """
        probes = [probe(args.probe_rows)]
        while len(probes) < args.probes:
            probes.append(probe(probes[-1]["batch_rows"] * args.probe_factor))
            if probes[-1]["batch_seconds_median"] >= 2 * probes[0]["batch_seconds_median"]:
                break
        xs = [p["batch_rows"] for p in probes]
        ys = [p["batch_seconds_median"] for p in probes]
        per_row, fixed = linear_fit(xs, ys)
        return {
            "probes": probes,
            "fit": {
                "fixed_seconds_per_batch": round(fixed, 3),
                "microseconds_per_row": round(per_row * 1e6, 2),
                "asymptote_rows_per_second": round(1 / per_row) if per_row > 0 else None,
            },
            "rows_per_second": max(p["rows_per_second"] for p in probes),
            "batches_doubled": ys[-1] >= 2 * ys[0],
        }

    def latency() -> dict[str, Any]:
        sustainable = max_rate()
        rate = sustainable["rows_per_second"] / 2
        total = round(rate * (args.settle + args.duration))
        out, ck = fresh("latency")
        started = time.time()
        query = start_pipeline(rate, total, None, out, ck)
        deadline = started + args.settle + args.duration + args.timeout
        watched = watch(query, total, deadline, started, out)
        measured = analyse(watched, out, ck, rate, total)
        return {
            "graph": args.latency_graph,
            "front": "generator",
            "generator": {
                "partitions": GENERATOR_PARTITIONS,
                "keys": GENERATOR_KEYS,
                "payload_column": "key",
            },
            "release": args.release,
            "trigger_seconds": args.trigger,
            "max_sustainable": sustainable,
            "max_sustainable_rows_per_second": sustainable["rows_per_second"],
            "run": {
                "rows_per_second": round(rate, 1),
                "total_rows": total,
                "settle_seconds": args.settle,
                "duration_seconds": args.duration,
                "finished": watched.finished,
            },
            **measured,
        }

    def analyse(watched: Watched, out: Path, ck: Path, rate: float, total: int) -> dict[str, Any]:
        """Per released row: release time - admission time, and the checks."""
        import pyarrow.json as pj

        offsets = read_offsets(ck)
        batches = sorted(offsets)
        # per source: batch ends in order, each with its batch id, start and base
        ends: dict[str, list[int]] = {}
        ranges: dict[str, list[tuple[int, int, int]]] = {}  # (batch, start, base)
        previous: dict[str, int] = {}
        started_bounds: list[tuple[float, float]] = []
        clamped = 0
        last_horizon = 0
        for b in batches:
            offset = offsets[b]
            if offset["base"] == last_horizon and b:
                clamped += 1
            last_horizon = offset["horizon"]
            for key, _front, position, *_ in offset["fronts"]:
                start = previous.get(key, 0)
                if position > start:
                    ends.setdefault(key, []).append(position)
                    ranges.setdefault(key, []).append((b, start, offset["base"]))
                previous[key] = position
            per_partition = total // GENERATOR_PARTITIONS
            reached = [p for _, _, p, *_ in offset["fronts"]]
            if reached and max(reached) < per_partition and rate:
                # the generator made int(rate * elapsed / partitions) rows per partition by
                # the time it was planned (``base``): bounds on when its clock started
                t = offset["base"] / 1e6
                step = GENERATOR_PARTITIONS / rate
                started_bounds.append((t - (max(reached) + 1) * step, t - max(reached) * step))
        generator_start = bracket = None
        if started_bounds:
            low = max(lo for lo, _ in started_bounds)
            high = min(hi for _, hi in started_bounds)
            generator_start, bracket = (low + high) / 2, high - low  # < 0: inconsistent
        released = {}
        for entry in os.scandir(out):
            name = entry.name
            if name.startswith("part-") and name.endswith(".jsonl"):
                released[name] = entry.stat().st_ctime
        window_start = watched.started + args.settle
        latency_ts: list[float] = []
        latency_admitted: list[float] = []
        latency_generated: list[float] = []
        behind = Counter[int]()
        mismatched = 0
        rows = 0
        seen_keys: set[tuple[str, int]] = set()
        duplicates = 0
        for name, ctime in sorted(released.items()):
            release_batch = int(name.split(".")[0].split("-")[1])  # part-<batch>[-<p>].jsonl
            table = pj.read_json(out / name)
            for ts, src, position in zip(
                table.column("ts").to_pylist(),
                table.column("source").to_pylist(),
                table.column("position").to_pylist(),
                strict=True,
            ):
                rows += 1
                if (src, position) in seen_keys:
                    duplicates += 1
                seen_keys.add((src, position))
                index = bisect.bisect_right(ends[src], position)
                batch, start, base = ranges[src][index]
                behind[release_batch - batch] += 1
                if ts != base + position - start:
                    mismatched += 1
                admitted = base / 1e6
                if admitted < window_start:
                    continue
                latency_admitted.append(ctime - admitted)
                latency_ts.append(ctime - ts / 1e6)
                if generator_start is not None:
                    made = generator_start + (position + 1) * GENERATOR_PARTITIONS / rate
                    latency_generated.append(ctime - made)
        problems = []
        if mismatched:
            problems.append(f"{mismatched} rows whose ts is not base + (position - start)")
        if duplicates:
            problems.append(f"{duplicates} input records released more than once")
        if args.latency_graph == "wordcount" and rows != total and watched.finished:
            problems.append(f"{rows} rows released, expected one per input record ({total})")
        if not latency_admitted:
            problems.append("no released row was admitted inside the measured window")
        for problem in problems:
            errors.append({"part": "latency", "error": problem, "work": str(work)})
        seen_lag = [watched.seen[n] - c for n, c in released.items() if n in watched.seen]
        window = [
            p
            for b, p in sorted(watched.progress.items())
            if offsets.get(b, {}).get("base", 0) / 1e6 >= window_start
        ]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in window]
        sizes = [int(p["numInputRows"]) for p in window]
        half = len(durations) // 2
        # sustained: the batches do not grow over the window (no backlog building up)
        kept_up = (
            watched.finished
            and half > 0
            and statistics.median(durations[half:]) <= 1.25 * statistics.median(durations[:half])
        )
        if not problems:  # else kept in ``work`` to look into
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ck, ignore_errors=True)
        result: dict[str, Any] = {
            "released_rows": rows,
            "measured_rows": len(latency_admitted),
            "batches": len(watched.progress),
            "batches_in_window": len(window),
            "batch_seconds_in_window": [round(d, 3) for d in durations],
            "batch_rows_in_window": sizes,
            "batch_phases_median_seconds_in_window": {
                name: round(
                    statistics.median(p["durationMs"].get(name, 0) for p in window) / 1000, 3
                )
                for name in sorted({n for p in window for n in p["durationMs"]})
            },
            "kept_up": kept_up,
            "released_batches_after_admission": dict(sorted(behind.items())),
            "clamped_batches": clamped,
        }
        if latency_admitted:
            result["latency_ms"] = summary_ms(latency_admitted)
            result["latency_from_ts_ms"] = summary_ms(latency_ts)
        if latency_generated and bracket is not None:
            result["latency_from_generation_ms"] = summary_ms(latency_generated)
            result["generator_clock_bracket_ms"] = round(bracket * 1000, 3)
        if seen_lag:
            result["release_seen_by_poller_after_ctime_ms"] = {
                "median": round(statistics.median(seen_lag) * 1000, 1),
                "max": round(max(seen_lag) * 1000, 1),
            }
        return result

    try:
        if "overhead" in args.parts:
            report["overhead"] = overhead()
        if "latency" in args.parts and not errors:
            report["latency"] = latency()
    finally:
        spark.stop()
    if errors:
        # the outputs were removed; the input stays in ``work`` to reproduce the failure
        print(
            json.dumps({"error": "wrong output", "failures": errors, "work": str(work)}, indent=2)
        )
        return 1
    load_after = os.getloadavg()
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "spark": spark_version,
            "master": "local[2]",
            "shuffle_partitions": 2,
            "load_average_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        },
        **report,
        "notes": NOTES,
    }
    if "overhead" in report:
        result["ratios"] = report["overhead"]["ratios"]
        result["targets_met"] = {
            name: ratio <= TARGET_RATIO for name, ratio in report["overhead"]["ratios"].items()
        }
    print(json.dumps(result, indent=2))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


NOTES = [
    "overhead: timing as in the other Spark benchmarks (benchmarks.common.timings): seconds "
    "is wall time from writeStream.start() to the termination of a Trigger.AvailableNow query, "
    "the median of the timed runs after untimed warm-up runs, variants interleaved (their "
    "order rotated every round, so that none always runs first or after the same one), each run "
    "into fresh output and checkpoint directories; steady sums the batches' "
    "triggerExecution. rows_per_second counts input lines. ratio = barrier seconds / "
    "no-barrier (json) seconds, steady_ratio the same with steady seconds; target <= 1.15.",
    "overhead variants, all on the same apply_graph(graph, files front, checkpoint_location=ck) "
    "DataFrame (ts, front, trace, flags, source, position, sink, value): barrier_tasks / "
    "barrier_commit = writeStream.format('flamestream') sink files, format json, release "
    "tasks / commit (min-time from the offset log, rows below it sorted by global time, "
    "invalidated versions dropped, released once per batch; release=commit stages every row "
    "as Arrow and the driver's commit writes the batch as one file); json = Spark's built-in "
    "JSON file sink (exactly once through its _spark_metadata log, no min-time, no order); "
    "noop = Spark's noop sink (the graph alone, rows counted with DataFrame.observe). What "
    "the ratio includes beside the barrier's own work: the flamestream sink is a Python data "
    "source, so its rows go JVM -> Arrow -> a Python worker and are rendered to JSON there, "
    "while Spark's JSON sink writes from the JVM.",
    "overhead check (every run, warm-up included): the output read back (spark.read.json, "
    "trace hex from flamestream, base64 from Spark) must have the row count and crc32 sum of "
    "values Python computes for the corpus (word count: one 'word=n' row per word "
    "occurrence, n = 1 .. count; chain: benchmarks.spark_graphs.chain_expected), and all "
    "variants the same crc32 sum over every column but ts (ts is the planning wall clock, "
    "different in every run). Else an error JSON and exit 1.",
    "latency pipeline: generator front (2 partitions = 2 fronts, 100 keys, 16-byte payload) "
    "-> apply_graph(graph, payload='key', checkpoint_location=ck) -> flamestream files sink "
    "(JSON, --release) with Trigger.ProcessingTime(--trigger).",
    "max sustainable rate: probes of the same pipeline fed from a backlog (totalRows "
    "available at once: rowsPerSecond 0) with maxRecordsPerTrigger = N, 4 N, 16 N ... rows "
    "per batch until a probe's batches take twice as long as the first's (at most --probes, "
    "batches_doubled says whether they did); a probe's rate = its rows per batch / the median "
    "triggerExecution of its batches after the first (a backlog keeps the pipeline busy: "
    "batches run back to back). The max sustainable rate is the best probe rate: measured, "
    "not extrapolated. For reference, fit: a least-squares line seconds = a + b * rows "
    "through the probes; 1 / b is the asymptote (the rate at which the backlog stops growing "
    "however large the batches; on a busy machine it is too noisy to run at: half of it was "
    "not sustained in a trial). Once batches doubled, the best probe rate is at least half of "
    "1 / b.",
    "latency run: rowsPerSecond = half the max rate, totalRows = rate * (settle + duration); "
    "the generator's clock starts when the query first plans; the query is stopped once its "
    "progress shows every row processed (bounded by --timeout). Measured: the rows admitted "
    "after the first --settle seconds from start() (query start, the first batches' Python "
    "workers and the catch-up after them are left out).",
    "admission: when the front planned the row's batch, i.e. when the row got its global "
    "time. With the default clock the front stamps ts = base + (position - start of its "
    "range), base = max(time.time_ns() // 1000 at planning, previous horizon): the driver's "
    "wall clock in microseconds, plus the row's index in its range (checked for every row "
    "against the offset log, checkpoint/offsets/<batch>, which holds base and the range ends; "
    "clamped_batches counts batches whose base was the previous horizon rather than the "
    "clock: 0 expected). latency_ms measures from base (the planning instant); "
    "latency_from_ts_ms from ts itself (smaller by at most the rows per front per batch, in "
    "microseconds).",
    "release: when the row's output file became visible under its final name: the ctime of "
    "part-<batch>-<partition>.jsonl, set by the rename in the sink's commit (release=tasks: "
    "publish renames the task's hidden part; release=commit: the commit writes a temporary "
    "file and renames it). A poller in the benchmark also records when it first lists each "
    "file (every 10 ms): release_seen_by_poller_after_ctime_ms is the cross-check. Driver, "
    "planner process and poller share one host clock.",
    "latency_from_generation_ms (for reference, not the admission latency): from when the "
    "generator made the record available (record i of a partition: clock start + (i + 1) * "
    "partitions / rate, the clock start bracketed from every batch's base and positions) to "
    "its release; it adds the wait for the next batch to be planned.",
    "kept_up: every row was processed before the deadline and the batches of the second half "
    "of the measured window took at most 1.25 x as long (median) as those of the first half "
    "(no backlog building up).",
]


if __name__ == "__main__":
    raise SystemExit(main())
