"""Sketches against exact state and against Spark's own sketches: throughput, state, error.

Input: ``--events`` events on ``--keys`` keys, users Zipf-like per key, ``--batch`` events a
file and a trigger (:mod:`benchmarks.lib.keyed_events`; the queries:
:mod:`benchmarks.lib.sketch_variants`). Two workloads, each variant a streaming query in one
session, ``Trigger.AvailableNow``, fresh checkpoint and output each run:

* ``distinct``, distinct users per key: flamestream ``distinct_count`` (HLL, lg_k 12)
  (``flamestream_hll``); the exact set a user writes with ``map_reduce``
  (``flamestream_exact_set``); Spark's ``approx_count_distinct(user)`` grouped by key
  (``spark_approx_count_distinct``, rsd 0.05) and ``hll_sketch_agg`` then
  ``hll_sketch_estimate`` (``spark_hll_sketch``, lg_k 12), both in update mode.
* ``p99``, the p99 of ``ms`` per ``key % --quantile-keys``: ``quantiles`` (KLL, k 200)
  (``flamestream_kll``) and every value in a sorted tuple (``flamestream_exact_sorted``).

Per run: events per wall second (and per second of the batches' trigger execution), state per
key (flamestream: the newest grouping snapshots in the checkpoint, ``state_bytes``, over the
keys; Spark: the last batch's state operator, ``stateOnCurrentVersionSizeBytes`` over
``numRowsTotal``, ``memoryUsedBytes`` beside it), the peak memory of the application's
Python workers (the largest one; their sum) and of the driver JVM, and each key's final
value against the truth: the exact variants must equal it, the sketches' relative (distinct)
or rank (p99) errors are reported. Rounds interleave the variants (A B C D E F A B ...) after
``--warmup`` untimed rounds on at most 20,000 events; medians, load averages and the ratios
in JSON. Run it alone: other work skews every figure::

    python -m benchmarks.sketches [--events N] [--keys K] [--batch B] [--rounds R]
        [--quantile-keys Q] [--users U] [--workloads distinct p99] [--warmup W] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.lib import cli, keyed_events
from benchmarks.lib.processes import PeakMemory
from benchmarks.lib.record import Record, emit, load_averages
from benchmarks.lib.sketch_variants import RANK, VARIANTS, final_values
from benchmarks.lib.stats import median
from benchmarks.lib.timing import run_query

WORKLOADS = list(VARIANTS)
#: Issue 41's aims: exact state over the sketch's per key; the sketch's throughput over Spark's.
TARGETS = {"state_exact_over_sketch": 10.0, "throughput_hll_over_spark_approx": 1.0}
WARMUP_EVENTS = 20_000


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The input's sizes, the rounds and the workloads."""
    parser = cli.parser(__doc__, timeout=7200.0, repeat=None)
    cli.flag(parser, "--events", 10_000_000, "events")
    cli.flag(parser, "--keys", 100_000, "keys of the distinct counts")
    cli.flag(parser, "--quantile-keys", 1_000, "keys of the p99 (an event's key modulo this)")
    cli.flag(parser, "--users", 100_000, "user ranks per key (Zipf-like)")
    cli.flag(parser, "--batch", 1_000_000, "events a file and a trigger")
    cli.flag(parser, "--rounds", 2, "timed rounds")
    cli.flag(parser, "--warmup", 1, f"untimed rounds first, on at most {WARMUP_EVENTS} events")
    cli.flag(parser, "--workloads", WORKLOADS, nargs="+", choices=WORKLOADS)
    return parser.parse_args(argv)


def one_run(
    spark: Any, workload: str, variant: str, made: Any, args: Any, work: Any
) -> tuple[dict[str, Any], dict[int, tuple[float, ...]]]:
    """One query: its time, state, memory, and per key its final value (before the cleanup)."""
    out, ck = work.fresh(variant)
    define = VARIANTS[workload][variant]
    try:
        with PeakMemory() as memory:
            run = run_query(lambda: define(spark, made, args.quantile_keys, out, ck), args.timeout)
        found = {
            "variant": variant,
            "seconds": round(run.seconds, 3),
            "steady_seconds": round(run.triggers, 3),
            "events_per_second": round(made.events / run.seconds),
            "steady_events_per_second": round(made.events / run.triggers),
            "batches": run.batches,
            "peak_worker_mb": memory.worker_mb,
            "peak_workers_total_mb": memory.workers_mb,
            "peak_driver_jvm_mb": memory.jvm_mb,
        }
        return found | state_figures(variant, run, ck), final_values(spark, variant, out)
    finally:
        work.drop(out, ck)


def state_figures(variant: str, run: Any, ck: Any) -> dict[str, Any]:
    """The state after the last batch: bytes and, for Spark, rows (per key: their quotient).

    flamestream: the newest snapshot of every grouping partition. Spark: the state operator's
    ``stateOnCurrentVersionSizeBytes`` (the last version's rows; ``memoryUsedBytes``, which
    also counts the versions the provider keeps cached, is reported beside it).
    """
    if variant.startswith("flamestream"):
        from flamestream.spark.durable.state import state_bytes

        return {"state_bytes": state_bytes(str(ck))}
    op = run.state[0] if run.state else {}
    used = int(op.get("memoryUsedBytes") or 0)
    current = (op.get("customMetrics") or {}).get("stateOnCurrentVersionSizeBytes")
    return {
        "state_bytes": used if current is None else int(current),
        "state_rows": int(op.get("numRowsTotal") or 0),
        "state_memory_used_bytes": used,
    }


def distinct_errors(variant: str, final: Mapping[int, tuple[float, ...]], truth: Any) -> Any:
    """Relative errors of the final counts (an error report if an exact one is off)."""
    if final.keys() != truth.distinct.keys():
        return {"error": f"{variant}: {len(final)} keys released, {len(truth.distinct)} expected"}
    errors = sorted(abs(final[k][0] - n) / n for k, n in truth.distinct.items())
    if variant == "flamestream_exact_set" and errors[-1] != 0:
        wrong = sum(e != 0 for e in errors)
        return {"error": f"{variant}: {wrong} keys' exact counts differ from the truth"}
    return relative("relative_error", errors)


def p99_errors(variant: str, final: Mapping[int, tuple[float, ...]], truth: Any) -> Any:
    """Rank errors of the final p99s (an error report if the exact one is off)."""
    if final.keys() != truth.values.keys():
        return {"error": f"{variant}: {len(final)} keys released, {len(truth.values)} expected"}
    errors = sorted(
        keyed_events.rank_error(truth.values[k], final[k][0], RANK) for k in truth.values
    )
    if variant == "flamestream_exact_sorted" and errors[-1] != 0:
        return {"error": f"{variant}: {sum(e != 0 for e in errors)} keys' p99 is not exact"}
    found = relative("rank_error", errors)
    if variant == "flamestream_kll":
        found["rank_error_stated_max"] = max(v[1] for v in final.values())
    return found


def relative(name: str, errors: list[float]) -> dict[str, Any]:
    """Median, p99 and max of sorted errors."""
    at = max(0, -(-len(errors) * 99 // 100) - 1)
    return {
        f"{name}_median": round(errors[len(errors) // 2], 5),
        f"{name}_p99": round(errors[at], 5),
        f"{name}_max": round(errors[-1], 5),
    }


def measured(
    spark: Any, workload: str, variant: str, given: tuple[Any, Any], args: Any, work: Any
) -> dict[str, Any]:
    """:func:`one_run` and its errors against the truth, or why it failed (the rest go on)."""
    made, truth = given
    began = time.perf_counter()
    try:
        found, final = one_run(spark, workload, variant, made, args, work)
    except Exception as exc:
        failed = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
        return {
            "variant": variant,
            "failed": failed,
            "seconds": round(time.perf_counter() - began, 3),
        }
    check = distinct_errors if workload == "distinct" else p99_errors
    found |= check(variant, final, truth)
    rows = found.get("state_rows") or len(final)
    return found | {"state_bytes_per_key": round(found["state_bytes"] / rows, 1) if rows else None}


def rounds(spark: Any, args: Any, work: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every round's runs (warm-ups left out) and the input's description."""
    inputs = {}  # events -> (files, truth): the warm-ups' and the timed rounds'
    for events in {min(args.events, WARMUP_EVENTS) if args.warmup else args.events, args.events}:
        made = keyed_events.write(work.path, events, args.keys, args.users, args.batch)
        inputs[events] = made, keyed_events.truth(made, args.quantile_keys)
    runs: list[dict[str, Any]] = []
    for round_ in range(args.warmup + args.rounds):
        made, truth = inputs[args.events if round_ >= args.warmup else min(inputs)]
        for workload in args.workloads:
            for variant in VARIANTS[workload]:
                load = load_averages()
                found = measured(spark, workload, variant, (made, truth), args, work)
                found |= {"workload": workload, "round": round_, "load_before": load}
                print(json.dumps(found), file=sys.stderr, flush=True)
                if round_ >= args.warmup:
                    runs.append(found)
    made, truth = inputs[args.events]
    described = {"events": made.events, "bytes": made.bytes, "files": made.files}
    return runs, described | {
        "keys_present": len(truth.distinct),
        "quantile_keys_present": len(truth.values),
        "distinct_users_per_key_median": median(truth.distinct.values()),
        "values_per_quantile_key_median": median(len(v) for v in truth.values.values()),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per variant and the ratios."""
    medians: dict[str, dict[str, float]] = {}
    for variant in {r["variant"] for r in runs}:
        mine = [r for r in runs if r["variant"] == variant and not {"error", "failed"} & r.keys()]
        keys = ["events_per_second", "steady_events_per_second", "state_bytes_per_key"]
        keys += ["peak_worker_mb"]
        medians[variant] = {k: median(r[k] for r in mine) for k in keys} if mine else {}

    def ratio(top: str, bottom: str, what: str) -> float | None:
        a, b = medians.get(top, {}).get(what), medians.get(bottom, {}).get(what)
        return round(a / b, 3) if a and b else None

    ratios = {
        "state_exact_over_sketch": ratio(
            "flamestream_exact_set", "flamestream_hll", "state_bytes_per_key"
        ),
        "throughput_hll_over_spark_approx": ratio(
            "flamestream_hll", "spark_approx_count_distinct", "events_per_second"
        ),
        "throughput_hll_over_spark_hll_sketch": ratio(
            "flamestream_hll", "spark_hll_sketch", "events_per_second"
        ),
        "throughput_hll_over_exact_set": ratio(
            "flamestream_hll", "flamestream_exact_set", "events_per_second"
        ),
        "state_exact_sorted_over_kll": ratio(
            "flamestream_exact_sorted", "flamestream_kll", "state_bytes_per_key"
        ),
        "throughput_kll_over_exact_sorted": ratio(
            "flamestream_kll", "flamestream_exact_sorted", "events_per_second"
        ),
    }
    met = {k: got >= goal for k, goal in TARGETS.items() if (got := ratios.get(k)) is not None}
    failed = sorted({r["variant"] for r in runs if "failed" in r})
    return {"medians": medians, "ratios": ratios, "targets_met": met, "failed": failed}


def main(argv: list[str] | None = None) -> int:
    """Write the input, run the rounds, print the JSON report."""
    args = arguments(argv)
    # Spark's Python: the project's launcher beside this interpreter, as `make` sets it
    launcher = Path(sys.executable).with_name("flamestream-python")
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        if launcher.exists():
            os.environ.setdefault(name, str(launcher))
    record = Record(library=True)
    work = cli.Workdir(args.work, "flamestream-sketches-")
    from benchmarks.lib.session import spark_session

    with spark_session("flamestream-sketches") as spark:
        runs, inputs = rounds(spark, args, work)
    errors = [r for r in runs if "error" in r]
    report = {
        "benchmark": "sketches",
        "machine": record.machine(
            spark="local[2]", spark_python=Path(os.environ.get("PYSPARK_PYTHON", "")).name
        ),
        "input": inputs | {"batch": args.batch, "users": args.users, "keys": args.keys},
        "rounds": args.rounds,
        "warmup": args.warmup,
        "seconds": record.seconds(),
        "runs": runs,
        "summary": summarize(runs),
        "targets": TARGETS,
        "load_averages_after": load_averages(),
    }
    if errors:
        report["error"] = "wrong output: " + "; ".join(r["error"] for r in errors)
    return emit(report, work)


if __name__ == "__main__":
    raise SystemExit(main())
