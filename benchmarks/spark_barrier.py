"""Barrier benchmarks: the barrier sink's overhead, and end-to-end latency at half the max rate.

One SparkSession (``local[2]``, 2 shuffle partitions). Prints one JSON object::

    python -m benchmarks.spark_barrier [--parts overhead latency] [--lines N] [--files F]
        [--repeat R] [--warmup W] [--graphs wordcount chain] [--variants ...] [--batches B]
        [--latency-graph wordcount|chain] [--release tasks|commit] [--trigger S]
        [--duration S] [--settle S] [--probe-rows N] [--probe-factor K] [--probes P]
        [--work DIR]

``overhead``: the same graph (word count, 6-step chain) on the files front, its rows written
through the barrier sink (``release=tasks`` / ``commit``), by Spark's JSON file sink (no
barrier) and to ``noop``; interleaved AvailableNow runs, every output checked. Target:
barrier / no-barrier time at most 1.15. ``latency``: the generator pipeline
(:mod:`benchmarks.lib.pipeline`): its max sustainable rate from backlog probes, then a run at
half that rate; per released row, release time - admission time. See ``NOTES``.
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.lib import checkpoint, cli, pipeline
from benchmarks.lib.pipeline import GENERATOR_KEYS, GENERATOR_PARTITIONS, Watched
from benchmarks.lib.record import Record, emit
from benchmarks.lib.session import local_spark
from benchmarks.lib.stats import fit_report, linear_fit, median, summary_ms
from benchmarks.lib.timing import TIMING_NOTE, Run, interleave, timings
from benchmarks.lib.workloads import EXPECTED, GRAPHS, Corpus, files_sink

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


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The flags (overhead: the corpus and variants; latency: the pipeline and probes)."""
    parser = cli.parser(__doc__, timeout=900.0)
    cli.flag(parser, "--parts", ["overhead", "latency"], nargs="+", choices=["overhead", "latency"])
    cli.corpus_flags(parser, 20_000)
    cli.flag(parser, "--graphs", list(GRAPHS), nargs="+", choices=list(GRAPHS))
    cli.flag(parser, "--variants", list(VARIANTS), nargs="+", choices=VARIANTS)
    cli.flag(parser, "--latency-graph", "wordcount", choices=list(GRAPHS))
    cli.flag(
        parser, "--release", "tasks", "latency: the sink's release", choices=["tasks", "commit"]
    )
    cli.flag(parser, "--trigger", 1.0, "latency: processing-time trigger interval, seconds")
    cli.flag(parser, "--duration", 25.0, "latency: seconds of input measured (after --settle)")
    cli.flag(parser, "--settle", 10.0, "latency: seconds of input admitted first, not measured")
    cli.flag(parser, "--probe-rows", 2000, "latency: rows per batch of the small max-rate probe")
    cli.flag(parser, "--probe-factor", 4, "latency: each probe's batches this many times larger")
    cli.flag(parser, "--probes", 4, "latency: max-rate probes at most")
    cli.flag(parser, "--probe-batches", 3, "latency: timed batches per probe (after one untimed)")
    return parser.parse_args(argv)


def checksums(rows: Any, trace_hex: Any) -> list[Any]:
    """Rows, crc32 sum of the values, crc32 sum of the columns but ts (trace as hex).

    ``ts`` is left out: with the wall clock it differs from run to run (the planning time).
    """
    from pyspark.sql import functions as F

    columns = [F.col("front").cast("string"), trace_hex]
    columns += [F.col(c).cast("string") for c in ("flags", "source", "position", "sink", "value")]
    return [
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.crc32(F.col("value").cast("binary"))).alias("values"),
        F.sum(F.crc32(F.concat_ws("|", *columns).cast("binary"))).alias("all"),
    ]


def overhead(
    spark: Any, args: argparse.Namespace, work: cli.Workdir, errors: list[Any]
) -> dict[str, Any]:
    """The graphs with and without the barrier, interleaved; every output checked."""
    from pyspark.sql import functions as F

    from flamestream.spark import apply_graph

    corpus = Corpus.write(work.path / "in", args.lines, args.files, args.batches)
    want = {graph: EXPECTED[graph](args.lines) for graph in args.graphs}

    def define(graph: str, variant: str, out: Path, ck: Path) -> Any:
        rows = apply_graph(GRAPHS[graph](), corpus.front(spark), checkpoint_location=str(ck))
        if variant in BARRIERS:
            return files_sink(rows, out, ck, "json", BARRIERS[variant]).trigger(availableNow=True)
        if variant == "json":
            writer = rows.writeStream.format("json").option("path", str(out))
        else:
            observed = rows.observe(METRICS, *checksums(rows, F.hex("trace")))
            writer = observed.writeStream.format("noop")
        return writer.option("checkpointLocation", str(ck)).trigger(availableNow=True)

    outputs: dict[tuple[str, str], set[tuple[int, int, int]]] = {}

    def written(key: tuple[str, str], out: Path, run: Run) -> None:
        """The rows, values crc32 sum and all-columns crc32 sum the variant wrote."""
        (graph, variant), m = key, run.metrics
        found = (m.get("rows", 0), m.get("values", 0), m.get("all", 0))
        if variant != "noop":
            rows, trace = spark.read.schema(OUTPUT_JSON_DDL).json(str(out)), F.col("trace")
            trace_hex = F.upper(trace) if variant in BARRIERS else F.hex(F.unbase64(trace))
            (row,) = rows.agg(*checksums(rows, trace_hex)).collect()
            found = (int(row["rows"]), int(row["values"] or 0), int(row["all"] or 0))
        outputs.setdefault(key, set()).add(found)
        if found[:2] != want[graph]:
            problem = f"(rows, crc32 sum of values) {found[:2]}, expected {want[graph]}"
            errors.append(
                {
                    "part": "overhead",
                    "graph": graph,
                    "variant": variant,
                    "run": work.count,
                    "error": problem,
                }
            )

    def order(attempt: int) -> list[tuple[str, str]]:
        turn = attempt % len(args.variants)  # the order rotated every round
        return [(g, v) for g in args.graphs for v in args.variants[turn:] + args.variants[:turn]]

    cases = {(g, v): partial(define, g, v) for g in args.graphs for v in args.variants}
    rounds = interleave(cases, work, args, observed=METRICS, check=written, order=order)
    cases_report: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    for graph in args.graphs:
        found = {v: sorted(outputs[graph, v]) for v in args.variants}
        if len({f for v in args.variants for f in outputs[graph, v]}) > 1:
            problem = "the variants wrote different rows (rows, crc32 sums)"
            errors.append({"part": "overhead", "graph": graph, "error": problem, "observed": found})
        summary = timings(
            args.lines,
            {v: rounds.runs[graph, v] for v in args.variants},
            {v: rounds.warmups[graph, v] for v in args.variants},
        )
        case: dict[str, Any] = {**summary.report, "output_rows": want[graph][0], "output": found}
        for variant in (v for v in args.variants if v in BARRIERS and BASELINE in args.variants):
            wall = summary.rate[BASELINE] / summary.rate[variant]
            steady = summary.steady[BASELINE] / summary.steady[variant]
            ratios[f"{graph}_{variant}_vs_{BASELINE}"] = round(wall, 3)
            case[f"ratio_{variant}_vs_{BASELINE}"] = round(wall, 3)
            case[f"steady_ratio_{variant}_vs_{BASELINE}"] = round(steady, 3)
            case[f"target_met_{variant}"] = wall <= TARGET_RATIO
            case[f"steady_target_met_{variant}"] = steady <= TARGET_RATIO
        cases_report[graph] = case
    work.drop(corpus.folder)
    return {
        "input": corpus.report(),
        "repeat": args.repeat,
        "warmup": args.warmup,
        "target": f"barrier / no-barrier seconds <= {TARGET_RATIO}",
        "cases": cases_report,
        "ratios": ratios,
    }


def latency(
    spark: Any, args: argparse.Namespace, work: cli.Workdir, errors: list[Any]
) -> dict[str, Any]:
    """The max sustainable rate, then a run at half of it: its latency per released row."""
    options = {"keys": GENERATOR_KEYS}
    graph, trigger = GRAPHS[args.latency_graph], f"{args.trigger} seconds"
    starter = partial(pipeline.start, spark, graph=graph, release=args.release, trigger=trigger)

    def probe(batch_rows: int) -> dict[str, Any]:
        """Rows/s of the busy pipeline at ``batch_rows`` rows per batch, from a backlog."""
        found = pipeline.probe(
            lambda front, out, ck: starter({**options, **front}, out, ck),
            work,
            batch_rows,
            args.probe_batches,
            args.timeout,
        )
        return {**found, "rows_per_second": round(batch_rows / found["batch_seconds_median"])}

    # batches grow until they take twice as long as the first probe's (the rows' own cost
    # at least the fixed cost, so the rate reached is at least half the asymptote 1 / b)
    probes = [probe(args.probe_rows)]
    while len(probes) < args.probes:
        probes.append(probe(probes[-1]["batch_rows"] * args.probe_factor))
        if probes[-1]["batch_seconds_median"] >= 2 * probes[0]["batch_seconds_median"]:
            break
    ys = [p["batch_seconds_median"] for p in probes]
    sustainable = {
        "probes": probes,
        "fit": fit_report(*linear_fit([p["batch_rows"] for p in probes], ys)),
        "rows_per_second": max(p["rows_per_second"] for p in probes),
        "batches_doubled": ys[-1] >= 2 * ys[0],
    }
    rate = sustainable["rows_per_second"] / 2
    total = round(rate * (args.settle + args.duration))
    out, ck = work.fresh("latency")
    started = time.time()
    query = starter({**options, "rowsPerSecond": rate, "totalRows": total}, out, ck)
    deadline = started + args.settle + args.duration + args.timeout
    watched = pipeline.watch(query, total, deadline, started=started, out=out)
    measured, problems = analyse(watched, out, ck, rate, total, args)
    errors.extend({"part": "latency", "error": p, "work": str(work.path)} for p in problems)
    if not problems:  # else kept in ``work`` to look into
        work.drop(out, ck)
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


def generator_start(
    offsets: dict[int, dict[str, Any]], rate: float, total: int
) -> tuple[float, float] | None:
    """The generator clock's start, bracketed from every batch's base and positions.

    The generator made int(rate * elapsed / partitions) rows per partition by the time a
    batch was planned (``base``): bounds on when its clock started. The bracket's width
    (< 0: inconsistent) comes second.
    """
    bounds = []
    for offset in offsets.values():
        reached = [p for _, _, p, *_ in offset["fronts"]]
        if reached and max(reached) < total // GENERATOR_PARTITIONS and rate:
            t, step = offset["base"] / 1e6, GENERATOR_PARTITIONS / rate
            bounds.append((t - (max(reached) + 1) * step, t - max(reached) * step))
    if not bounds:
        return None
    low, high = max(lo for lo, _ in bounds), min(hi for _, hi in bounds)
    return (low + high) / 2, high - low


def analyse(
    watched: Watched, out: Path, ck: Path, rate: float, total: int, args: argparse.Namespace
) -> tuple[dict[str, Any], list[str]]:
    """Per released row: release time - admission time; and what is wrong, if anything."""
    import pyarrow.json as pj

    offsets = checkpoint.read(ck).offsets
    # per source: batch ends in order, each range's (batch id, start, base)
    ends: dict[str, list[int]] = {}
    ranges: dict[str, list[tuple[int, int, int]]] = {}
    previous: dict[str, int] = {}
    clamped = last_horizon = 0
    for b in sorted(offsets):
        offset = offsets[b]
        clamped += bool(b and offset["base"] == last_horizon)
        last_horizon = offset["horizon"]
        for key, _front, position, *_ in offset["fronts"]:
            if position > previous.get(key, 0):
                ends.setdefault(key, []).append(position)
                ranges.setdefault(key, []).append((b, previous.get(key, 0), offset["base"]))
            previous[key] = position
    clock = generator_start(offsets, rate, total)
    released = {
        e.name: e.stat().st_ctime
        for e in os.scandir(out)
        if e.name.startswith("part-") and e.name.endswith(".jsonl")
    }
    window_start = watched.started + args.settle
    admitted: list[float] = []
    from_ts: list[float] = []
    generated: list[float] = []
    behind = Counter[int]()
    mismatched = rows = duplicates = 0
    seen_keys: set[tuple[str, int]] = set()
    for name, ctime in sorted(released.items()):
        release_batch = int(name.split(".")[0].split("-")[1])  # part-<batch>[-<p>].jsonl
        table = pj.read_json(out / name)
        columns = (table.column(c).to_pylist() for c in ("ts", "source", "position"))
        for ts, src, position in zip(*columns, strict=True):
            rows += 1
            duplicates += (src, position) in seen_keys
            seen_keys.add((src, position))
            batch, start, base = ranges[src][bisect.bisect_right(ends[src], position)]
            behind[release_batch - batch] += 1
            mismatched += ts != base + position - start
            if base / 1e6 < window_start:
                continue
            admitted.append(ctime - base / 1e6)
            from_ts.append(ctime - ts / 1e6)
            if clock is not None:
                generated.append(ctime - clock[0] - (position + 1) * GENERATOR_PARTITIONS / rate)
    problems = []
    if mismatched:
        problems.append(f"{mismatched} rows whose ts is not base + (position - start)")
    if duplicates:
        problems.append(f"{duplicates} input records released more than once")
    if args.latency_graph == "wordcount" and rows != total and watched.finished:
        problems.append(f"{rows} rows released, expected one per input record ({total})")
    if not admitted:
        problems.append("no released row was admitted inside the measured window")
    window = [
        p
        for b, p in sorted(watched.progress.items())
        if offsets.get(b, {}).get("base", 0) / 1e6 >= window_start
    ]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in window]
    half = len(durations) // 2
    result: dict[str, Any] = {
        "released_rows": rows,
        "measured_rows": len(admitted),
        "batches": len(watched.progress),
        "batches_in_window": len(window),
        "batch_seconds_in_window": [round(d, 3) for d in durations],
        "batch_rows_in_window": [int(p["numInputRows"]) for p in window],
        "batch_phases_median_seconds_in_window": {
            name: round(statistics.median(p["durationMs"].get(name, 0) for p in window) / 1000, 3)
            for name in sorted({n for p in window for n in p["durationMs"]})
        },
        # sustained: the batches do not grow over the window (no backlog building up)
        "kept_up": watched.finished
        and half > 0
        and median(durations[half:], None) <= 1.25 * median(durations[:half], None),
        "released_batches_after_admission": dict(sorted(behind.items())),
        "clamped_batches": clamped,
    }
    if admitted:
        result["latency_ms"] = summary_ms(admitted)
        result["latency_from_ts_ms"] = summary_ms(from_ts)
    if generated and clock is not None:
        result["latency_from_generation_ms"] = summary_ms(generated)
        result["generator_clock_bracket_ms"] = round(clock[1] * 1000, 3)
    seen_lag = [watched.seen[n] - c for n, c in released.items() if n in watched.seen]
    if seen_lag:
        result["release_seen_by_poller_after_ctime_ms"] = {
            "median": round(statistics.median(seen_lag) * 1000, 1),
            "max": round(max(seen_lag) * 1000, 1),
        }
    return result, problems


def main(argv: list[str] | None = None) -> int:
    """Run the parts, check every output, print JSON."""
    args = arguments(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = cli.Workdir(args.work, "flamestream-barrier-")
    record = Record()
    spark = local_spark("flamestream-spark-barrier")
    errors: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    try:
        spark_version = spark.version
        if "overhead" in args.parts:
            report["overhead"] = overhead(spark, args, work, errors)
        if "latency" in args.parts and not errors:
            report["latency"] = latency(spark, args, work, errors)
    finally:
        spark.stop()
    if errors:  # the outputs were removed; the input stays in ``work`` to reproduce it
        return emit({"error": "wrong output", "failures": errors, "work": str(work.path)})
    result = {
        "machine": record.machine(spark_version, shuffle_partitions=2),
        **report,
        "notes": NOTES,
    }
    if "overhead" in report:
        result["ratios"] = ratios = report["overhead"]["ratios"]
        result["targets_met"] = {name: ratio <= TARGET_RATIO for name, ratio in ratios.items()}
    return emit(result, work)


NOTES = [
    "overhead: " + TIMING_NOTE + " The variants' order is rotated every round. "
    "rows_per_second counts input lines. ratio = barrier seconds / no-barrier (json) seconds, "
    "steady_ratio the same with steady seconds; target <= 1.15.",
    "overhead variants, all on the same apply_graph(graph, files front, checkpoint_location=ck) "
    "DataFrame (ts, front, trace, flags, source, position, sink, value): barrier_tasks / "
    "barrier_commit = the flamestream files sink, format json, release tasks / commit "
    "(min-time from the offset log, rows below it sorted by global time, invalidated "
    "versions dropped, released once per batch; release=commit stages every row as Arrow and "
    "the driver's commit writes the batch as one file); json = Spark's built-in JSON file "
    "sink (exactly once through its _spark_metadata log, no min-time, no order); noop = the "
    "graph alone, rows counted with DataFrame.observe. Beside the barrier's own work the "
    "ratio includes that the flamestream sink is a Python data source: its rows go JVM -> "
    "Arrow -> a Python worker and are rendered to JSON there, while Spark's sink writes from "
    "the JVM.",
    "overhead check (every run, warm-up included): the output read back (trace hex from "
    "flamestream, base64 from Spark) must have the row count and crc32 sum of values Python "
    "computes for the corpus (word count: one 'word=n' row per word occurrence, n = 1 .. "
    "count; chain: benchmarks.lib.workloads.chain_expected), and all variants the same crc32 "
    "sum over every column but ts (the planning wall clock). Else an error JSON and exit 1.",
    "latency pipeline: generator front (2 partitions = 2 fronts, 100 keys) -> "
    "apply_graph(graph, payload='key', checkpoint_location=ck) -> flamestream files sink "
    "(JSON, --release) with Trigger.ProcessingTime(--trigger).",
    "max sustainable rate: probes of the same pipeline fed from a backlog (rowsPerSecond 0) "
    "with maxRecordsPerTrigger = N, 4 N, 16 N ... until a probe's batches take twice as long "
    "as the first's (at most --probes; batches_doubled says whether they did); a probe's "
    "rate = its rows per batch / the median triggerExecution of its batches after the first. "
    "The max sustainable rate is the best probe rate: measured, not extrapolated. fit: "
    "seconds = a + b * rows through the probes, for reference; 1 / b is the asymptote (too "
    "noisy on a busy machine to run at). Once batches doubled, the best probe rate is at "
    "least half of 1 / b.",
    "latency run: rowsPerSecond = half the max rate, totalRows = rate * (settle + duration), "
    "stopped once its progress shows every row processed (bounded by --timeout). Measured: "
    "the rows admitted after the first --settle seconds from start().",
    "admission: when the front planned the row's batch, i.e. when the row got its global "
    "time: ts = base + (position - start of its range), base = max(the driver's wall clock "
    "in microseconds at planning, previous horizon), checked for every row against the offset "
    "log (read through flamestream's QueryCheckpoint / front_offsets); clamped_batches: "
    "batches whose base was the previous horizon rather than the clock (0 expected). "
    "latency_ms measures from base; latency_from_ts_ms from ts itself.",
    "release: the ctime of part-<batch>-<partition>.jsonl, set by the rename in the sink's "
    "commit. A poller also records when it first lists each file (every 10 ms): "
    "release_seen_by_poller_after_ctime_ms is the cross-check. One host clock for all.",
    "latency_from_generation_ms (for reference): from when the generator made the record "
    "available (clock start + (i + 1) * partitions / rate, the clock start bracketed from "
    "every batch's base and positions) to its release; it adds the wait for the next planning.",
    "kept_up: every row was processed before the deadline and the batches of the second half "
    "of the measured window took at most 1.25 x as long (median) as those of the first half.",
]


if __name__ == "__main__":
    raise SystemExit(main())
