"""Controller benchmark: a 10x input-rate step, the admission controller against fixed read limits.

The generator pipeline (:mod:`benchmarks.lib.pipeline`, ``rateSteps`` ``0:R,S:F*R``) into the
word count. Variants, one after another, each into a fresh checkpoint: ``controller``,
``fixed-<rows>`` (``maxRecordsPerTrigger``: K x the steady batch after the step, per
``--fixed`` K) and ``nolimit``. Backlog probes give ``seconds = a + b * rows``; without
``--rate``, ``F * R`` is ``--load`` x the highest rate batches of ``target / 2`` keep up with.
Measured from the checkpoint alone; see docs/benchmarks.md. Prints one JSON object::

    python -m benchmarks.spark_controller [--rate R] [--factor F] [--before S] [--after S]
        [--drain S] [--settle S] [--target-ms T] [--fixed K ...] [--variants ...]
        [--release tasks|commit] [--probe-rows N N] [--probe-batches B] [--load X]
        [--timeout S] [--work DIR]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.lib import checkpoint, cli, latency, pipeline
from benchmarks.lib.pipeline import GENERATOR_KEYS, Watched
from benchmarks.lib.stats import cost_fit, fit_report, percentile

VARIANTS = ["controller", "fixed", "nolimit"]


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


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The step, the budget, the variants and the probes."""
    parser = cli.step_parser(__doc__, "rows/s before the step", VARIANTS, [20000, 200000])
    cli.flag(parser, "--factor", 10.0, "the step: rate x factor")
    cli.flag(parser, "--fixed", [0.25, 1.0, 4.0], "fixed limits, x the steady batch", nargs="*")
    cli.flag(parser, "--release", "tasks", choices=["tasks", "commit"])
    cli.flag(parser, "--load", 0.5, "the rate after the step, x the highest the budget allows")
    return parser.parse_args(argv)


def analyse(
    ck: checkpoint.Checkpoint, schedule: Schedule, watched: Watched, args: argparse.Namespace
) -> dict[str, Any]:
    """Per record: availability and release; latency figures, backlog, recovery, decisions."""
    batches = ck.batches
    found = latency.timeline(
        batches,
        schedule.rates,
        pipeline.shares(schedule.total),
        watched,
        args.settle,
        lambda _, t: t >= args.before,
    )
    after = [b for b in found.per_batch if b["planned"] >= args.before]

    def phase(rows: list[dict[str, Any]]) -> dict[str, Any]:
        if not rows:
            return {"batches": 0}
        return {
            "batches": len(rows),
            "rows_median": round(statistics.median(b["rows"] for b in rows)),
            "seconds_median": round(statistics.median(b["seconds"] for b in rows), 3),
            "seconds_max": round(max(b["seconds"] for b in rows), 3),
        }

    p99 = percentile(sorted(found.measured), 99) * 1000 if found.measured else float("inf")
    result: dict[str, Any] = {
        **latency.recovery(found, after, args.target_ms, args.before),
        "finished": watched.finished,
        "within_budget_p99": p99 <= args.target_ms,
        "before_step": phase([b for b in found.per_batch if b["planned"] < args.before]),
        "after_step": phase(after),
        "around_step": latency.around(found.per_batch, after, latency.describe),
        "pending_rows_in_markers": sum(b.pending for b in batches),
        "clock": {
            "start_before_batch0_planning_ms": round(found.before_planning * 1000, 3),
            "offsets0_mtime_after_batch0_planning_ms": (
                round((ck.first_mtime - batches[0].planned) * 1000, 3) if ck.first_mtime else None
            ),
        },
    }
    controller = latency.controller_summary(batches)
    if controller is not None:
        step_at = found.start + args.before
        before_step = [b.controller for b in batches if b.controller and b.planned < step_at]
        earlier = int(before_step[-1]["decisions"]) if before_step else 0
        last = [b.controller for b in batches if b.controller][-1]
        controller |= {
            "decisions_after_step": controller["decisions"] - earlier,
            "tick_last": last["tick"],
        }
        result["controller"] = controller
    return result


def plan(
    args: argparse.Namespace, probes: list[dict[str, Any]]
) -> tuple[Schedule, dict[str, Any], dict[str, Any]]:
    """The schedule, the variants' front options, and the probe's report, from the fit."""
    from pyspark_flamestream.fronts.generator import RateSchedule

    per_tick = args.target_ms / 2000  # the controller's rule: a batch within half the budget
    per_row, fixed_cost = cost_fit(probes)
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
    steps = ((0.0, rate), (args.before, high))
    total = round(rate * args.before + high * args.after)
    schedule = Schedule(steps, total, RateSchedule(steps))
    variants: dict[str, Any] = {}
    if "controller" in args.variants:
        variants["controller"] = {
            "controller": "on",
            "targetLatencyMs": args.target_ms,
            # at least what keeps up before the step in a tick of half the budget
            "minRecordsPerTrigger": max(100, round(rate * per_tick / 4)),
            # a bound against runaway batches (the controller's first limit)
            "maxRecordsPerTrigger": max(1000, round(16 * max(steady, high * per_tick))),
        }
    for k in args.fixed if "fixed" in args.variants else []:
        rows = max(100, int(float(f"{k * steady:.2g}")))
        # a limit reads at most rows / tick: seconds of input per tick it can take
        fixed = {
            "times_steady_batch": k,
            "seconds_of_input_before_step": round(rows / rate, 2),
            "seconds_of_input_after_step": round(rows / high, 2),
        }
        variants[f"fixed-{rows}"] = {"maxRecordsPerTrigger": rows, "fixed": fixed}
    if "nolimit" in args.variants:
        variants["nolimit"] = {}
    report = {
        "probes": probes,
        "fit": fit_report(per_row, fixed_cost),
        "budget_rows_per_second": round(budget_rate),
        "budget_feasible": feasible,
        "steady_batch_rows_after_step": round(steady),
        "steady_batch_seconds_after_step": round(fixed_cost + per_row * steady, 3),
    }
    return schedule, variants, report


def run_variants(
    starter: Any, work: cli.Workdir, schedule: Schedule, variants: dict[str, Any], args: Any
) -> dict[str, Any]:
    """Each variant in the order --variants gives (the first meets the least warm JVM)."""
    limit = args.before + args.after + args.drain
    results: dict[str, Any] = {}
    for name in sorted(variants, key=lambda n: args.variants.index(n.split("-")[0])):
        options = {k: v for k, v in variants[name].items() if k != "fixed"}
        entry: dict[str, Any] = {"options": {k: str(v) for k, v in options.items()}}
        if "fixed" in variants[name]:
            entry["fixed"] = variants[name]["fixed"]
        front = {"rateSteps": schedule.option, "totalRows": schedule.total, **options}

        def run(out: Path, ck: Path, front: dict[str, Any] = front) -> dict[str, Any]:
            watched = pipeline.run(starter, front, out, ck, limit, args.timeout)
            return analyse(checkpoint.read(ck), schedule, watched, args)

        results[name] = pipeline.run_variant(work, name, entry, run)
    return results


def summary(results: dict[str, Any], schedule: Schedule, args: Any) -> dict[str, Any]:
    """The pipeline, the input, p99s and ratios, around the variants' results."""
    p99 = {name: r["latency_ms"]["p99"] for name, r in results.items() if r.get("latency_ms")}
    fixed_p99 = {n: v for n, v in p99.items() if n.startswith("fixed-")}
    ratios: dict[str, Any] = {}
    if "controller" in p99 and fixed_p99:
        best = min(fixed_p99, key=lambda n: fixed_p99[n])
        ratios["best_fixed"] = best
        ratios["p99_controller_vs_best_fixed"] = round(p99["controller"] / p99[best], 3)
    if "controller" in p99 and "nolimit" in p99:
        ratios["p99_controller_vs_nolimit"] = round(p99["controller"] / p99["nolimit"], 3)
    return {
        "pipeline": pipeline.report(args.release, keys=GENERATOR_KEYS),
        "input": {
            "rate_steps": schedule.option,
            "rows_per_second_before": schedule.steps[0][1],
            "rows_per_second_after": schedule.steps[1][1],
            "step_at_seconds": args.before,
            "input_seconds": args.before + args.after,
            "total_rows": schedule.total,
            "drain_seconds": args.drain,
            "settle_seconds": args.settle,
        },
        "target_latency_ms": args.target_ms,
        "p99_ms": p99,
        "ratios": ratios,
        "variants": results,
    }


def main(argv: list[str] | None = None) -> int:
    """Probe, run the variants, analyse each checkpoint, print JSON."""
    args = arguments(argv)
    work, record, spark, shim = pipeline.setup("controller", args.work)

    def starter(front: Mapping[str, Any], out: Path, ck: Path) -> Any:
        front = {"keys": GENERATOR_KEYS, **front}
        return pipeline.start(spark, front, out, ck, release=args.release)

    try:
        spark_version = spark.version
        # the session's first query pays the JVM's and Python workers' warm-up: not timed
        warmup = pipeline.probe(starter, work, args.probe_rows[0], 1, args.timeout)
        probes = [
            pipeline.probe(starter, work, n, args.probe_batches, args.timeout)
            for n in args.probe_rows
        ]
        schedule, variants, probe = plan(args, probes)
        results = run_variants(starter, work, schedule, variants, args)
        report = {"probe": {"warmup_batch_seconds": warmup["batch_seconds"], **probe}}
        report |= summary(results, schedule, args)
    finally:
        spark.stop()
    return pipeline.finish(record, spark_version, shim, report, NOTES, work)


NOTES = [
    "input: rateSteps '0:R,S:F*R' (rows/s over both partitions); totalRows = R * before + "
    "F * R * after. Without --rate, F * R = --load x the highest rate at which batches of "
    "target/2 keep up, from the fit seconds = a + b * rows of two backlog probes.",
    "fixed variants: maxRecordsPerTrigger = K x the steady batch after the step without a "
    "limit (rows = F * R * (a + b * rows)), two significant digits. controller: "
    "controller=on, targetLatencyMs, minRecordsPerTrigger = R * target/2 / 4, "
    "maxRecordsPerTrigger = 16 x max(steady batch, F * R * target/2).",
    *latency.NOTES,
    "clock.offsets0_mtime_after_batch0_planning_ms: offsets/0's mtime after batch 0's "
    "planning. controller.decisions_after_step: decisions at the last batch minus at the "
    "last batch planned before the step.",
    "ratios: p99 (latency_ms) of the controller / p99 of the best fixed variant, and / p99 "
    "of nolimit.",
]


if __name__ == "__main__":
    raise SystemExit(main())
