"""Controller benchmark: a 10x input-rate step, the admission controller against fixed read limits.

One SparkSession (``local[2]``, 2 shuffle partitions, the JVM shim on when its jar is
installed: the controller's progress input). Prints one JSON object::

    python -m benchmarks.spark_controller [--rate R] [--factor F] [--before S] [--after S]
        [--drain S] [--settle S] [--target-ms T] [--fixed K ...] [--variants ...]
        [--release tasks|commit] [--probe-rows N N] [--probe-batches B] [--load X]
        [--timeout S] [--work DIR]

Pipeline (as the latency part of :mod:`benchmarks.spark_barrier`): generator front (2
partitions, 100 keys, ``rateSteps`` ``0:R,S:F*R``, ``totalRows`` = the input of ``before +
after`` seconds) -> ``apply_graph(word count, payload="key")`` -> flamestream files sink
(``release=tasks``), ``Trigger.ProcessingTime(0)``: batches back to back.

Variants, one after another in the same session, each into a fresh checkpoint:

* ``controller``: ``controller=on``, ``targetLatencyMs`` = ``--target-ms``;
* ``fixed-<rows>``: ``maxRecordsPerTrigger`` = ``rows``, for each ``--fixed`` K: K x the
  steady batch the pipeline needs after the step (from the probe's cost model);
* ``nolimit``: everything available, every batch.

First a short probe (after an untimed warm-up query): the pipeline fed from a backlog
(``rowsPerSecond`` 0) at two batch sizes gives ``seconds = a + b * rows``. Without
``--rate``, ``F * R`` is ``--load`` x the highest rate at which batches of ``target / 2`` keep
up (the controller's own rule), so some batch size can keep up after the step within the
budget; the fixed limits are sized from the same fit.

Everything is measured from the checkpoint alone: see ``NOTES``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import local_spark
from benchmarks.spark_barrier import linear_fit, percentile, summary_ms
from benchmarks.spark_graphs import word_count_graph
from flamestream.spark.connector.barrier import front_offsets
from flamestream.spark.durable import QueryCheckpoint

#: Generator front settings (as the barrier benchmark's latency part).
GENERATOR_PARTITIONS = 2
GENERATOR_KEYS = 100

#: Where the sink's commit markers live under the checkpoint (``BarrierWriter``'s default
#: ``stateLocation``): ``commits/<batch, 12 digits>.json``, written last by each commit.
SINK_STATE = "flamestream-sink"


@dataclass(frozen=True)
class Schedule:
    """The generator's rate steps and what they make."""

    steps: tuple[tuple[float, float], ...]
    total: int
    #: the generator front's own ``RateSchedule`` of these steps (its integral and inverse)
    rates: Any

    @property
    def option(self) -> str:
        """The ``rateSteps`` option."""
        return ",".join(f"{s:g}:{r:g}" for s, r in self.steps)


@dataclass
class Batch:
    """One micro-batch as the checkpoint tells it."""

    id: int
    planned: float  #: the offset's base: the planning's wall clock, s
    starts: dict[str, int]
    ends: dict[str, int]
    controller: dict[str, Any] | None
    released: float | None = None  #: mtime of the sink's commit marker, s
    pending: int = 0  #: rows the commit kept for later (0 expected: one source)

    @property
    def rows(self) -> int:
        """Records read."""
        return sum(self.ends[k] - self.starts[k] for k in self.ends)


@dataclass
class Watched:
    """A query run until it processed every row or its deadline."""

    started: float
    stopped: float = 0.0
    finished: bool = True
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)


def read_checkpoint(ck: Path) -> tuple[list[Batch], float | None]:
    """The batches from the offset log and the sink's markers; offsets/0's mtime."""
    log = QueryCheckpoint(str(ck))
    # one flamestream source here
    offsets = {b: front_offsets(str(ck), b)[0] for b in log.logged_batches()}
    first = Path(log.offset_path(0))
    first_mtime = first.stat().st_mtime if first.exists() else None
    markers: dict[int, tuple[float, dict[str, Any]]] = {}
    commits = ck / SINK_STATE / "commits"
    if commits.is_dir():
        for path in commits.iterdir():
            if path.name.endswith(".json") and not path.name.startswith("."):
                number = int(path.name.split(".")[0])
                markers[number] = (path.stat().st_mtime, json.loads(path.read_text()))
    batches = []
    previous: dict[str, int] = {}
    for b in sorted(offsets):
        offset = offsets[b]
        ends = {key: int(position) for key, _front, position, *_ in offset["fronts"]}
        starts = {key: previous.get(key, 0) for key in ends}
        previous = ends
        batch = Batch(b, offset["base"] / 1e6, starts, ends, offset.get("controller"))
        if b in markers:
            batch.released = markers[b][0]
            batch.pending = int(markers[b][1].get("pending", 0))
        batches.append(batch)
    return batches, first_mtime


def clock_start(batches: Sequence[Batch], schedule: Any) -> tuple[float, float]:
    """When the generator's clock started, and how far before batch 0's planning that is.

    The clock starts in the first planning's ``discover``, just before batch 0's base is
    taken; every batch also bounds it from above (its ends were available at its planning).
    """
    start = batches[0].planned
    for batch in batches:
        furthest = max(batch.ends.values(), default=0)
        if furthest:
            start = min(start, batch.planned - schedule.elapsed_for(furthest * len(batch.ends)))
    return start, batches[0].planned - start


def run_lengths(values: Sequence[Any]) -> str:
    """``[5, 5, 5, 9]`` as ``"5x3 9"``: a limit trace in one line."""
    parts: list[str] = []
    for value, group in itertools.groupby(values):
        n = len(list(group))
        parts.append(f"{value}x{n}" if n > 1 else f"{value}")
    return " ".join(parts)


def analyse(
    batches: list[Batch],
    first_mtime: float | None,
    schedule: Schedule,
    watched: Watched,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Per record: availability and release; latency figures, backlog, recovery, decisions."""
    rates = schedule.rates
    start, before_planning = clock_start(batches, rates)
    step_at = start + args.before
    settle_at = start + args.settle
    budget_ms = args.target_ms
    shares = {
        f"generator-{p}": schedule.total // GENERATOR_PARTITIONS
        + (p < schedule.total % GENERATOR_PARTITIONS)
        for p in range(GENERATOR_PARTITIONS)
    }

    def made_at(i: int) -> float:
        """When record ``i`` of a partition became available.

        The generator makes int(made / P) records per partition: record i once the schedule
        made (i + 1) * P.
        """
        return float(start + rates.elapsed_for((i + 1) * GENERATOR_PARTITIONS))

    measured: list[float] = []
    after_step: list[float] = []

    def count(release: float, first: int, end: int) -> None:
        for i in range(first, end):
            made = made_at(i)
            if made >= settle_at:
                measured.append(release - made)
            if made >= step_at:
                after_step.append(release - made)

    censored = released_rows = 0
    per_batch: list[dict[str, Any]] = []
    for batch in batches:
        if not batch.rows:
            continue
        release = batch.released if batch.released is not None else watched.stopped
        if batch.released is None:
            censored += batch.rows
        else:
            released_rows += batch.rows
        for key, end in batch.ends.items():
            count(release, batch.starts[key], end)
        oldest = min(
            made_at(batch.starts[k]) for k in batch.ends if batch.ends[k] > batch.starts[k]
        )
        t = batch.planned - start
        reach = int(rates.records(t) / GENERATOR_PARTITIONS)
        per_batch.append(
            {
                "batch": batch.id,
                "planned": t,
                "rows": batch.rows,
                "seconds": release - batch.planned,
                "oldest_ms": (release - oldest) * 1000,
                "backlog": sum(max(0, min(reach, shares[k]) - batch.ends[k]) for k in batch.ends),
                "limit": (batch.controller or {}).get("limit"),
            }
        )
    # records available by the stop but never read: censored at the stop too
    reach = int(rates.records(watched.stopped - start) / GENERATOR_PARTITIONS)
    unread = 0
    last = batches[-1].ends if batches else {}
    for key, share in shares.items():
        first, end = last.get(key, 0), min(reach, share)
        if end > first:
            unread += end - first
            count(watched.stopped, first, end)
    after = [b for b in per_batch if b["planned"] >= args.before]
    over = [i for i, b in enumerate(after) if b["oldest_ms"] > budget_ms]
    # ticks after the step until every later batch ended within the budget (None: never)
    recovered = None if (after and over and over[-1] == len(after) - 1) or unread else 0
    if recovered is not None and over:
        recovered = over[-1] + 1
    seconds = None
    if recovered is not None and after:
        seconds = 0.0 if recovered == 0 else after[recovered]["planned"] - args.before

    def phase(rows: list[dict[str, Any]]) -> dict[str, Any]:
        if not rows:
            return {"batches": 0}
        return {
            "batches": len(rows),
            "rows_median": round(statistics.median(b["rows"] for b in rows)),
            "seconds_median": round(statistics.median(b["seconds"] for b in rows), 3),
            "seconds_max": round(max(b["seconds"] for b in rows), 3),
        }

    step_index = next((i for i, b in enumerate(per_batch) if b["planned"] >= args.before), 0)
    around = [
        f"{b['batch']} @{b['planned']:.2f}s: {b['rows']} rows, {b['seconds']:.2f} s, "
        f"oldest {b['oldest_ms']:.0f} ms, backlog {b['backlog']}"
        + (f", limit {b['limit']}" if b["limit"] is not None else "")
        for b in per_batch[max(0, step_index - 2) : step_index + 10]
    ]
    p99 = percentile(sorted(measured), 99) * 1000 if measured else math.inf
    result: dict[str, Any] = {
        "released_rows": released_rows,
        "censored_rows": censored + unread,
        "finished": watched.finished,
        "latency_ms": summary_ms(measured) if measured else None,
        "latency_after_step_ms": summary_ms(after_step) if after_step else None,
        "within_budget_p99": p99 <= budget_ms,
        "peak_backlog": max((b["backlog"] for b in per_batch), default=0),
        "peak_backlog_after_step": max((b["backlog"] for b in after), default=0),
        "unread_at_stop": unread,
        "batches_over_budget_after_step": len(over),
        "ticks_to_recover_after_step": recovered,
        "seconds_to_recover_after_step": round(seconds, 3) if seconds is not None else None,
        "before_step": phase([b for b in per_batch if b["planned"] < args.before]),
        "after_step": phase(after),
        "around_step": around,
        "pending_rows_in_markers": sum(b.pending for b in batches),
        "clock": {
            "start_before_batch0_planning_ms": round(before_planning * 1000, 3),
            "offsets0_mtime_after_batch0_planning_ms": (
                round((first_mtime - batches[0].planned) * 1000, 3) if first_mtime else None
            ),
        },
    }
    records = [b.controller for b in batches if b.controller]
    if records:
        before_step = [b.controller for b in batches if b.controller and b.planned < step_at]
        decisions = int(records[-1]["decisions"])
        result["controller"] = {
            "decisions": decisions,
            "decisions_after_step": decisions
            - (int(before_step[-1]["decisions"]) if before_step else 0),
            "limit_last": records[-1]["limit"],
            "tick_last": records[-1]["tick"],
            "reason_last": records[-1]["reason"],
            "limits": run_lengths([r["limit"] for r in records]),
        }
    return result


def git_state() -> dict[str, Any]:
    """The commit the library is at and which of its files differ (for provenance)."""
    root = Path(__file__).resolve().parents[1]

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(  # noqa: S603
                ["git", *argv],  # noqa: S607
                cwd=root,
                capture_output=True,
                text=True,
                check=True,
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", "python").splitlines()
    commit = git("rev-parse", "--short", "HEAD").strip()
    return {"commit": commit, "modified": [line[3:] for line in changed]}


def main(argv: list[str] | None = None) -> int:
    """Probe, run the variants, analyse each checkpoint, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, help="rows/s before the step (default: probed)")
    parser.add_argument("--factor", type=float, default=10.0, help="the step: rate x factor")
    parser.add_argument("--before", type=float, default=15.0, help="seconds before the step")
    parser.add_argument("--after", type=float, default=25.0, help="seconds of input after it")
    parser.add_argument(
        "--drain", type=float, default=15.0, help="seconds after the input ends until a stop"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="records available in the first seconds (query start) are not measured",
    )
    parser.add_argument("--target-ms", type=float, default=4000.0, help="latency budget")
    parser.add_argument(
        "--fixed",
        type=float,
        nargs="*",
        default=[0.25, 1.0, 4.0],
        help="fixed maxRecordsPerTrigger as multiples of the steady batch after the step",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=["controller", "fixed", "nolimit"],
        default=["controller", "fixed", "nolimit"],
    )
    parser.add_argument("--release", choices=["tasks", "commit"], default="tasks")
    parser.add_argument(
        "--probe-rows", type=int, nargs=2, default=[2000, 20000], help="probe batch sizes"
    )
    parser.add_argument("--probe-batches", type=int, default=3, help="timed batches per probe")
    parser.add_argument(
        "--load",
        type=float,
        default=0.5,
        help="the rate after the step as a share of the highest rate the budget allows",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per probe query")
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from flamestream.jvm import (
        PLUGIN_CLASS,
        PROGRESS_LISTENER_CLASS,
        TASK_LISTENER_CLASS,
        Shim,
        spark_jars_dir,
    )
    from flamestream.spark import apply_graph
    from pyspark_flamestream.fronts.generator import RateSchedule

    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-controller-"))
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    load_before = os.getloadavg()
    library = git_state()  # before the run: what the run used, as far as git tells
    shim_conf: dict[str, str] = {}
    if any(spark_jars_dir().glob("flamestream-shim-*.jar")):
        # the controller's best input: each batch's triggerExecution from the progress listener
        shim_conf = {
            "spark.plugins": PLUGIN_CLASS,
            "spark.extraListeners": TASK_LISTENER_CLASS,
            "spark.sql.streaming.streamingQueryListeners": PROGRESS_LISTENER_CLASS,
        }
    spark = local_spark("flamestream-spark-controller", shim_conf)
    shim_on = Shim.of_session(spark) is not None
    counter = 0

    def fresh(kind: str) -> tuple[Path, Path]:
        nonlocal counter
        counter += 1
        paths = work / f"{kind}-out-{counter}", work / f"{kind}-ck-{counter}"
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        return paths

    def start(front: dict[str, Any], out: Path, ck: Path) -> Any:
        reader = (
            spark.readStream.format("flamestream")
            .option("front", "generator")
            .option("partitions", GENERATOR_PARTITIONS)
            .option("keys", GENERATOR_KEYS)
        )
        for name, value in front.items():
            reader = reader.option(name, value)
        rows = apply_graph(
            word_count_graph(), reader.load(), payload="key", checkpoint_location=str(ck)
        )
        return (
            rows.writeStream.format("flamestream")
            .option("sink", "files")
            .option("format", "json")
            .option("release", args.release)
            .option("path", str(out))
            .option("checkpointLocation", str(ck))
            .trigger(processingTime="0 seconds")
            .start()
        )

    def watch(query: Any, ck: Path, total: int, limit: float, from_clock: bool) -> Watched:
        """Poll until ``total`` rows were processed or ``limit`` s passed (from offsets/0)."""
        watched = Watched(time.time())
        deadline = watched.started + limit + (args.timeout if from_clock else 0)
        clocked = False
        try:
            while True:
                time.sleep(0.25)
                first = ck / "offsets" / "0"
                if from_clock and not clocked and first.exists():
                    clocked, deadline = True, first.stat().st_mtime + limit
                for p in query.recentProgress:
                    if int(p["numInputRows"]):
                        watched.progress[int(p["batchId"])] = p
                done = sum(int(p["numInputRows"]) for p in watched.progress.values())
                if done >= total:
                    break
                if not query.isActive or time.time() > deadline:
                    watched.finished = False
                    break
        finally:
            query.stop()
            watched.stopped = time.time()
        if query.exception() is not None:
            raise query.exception()
        return watched

    def probe(batch_rows: int, batches: int) -> dict[str, Any]:
        """Median batch seconds at ``batch_rows`` rows per batch, fed from a backlog."""
        out, ck = fresh("probe")
        total = batch_rows * (batches + 1)
        front = {"rowsPerSecond": 0, "totalRows": total, "maxRecordsPerTrigger": batch_rows}
        watched = watch(start(front, out, ck), ck, total, args.timeout, False)
        if not watched.finished:
            msg = f"probe of {batch_rows} rows per batch did not finish in {args.timeout} s"
            raise TimeoutError(msg)
        timed = [watched.progress[b] for b in sorted(watched.progress)[1:]]  # first: warm-up
        seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in timed]
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ck, ignore_errors=True)
        return {
            "batch_rows": batch_rows,
            "batch_seconds": [round(s, 3) for s in seconds],
            "batch_seconds_median": round(statistics.median(seconds), 3),
        }

    report: dict[str, Any] = {}
    try:
        per_tick = args.target_ms / 2000  # the controller's rule: a batch within half the budget
        # the session's first query pays the JVM's and Python workers' warm-up: not timed
        warmup = probe(args.probe_rows[0], 1)
        probes = [probe(n, args.probe_batches) for n in args.probe_rows]
        xs = [p["batch_rows"] for p in probes]
        ys = [p["batch_seconds_median"] for p in probes]
        per_row, fixed_cost = linear_fit(xs, ys)
        if per_row <= 0:  # noise: all of the time per row, from the larger probe
            per_row, fixed_cost = ys[-1] / xs[-1], 0.0
        # the highest rate batches of per_tick keep up with: rows = rate * per_tick
        budget_rate = max(0.0, per_tick - fixed_cost) / (per_row * per_tick)
        feasible = budget_rate > 0
        if not feasible:  # the budget is below the fixed cost: run at half the asymptote
            budget_rate = 1 / per_row
        high = args.rate * args.factor if args.rate else args.load * budget_rate
        rate = float(f"{high / args.factor:.2g}")  # two significant digits
        high = rate * args.factor
        # the steady batch after the step without a limit: rows = high * (a + b * rows)
        steady = high * fixed_cost / max(1e-9, 1 - high * per_row)
        total = round(rate * args.before + high * args.after)
        steps = ((0.0, rate), (args.before, high))
        schedule = Schedule(steps, total, RateSchedule(steps))
        report["probe"] = {
            "warmup_batch_seconds": warmup["batch_seconds"],
            "probes": probes,
            "fit": {
                "fixed_seconds_per_batch": round(fixed_cost, 3),
                "microseconds_per_row": round(per_row * 1e6, 2),
                "asymptote_rows_per_second": round(1 / per_row),
            },
            "budget_rows_per_second": round(budget_rate),
            "budget_feasible": feasible,
            "steady_batch_rows_after_step": round(steady),
            "steady_batch_seconds_after_step": round(fixed_cost + per_row * steady, 3),
        }
        variants: dict[str, dict[str, Any]] = {}
        fixed_info: dict[str, dict[str, Any]] = {}
        if "controller" in args.variants:
            variants["controller"] = {
                "controller": "on",
                "targetLatencyMs": args.target_ms,
                # at least what keeps up before the step in a tick of half the budget
                "minRecordsPerTrigger": max(100, round(rate * per_tick / 4)),
                # a bound against runaway batches: 16 x the steady batch after the step; the
                # first limit is the controller's default (this bound)
                "maxRecordsPerTrigger": max(1000, round(16 * max(steady, high * per_tick))),
            }
        if "fixed" in args.variants:
            for k in args.fixed:
                rows = max(100, int(float(f"{k * steady:.2g}")))
                variants[f"fixed-{rows}"] = {"maxRecordsPerTrigger": rows}
                # a limit reads at most rows / tick: seconds of input per tick it can take
                fixed_info[f"fixed-{rows}"] = {
                    "times_steady_batch": k,
                    "seconds_of_input_before_step": round(rows / rate, 2),
                    "seconds_of_input_after_step": round(rows / high, 2),
                }
        if "nolimit" in args.variants:
            variants["nolimit"] = {}
        limit = args.before + args.after + args.drain
        results: dict[str, Any] = {}
        # run in the order --variants gives (the first variant meets the least warm JVM)
        kinds = {name: name.split("-")[0] for name in variants}
        ordered = sorted(variants.items(), key=lambda kv: args.variants.index(kinds[kv[0]]))
        for name, options in ordered:
            out, ck = fresh(name)
            front = {"rateSteps": schedule.option, "totalRows": total, **options}
            run_began = time.perf_counter()
            entry: dict[str, Any] = {
                "options": {k: str(v) for k, v in options.items()},
                **({"fixed": fixed_info[name]} if name in fixed_info else {}),
            }
            try:
                watched = watch(start(front, out, ck), ck, total, limit, True)
                batches, first_mtime = read_checkpoint(ck)
                analysed = analyse(batches, first_mtime, schedule, watched, args)
            except Exception as exc:  # one failed variant (a shared, changing tree) is reported
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                analysed = {}
            results[name] = {
                **entry,
                "wall_seconds": round(time.perf_counter() - run_began, 1),
                "load_average_1m_after": round(os.getloadavg()[0], 2),
                **analysed,
            }
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ck, ignore_errors=True)
        p99 = {name: r["latency_ms"]["p99"] for name, r in results.items() if r.get("latency_ms")}
        fixed_p99 = {n: v for n, v in p99.items() if n.startswith("fixed-")}
        ratios: dict[str, Any] = {}
        if "controller" in p99 and fixed_p99:
            best = min(fixed_p99, key=lambda n: fixed_p99[n])
            ratios["best_fixed"] = best
            ratios["p99_controller_vs_best_fixed"] = round(p99["controller"] / p99[best], 3)
        if "controller" in p99 and "nolimit" in p99:
            ratios["p99_controller_vs_nolimit"] = round(p99["controller"] / p99["nolimit"], 3)
        report.update(
            {
                "pipeline": {
                    "front": "generator",
                    "partitions": GENERATOR_PARTITIONS,
                    "keys": GENERATOR_KEYS,
                    "payload_column": "key",
                    "graph": "wordcount",
                    "sink": "files",
                    "release": args.release,
                    "trigger": "ProcessingTime(0)",
                },
                "input": {
                    "rate_steps": schedule.option,
                    "rows_per_second_before": rate,
                    "rows_per_second_after": high,
                    "step_at_seconds": args.before,
                    "input_seconds": args.before + args.after,
                    "total_rows": total,
                    "drain_seconds": args.drain,
                    "settle_seconds": args.settle,
                },
                "target_latency_ms": args.target_ms,
                "p99_ms": p99,
                "ratios": ratios,
                "variants": results,
            }
        )
    finally:
        spark.stop()
    load_after = os.getloadavg()
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "spark": spark.version,
            "master": "local[2]",
            "shuffle_partitions": 2,
            "shim": shim_on,
            "load_average_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
            "library": library,
        },
        "seconds_total": round(time.perf_counter() - began, 1),
        **report,
        "notes": NOTES,
    }
    print(json.dumps(result, indent=2))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


NOTES = [
    "input: the generator front's rateSteps '0:R,S:F*R' (rows/s over both partitions; record "
    "i of a partition is available once the schedule's integral reaches (i + 1) * 2); "
    "totalRows = R * before + F * R * after. Without --rate, R = --load x the highest rate "
    "at which batches of target/2 keep up, from the probe's fit seconds = a + b * rows "
    "(backlog probes at two batch sizes, median triggerExecution after a first untimed "
    "batch), divided by F.",
    "fixed variants: maxRecordsPerTrigger = K x the steady batch after the step without a "
    "limit (rows = F * R * (a + b * rows)), two significant digits: below 1 x it cannot keep "
    "up after the step; above it the limit only binds on a backlog.",
    "controller variant: controller=on, targetLatencyMs = --target-ms, minRecordsPerTrigger "
    "= R * target/2 / 4, maxRecordsPerTrigger = 16 x the larger of the steady batch after "
    "the step and F * R * target/2 (the first limit: the controller's default).",
    "everything from the checkpoint alone: offsets/<batch> (last line: the source's end "
    "offset) gives each batch's per-front end positions, its planning instant (base: the "
    "driver's wall clock in microseconds at planning) and the controller record; the sink's "
    "commit markers (flamestream-sink/commits/<batch>.json, written at the end of each "
    "commit, after the batch's output parts were renamed into place) give the release time "
    "of every row of the batch (their mtime). With one source every row of a batch is "
    "released by its own commit (pending_rows_in_markers: 0).",
    "clock start: the generator's rate clock starts in the first planning's discover, just "
    "before batch 0's base is taken; taken as batch 0's base, moved earlier if any batch's "
    "ends would not have been available at its planning otherwise "
    "(clock.start_before_batch0_planning_ms says by how much: 0 when base 0 is consistent). "
    "offsets/0's mtime, written after the planning, is given for comparison.",
    "latency of a record: release (its batch's marker mtime) - availability (clock start + "
    "the time the schedule made it); latency_ms over the records available after --settle "
    "seconds (query start and the first batches' Python workers left out), "
    "latency_after_step_ms over those available after the step. A run is stopped --drain s "
    "after its input ends; records not released by then count with the stop time as release "
    "(censored_rows: their latency is a lower bound).",
    "backlog at a planning: records available (schedule, capped by totalRows) minus the "
    "batch's end positions, over both fronts (the front's own backlog gauge); peak over the "
    "batches.",
    "recovery: per batch the latency of its oldest record; ticks_to_recover_after_step = "
    "batches planned after the step until every later batch's is within the budget (0: "
    "never over; null: still over at the end); seconds_to_recover_after_step from the step to "
    "that batch's planning. controller.decisions_after_step: the record's decision count "
    "at the last batch minus at the last batch planned before the step.",
    "ratios: p99 (latency_ms) of the controller / p99 of the best fixed variant, and / p99 "
    "of nolimit.",
]


if __name__ == "__main__":
    raise SystemExit(main())
