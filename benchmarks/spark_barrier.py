"""Barrier benchmarks: the barrier sink's overhead, and end-to-end latency at half the max rate.

``overhead``: one graph (word count, 6-step chain) on the files front, its rows written
through the barrier sink (``release=tasks`` / ``commit``), Spark's JSON file sink (no
barrier) and ``noop``; interleaved AvailableNow runs, every output checked; target: barrier /
no-barrier seconds at most 1.15. ``latency``: the generator pipeline's max sustainable rate
from backlog probes, then a run at half of it: per released row, release - admission time.
See docs/benchmarks.md. Prints one JSON object::

    python -m benchmarks.spark_barrier [--parts overhead latency] [--lines N] [--files F]
        [--repeat R] [--warmup W] [--graphs wordcount chain] [--variants ...] [--batches B]
        [--latency-graph wordcount|chain] [--release tasks|commit] [--trigger S]
        [--duration S] [--settle S] [--probe-rows N] [--probe-factor K] [--probes P]
        [--work DIR]
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.lib import checkpoint, cli, pipeline
from benchmarks.lib.pipeline import GENERATOR_KEYS, GENERATOR_PARTITIONS, Watched
from benchmarks.lib.record import Record, emit
from benchmarks.lib.session import spark_session
from benchmarks.lib.stats import fit_report, linear_fit, median, summary_ms
from benchmarks.lib.timing import TIMING_NOTE, Rounds, Run, interleave, timings
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


def checksums(rows: Any, trace: Any) -> list[Any]:
    """Rows, crc32 sum of the values, crc32 sum of the columns but ts, as released.

    ``ts`` is left out: with the wall clock it differs from run to run (the planning time).
    ``trace`` (binary) and ``flags`` count as a barrier sink releases them: the trace's
    lineage (hex), no may-invalidate flag; the variants without a barrier write them raw.
    """
    from pyspark.sql import functions as F

    from flamestream.spark.apply import lineage_of

    flags = F.col("flags").bitwiseAND(F.lit(-2)).cast("string")
    columns = [F.col("front").cast("string"), F.hex(lineage_of(trace)), flags]
    columns += [F.col(c).cast("string") for c in ("source", "position", "sink", "value")]
    return [
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.crc32(F.col("value").cast("binary"))).alias("values"),
        F.sum(F.crc32(F.concat_ws("|", *columns).cast("binary"))).alias("all"),
    ]


Key = tuple[str, str]


class Overhead:
    """The graphs with and without the barrier on one corpus; every output checked."""

    def __init__(
        self, spark: Any, args: argparse.Namespace, work: cli.Workdir, errors: list[Any]
    ) -> None:
        self.spark, self.args, self.work, self.errors = spark, args, work, errors
        self.corpus = Corpus.write(work.path / "in", args.lines, args.files, args.batches)
        self.want = {graph: EXPECTED[graph](args.lines) for graph in args.graphs}
        self.outputs: dict[Key, set[tuple[int, int, int]]] = {}

    def define(self, graph: str, variant: str, out: Path, ck: Path) -> Any:
        """The graph's rows to the variant's sink."""
        from pyspark.sql import functions as F

        from flamestream.spark import apply_graph

        front = self.corpus.front(self.spark)
        rows = apply_graph(GRAPHS[graph](), front, checkpoint_location=str(ck))
        if variant in BARRIERS:
            return files_sink(rows, out, ck, "json", BARRIERS[variant]).trigger(availableNow=True)
        if variant == "json":
            writer = rows.writeStream.format("json").option("path", str(out))
        else:
            observed = rows.observe(METRICS, *checksums(rows, F.col("trace")))
            writer = observed.writeStream.format("noop")
        return writer.option("checkpointLocation", str(ck)).trigger(availableNow=True)

    def check(self, key: Key, out: Path, run: Run) -> None:
        """The rows, values crc32 sum and all-columns crc32 sum the variant wrote."""
        from pyspark.sql import functions as F

        (graph, variant), m = key, run.metrics
        found = (m.get("rows", 0), m.get("values", 0), m.get("all", 0))
        if variant != "noop":
            rows, trace = self.spark.read.schema(OUTPUT_JSON_DDL).json(str(out)), F.col("trace")
            binary = F.unhex(trace) if variant in BARRIERS else F.unbase64(trace)
            (row,) = rows.agg(*checksums(rows, binary)).collect()
            found = (int(row["rows"]), int(row["values"] or 0), int(row["all"] or 0))
        self.outputs.setdefault(key, set()).add(found)
        if found[:2] != self.want[graph]:
            problem = f"(rows, crc32 sum of values) {found[:2]}, expected {self.want[graph]}"
            failure = {"part": "overhead", "graph": graph, "variant": variant}
            self.errors.append({**failure, "run": self.work.count, "error": problem})

    def order(self, attempt: int) -> list[Key]:
        """A round's order: the variants rotated every round."""
        turn, variants = attempt % len(self.args.variants), self.args.variants
        return [(g, v) for g in self.args.graphs for v in variants[turn:] + variants[:turn]]

    def run(self) -> dict[str, Any]:
        """Interleave the cases; per graph its timings, outputs and ratios."""
        graphs, variants = self.args.graphs, self.args.variants
        cases = {(g, v): partial(self.define, g, v) for g in graphs for v in variants}
        rounds = interleave(
            cases, self.work, self.args, observed=METRICS, check=self.check, order=self.order
        )
        found = {graph: self.graph_report(rounds, graph) for graph in graphs}
        self.work.drop(self.corpus.folder)
        return {
            "input": self.corpus.report(),
            "repeat": self.args.repeat,
            "warmup": self.args.warmup,
            "target": f"barrier / no-barrier seconds <= {TARGET_RATIO}",
            "cases": found,
            "ratios": {
                f"{graph}_{name[len('ratio_') :]}": ratio
                for graph, case in found.items()
                for name, ratio in case.items()
                if name.startswith("ratio_")
            },
        }

    def graph_report(self, rounds: Rounds[Key], graph: str) -> dict[str, Any]:
        """A graph's timings, what each variant wrote, and the barriers' ratios."""
        variants = self.args.variants
        found = {v: sorted(self.outputs[graph, v]) for v in variants}
        if len({f for v in variants for f in self.outputs[graph, v]}) > 1:
            problem = "the variants wrote different rows (rows, crc32 sums)"
            self.errors.append(
                {"part": "overhead", "graph": graph, "error": problem, "observed": found}
            )
        summary = timings(
            self.args.lines,
            {v: rounds.runs[graph, v] for v in variants},
            {v: rounds.warmups[graph, v] for v in variants},
        )
        case = {**summary.report, "output_rows": self.want[graph][0], "output": found}
        for variant in (v for v in variants if v in BARRIERS and BASELINE in variants):
            wall = summary.rate[BASELINE] / summary.rate[variant]
            steady = summary.steady[BASELINE] / summary.steady[variant]
            case[f"ratio_{variant}_vs_{BASELINE}"] = round(wall, 3)
            case[f"steady_ratio_{variant}_vs_{BASELINE}"] = round(steady, 3)
            case[f"target_met_{variant}"] = wall <= TARGET_RATIO
            case[f"steady_target_met_{variant}"] = steady <= TARGET_RATIO
        return case


def max_sustainable(starter: Any, work: cli.Workdir, args: argparse.Namespace) -> dict[str, Any]:
    """Backlog probes, batches growing until they take twice as long as the first probe's.

    The rows' own cost is then at least the fixed cost: the best rate reached is at least
    half the asymptote 1 / b.
    """

    def probe(batch_rows: int) -> dict[str, Any]:
        found = pipeline.probe(starter, work, batch_rows, args.probe_batches, args.timeout)
        return {**found, "rows_per_second": round(batch_rows / found["batch_seconds_median"])}

    probes = [probe(args.probe_rows)]
    while len(probes) < args.probes:
        probes.append(probe(probes[-1]["batch_rows"] * args.probe_factor))
        if probes[-1]["batch_seconds_median"] >= 2 * probes[0]["batch_seconds_median"]:
            break
    ys = [p["batch_seconds_median"] for p in probes]
    return {
        "probes": probes,
        "fit": fit_report(*linear_fit([p["batch_rows"] for p in probes], ys)),
        "rows_per_second": max(p["rows_per_second"] for p in probes),
        "batches_doubled": ys[-1] >= 2 * ys[0],
    }


def latency(
    spark: Any, args: argparse.Namespace, work: cli.Workdir, errors: list[Any]
) -> dict[str, Any]:
    """The max sustainable rate, then a run at half of it: its latency per released row."""

    def starter(front: dict[str, Any], out: Path, ck: Path) -> Any:
        return pipeline.start(
            spark,
            {"keys": GENERATOR_KEYS, **front},
            out,
            ck,
            graph=GRAPHS[args.latency_graph],
            release=args.release,
            trigger=f"{args.trigger} seconds",
        )

    sustainable = max_sustainable(starter, work, args)
    rate = sustainable["rows_per_second"] / 2
    total = round(rate * (args.settle + args.duration))
    out, ck = work.fresh("latency")
    started = time.time()
    query = starter({"rowsPerSecond": rate, "totalRows": total}, out, ck)
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


@dataclass
class Ranges:
    """Per source the batches' end positions in order, each range's (batch, start, base)."""

    ends: dict[str, list[int]] = field(default_factory=dict)
    ranges: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    clamped: int = 0  #: batches whose base was the previous horizon, not the clock

    @classmethod
    def of(cls, offsets: dict[int, dict[str, Any]]) -> Ranges:
        """The ranges of the offset log."""
        found, previous, last_horizon = cls(), dict[str, int](), 0
        for b in sorted(offsets):
            offset = offsets[b]
            found.clamped += bool(b and offset["base"] == last_horizon)
            last_horizon = offset["horizon"]
            for key, _front, position, *_ in offset["fronts"]:
                if position > previous.get(key, 0):
                    found.ends.setdefault(key, []).append(position)
                    found.ranges.setdefault(key, []).append(
                        (b, previous.get(key, 0), offset["base"])
                    )
                previous[key] = position
        return found

    def of_row(self, source: str, position: int) -> tuple[int, int, int]:
        """The (batch, start, base) of the range that read a row."""
        return self.ranges[source][bisect.bisect_right(self.ends[source], position)]


@dataclass
class Released:
    """The released rows: latencies of those admitted in the window, and the checks' counts."""

    admitted: list[float] = field(default_factory=list)  #: release - base
    from_ts: list[float] = field(default_factory=list)  #: release - ts
    generated: list[float] = field(default_factory=list)  #: release - made available
    behind: Counter[int] = field(default_factory=Counter)  #: release batch - read batch
    rows: int = 0
    duplicates: int = 0
    mismatched: int = 0  #: rows whose ts is not base + (position - start)


def released_rows(
    out: Path, files: dict[str, float], ranges: Ranges, window_start: float, rate: float, clock: Any
) -> Released:
    """Every released row's admission (its batch's base) and release (its file's ctime)."""
    import pyarrow.json as pj

    found, seen = Released(), set[tuple[str, int]]()
    for name, ctime in sorted(files.items()):
        release_batch = int(name.split(".")[0].split("-")[1])  # part-<batch>[-<p>].jsonl
        table = pj.read_json(out / name)
        columns = (table.column(c).to_pylist() for c in ("ts", "source", "position"))
        for ts, src, position in zip(*columns, strict=True):
            found.rows += 1
            found.duplicates += (src, position) in seen
            seen.add((src, position))
            batch, start, base = ranges.of_row(src, position)
            found.behind[release_batch - batch] += 1
            found.mismatched += ts != base + position - start
            if base / 1e6 < window_start:
                continue
            found.admitted.append(ctime - base / 1e6)
            found.from_ts.append(ctime - ts / 1e6)
            if clock is not None:
                made = clock[0] + (position + 1) * GENERATOR_PARTITIONS / rate
                found.generated.append(ctime - made)
    return found


def problems_of(found: Released, total: int, finished: bool, graph: str) -> list[str]:
    """What is wrong with the released rows, if anything."""
    problems = []
    if found.mismatched:
        problems.append(f"{found.mismatched} rows whose ts is not base + (position - start)")
    if found.duplicates:
        problems.append(f"{found.duplicates} input records released more than once")
    if graph == "wordcount" and found.rows != total and finished:
        problems.append(f"{found.rows} rows released, expected one per input record ({total})")
    if not found.admitted:
        problems.append("no released row was admitted inside the measured window")
    return problems


def window_report(watched: Watched, offsets: dict[int, Any], window_start: float) -> dict[str, Any]:
    """The batches planned inside the measured window, and whether they kept up."""
    window = [
        p
        for b, p in sorted(watched.progress.items())
        if offsets.get(b, {}).get("base", 0) / 1e6 >= window_start
    ]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in window]
    half = len(durations) // 2
    return {
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
    }


def analyse(
    watched: Watched, out: Path, ck: Path, rate: float, total: int, args: argparse.Namespace
) -> tuple[dict[str, Any], list[str]]:
    """Per released row: release time - admission time; and what is wrong, if anything."""
    offsets = checkpoint.read(ck).offsets
    ranges, clock = Ranges.of(offsets), generator_start(offsets, rate, total)
    files = {
        e.name: e.stat().st_ctime
        for e in os.scandir(out)
        if e.name.startswith("part-") and e.name.endswith(".jsonl")
    }
    window_start = watched.started + args.settle
    found = released_rows(out, files, ranges, window_start, rate, clock)
    result: dict[str, Any] = {
        "released_rows": found.rows,
        "measured_rows": len(found.admitted),
        **window_report(watched, offsets, window_start),
        "released_batches_after_admission": dict(sorted(found.behind.items())),
        "clamped_batches": ranges.clamped,
    }
    if found.admitted:
        result["latency_ms"] = summary_ms(found.admitted)
        result["latency_from_ts_ms"] = summary_ms(found.from_ts)
    if found.generated and clock is not None:
        result["latency_from_generation_ms"] = summary_ms(found.generated)
        result["generator_clock_bracket_ms"] = round(clock[1] * 1000, 3)
    seen_lag = [watched.seen[n] - c for n, c in files.items() if n in watched.seen]
    if seen_lag:
        result["release_seen_by_poller_after_ctime_ms"] = {
            "median": round(statistics.median(seen_lag) * 1000, 1),
            "max": round(max(seen_lag) * 1000, 1),
        }
    return result, problems_of(found, total, watched.finished, args.latency_graph)


def run_parts(spark: Any, args: argparse.Namespace, work: cli.Workdir) -> dict[str, Any]:
    """The parts asked for (latency only if overhead found no error); errors under ``error``."""
    errors: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    if "overhead" in args.parts:
        report["overhead"] = Overhead(spark, args, work, errors).run()
    if "latency" in args.parts and not errors:
        report["latency"] = latency(spark, args, work, errors)
    if errors:  # the outputs were removed; the input stays in ``work`` to reproduce it
        return {"error": "wrong output", "failures": errors, "work": str(work.path)}
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the parts, check every output, print JSON."""
    args, record = arguments(argv), Record()
    work = cli.Workdir(args.work, "flamestream-barrier-")
    with spark_session("flamestream-spark-barrier") as spark:
        spark_version, report = spark.version, run_parts(spark, args, work)
    if "error" in report:
        return emit(report)
    machine = record.machine(spark_version, shuffle_partitions=2)
    result = {"machine": machine, **report, "notes": NOTES}
    if "overhead" in report:
        result["ratios"] = ratios = report["overhead"]["ratios"]
        result["targets_met"] = {name: ratio <= TARGET_RATIO for name, ratio in ratios.items()}
    return emit(result, work)


NOTES = [
    "overhead: " + TIMING_NOTE + " The variants' order is rotated every round. "
    "rows_per_second counts input lines. ratio = barrier seconds / no-barrier (json) seconds, "
    "steady_ratio the same with steady seconds; target <= 1.15.",
    "overhead variants: the same apply_graph(graph, files front) DataFrame written by the "
    "flamestream files sink (JSON, release tasks / commit), Spark's JSON file sink (no "
    "barrier) and noop (rows counted with DataFrame.observe); see docs/benchmarks.md.",
    "overhead check (every run, warm-ups included): the output read back must have the row "
    "count and crc32 sum of values Python computes for the corpus, and all variants the same "
    "crc32 sum over every column but ts (trace as hex). Else an error JSON and exit 1.",
    "latency pipeline: generator front (2 partitions, 100 keys) -> apply_graph(graph, "
    "payload='key') -> flamestream files sink (JSON, --release), ProcessingTime(--trigger).",
    "max sustainable rate: backlog probes (rowsPerSecond 0) with maxRecordsPerTrigger N, "
    "K N, K^2 N ... until a probe's batches take twice as long as the first's (at most "
    "--probes; batches_doubled); a probe's rate = rows per batch / the median "
    "triggerExecution of its batches after the first; the best probe rate, measured. fit: "
    "seconds = a + b * rows, for reference.",
    "latency run: rowsPerSecond = half the max rate for --settle + --duration seconds; "
    "measured: the rows admitted after --settle. Admission: the planning of the row's batch, "
    "ts = base + (position - start), checked for every row against the offset log "
    "(clamped_batches: base = the previous horizon, 0 expected); latency_from_ts_ms from ts. "
    "Release: the ctime of the row's part file (the commit's rename), cross-checked by a "
    "10 ms poller (release_seen_by_poller_after_ctime_ms).",
    "latency_from_generation_ms: from when the generator made the record available (its "
    "clock start bracketed from the batches' bases and positions) to its release.",
    "kept_up: every row processed before the deadline, and the second half of the window's "
    "batches took at most 1.25 x as long (median) as the first half's.",
]


if __name__ == "__main__":
    raise SystemExit(main())
