"""The budget benchmark on local Spark: the budget policy against fixed limit x partitions.

The generator pipeline (:mod:`benchmarks.lib.pipeline`; the graph given the front's reader, so
the fronts run its first stage) with a rate burst (``rateSteps``) and a hot key range
(``skewSteps``: Zipf keys for a stretch of records) over many distinct keys, so that the word
count's state grows with the input. Variants one after another, each into a fresh checkpoint:
``controller`` (``budgets=BudgetPolicy``) and ``fixed-<limit>x<n>`` (``maxRecordsPerTrigger``,
``partitions=n``). Per variant, from the checkpoint: p99 availability->release, throughput,
and the fullest keyed partition's state after any batch (the controller's from its decisions,
a fixed run's from its snapshots, listed while it runs).
"""

from __future__ import annotations

import argparse
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.lib import checkpoint, latency, pipeline
from benchmarks.lib.cli import Workdir
from benchmarks.lib.pipeline import GENERATOR_PARTITIONS, Watched
from benchmarks.lib.stats import percentile
from benchmarks.lib.workloads import files_sink, word_count_graph


def schedule(args: argparse.Namespace) -> tuple[str, str, int, Any]:
    """``rateSteps``, ``skewSteps``, total rows and the generator's own rate schedule."""
    from pyspark_flamestream.fronts.generator import RateSchedule

    rate, (b0, b1) = args.spark_rate, args.spark_burst
    steps = ((0.0, rate), (b0, rate * args.factor), (b1, rate))
    total = round(rate * args.spark_seconds + rate * (args.factor - 1) * (b1 - b0))
    per_partition = total // GENERATOR_PARTITIONS
    hot = f"0:0,{per_partition // 3}:{args.spark_exponent},{2 * per_partition // 3}:0"
    option = ",".join(f"{s:g}:{r:g}" for s, r in steps)
    return option, hot, total, RateSchedule(steps)


def start(
    spark: Any, front: Mapping[str, Any], out: Path, ck: Path, applied: Mapping[str, Any]
) -> Any:
    """The pipeline with the front's options ``front``, the graph applied with ``applied``."""
    from flamestream.spark import apply_graph

    reader = spark.readStream.format("flamestream").option("front", "generator")
    for name, value in {"partitions": GENERATOR_PARTITIONS, **front}.items():
        reader = reader.option(name, value)
    rows = apply_graph(
        word_count_graph(), reader, payload="key", checkpoint_location=str(ck), **applied
    )
    return files_sink(rows, out, ck, "json", "tasks").trigger(processingTime="0 seconds").start()


class PeakState:
    """The fullest partition snapshot of a fixed run's groupings, listed at every poll."""

    def __init__(self, ck: Path) -> None:
        self.graph = ck / "flamestream-graph"
        self.peak = 0

    def __call__(self, query: Any, watched: Watched) -> None:
        """One listing (the pipeline's poll)."""
        newest: dict[str, tuple[str, int]] = {}
        for path in self.graph.glob("*/part-*/*.state"):
            if path.parent.parent.name.endswith(".slots"):
                continue  # slots: the controller's partitions are in its decisions
            folder = str(path.parent)
            try:
                size = path.stat().st_size
            except FileNotFoundError:  # collected meanwhile
                continue
            if folder not in newest or path.name > newest[folder][0]:
                newest[folder] = (path.name, size)
        self.peak = max([self.peak, *(size for _, size in newest.values())])


def controller_peak(ck: Path) -> tuple[int, list[dict[str, Any]]]:
    """The fullest partition after any batch, and the decisions, from the policy's board."""
    from flamestream.spark.control.budgeted import LimitBoard

    entries = LimitBoard(posixpath.join(str(ck), "flamestream-graph")).entries()
    return max((int(e["peakPartitionBytes"]) for e in entries), default=0), entries


def planning_ms(ck: Path) -> dict[str, float | None]:
    """Per batch, planning's wall time: batch ``b``'s offset written after ``b - 1``'s commit.

    What every source's ``latestOffset`` took (the fronts' and, with budgets, the control
    channel's decision): median and 90th percentile over the run's batches, ms.
    """
    from flamestream.spark.durable import QueryCheckpoint

    log = QueryCheckpoint(str(ck))
    found = []
    for b in log.logged_batches():
        try:
            planned = Path(log.offset_path(b)).stat().st_mtime
            committed = (ck / "commits" / str(b - 1)).stat().st_mtime
        except FileNotFoundError:
            continue
        found.append(1000 * (planned - committed))
    ordered = sorted(found)
    return {
        "planning_p50_ms": round(percentile(ordered, 50), 1) if ordered else None,
        "planning_p90_ms": round(percentile(ordered, 90), 1) if ordered else None,
    }


def cpu_ms(shim: Any) -> float | None:
    """The application's CPU so far (the JVM shim's ``cpu``: every process below Spark)."""
    from flamestream.spark.control.budgeted import application_cpu_ms

    return application_cpu_ms(shim)


def analyse(ck: Path, rates: Any, total: int, watched: Watched, settle: float) -> dict[str, Any]:
    """p50/p99 latency and throughput of one run, from its checkpoint."""
    ck_read = checkpoint.read(ck)
    found = latency.timeline(
        ck_read.batches, rates, pipeline.shares(total), watched, settle, lambda _, t: False
    )
    ordered = sorted(found.measured)
    released = [b.released for b in ck_read.batches if b.released is not None]
    span = (max(released) - found.start) if released else 0.0
    return {
        "finished": watched.finished,
        "batches": len(ck_read.batches),
        "p50_ms": round(percentile(ordered, 50) * 1000, 1) if ordered else None,
        "p99_ms": round(percentile(ordered, 99) * 1000, 1) if ordered else None,
        "rows_per_second": round(found.released / span, 1) if span > 0 else 0.0,
        "released_rows": found.released,
        "censored_rows": found.censored + found.unread,
        **planning_ms(ck),
    }


def controller(args: argparse.Namespace, cpu_us: float | None = None) -> dict[str, Any]:
    """The budget policy's variant: latency and memory budgets, and CPU if ``cpu_us``."""
    from flamestream.spark.control.budgeted import BudgetPolicy

    policy = BudgetPolicy(
        target_latency_ms=args.spark_target_ms,
        max_state_bytes_per_partition=round(args.spark_budget_kb * 1000),
        min_rows=100,
        max_moves=args.max_moves,
        cores=args.cores,
        max_cpu_us_per_record=cpu_us,
        cpu_window_ms=args.spark_cpu_window_ms,
    )
    return {"front": {}, "applied": {"partitions": args.spark_partitions, "budgets": policy}}


def variants(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per variant: the front's extra options and what ``apply_graph`` gets.

    ``controller-cpu`` (all three budgets) is added by :func:`run_all` after the fixed
    sweep, its CPU budget from the sweep unless ``--spark-cpu-us`` says.
    """
    found: dict[str, dict[str, Any]] = {"controller": controller(args)}
    for limit in args.spark_limits:
        for n in args.spark_actives:
            front = {"maxRecordsPerTrigger": limit} if limit else {}
            name = f"fixed-{limit or 'nolimit'}x{n}"
            found[name] = {"front": front, "applied": {"partitions": n}}
    return found


def warm_up(spark: Any, work: Workdir, common: Mapping[str, Any], timeout: float) -> None:
    """A short run first, not measured: the session's first query warms the JVM up.

    Else its warm-up (Python workers, code paths) would fall on the first variant.
    """
    front = {**common, "rateSteps": "0:1000", "totalRows": 2000, "skewSteps": "0:0"}
    out, ck = work.fresh("warmup")
    pipeline.run(
        lambda f, o, c: start(spark, f, o, c, {"partitions": 2}), front, out, ck, 5, timeout
    )
    work.drop(out, ck)


def cpu_budget(args: argparse.Namespace, results: Mapping[str, Any]) -> float | None:
    """The CPU budget of ``controller-cpu``, us a record.

    ``--spark-cpu-us``, else 0.9x the CPU per record of the cheapest fixed setting that held
    the memory budget (a budget no fixed setting within the others meets).
    """
    if args.spark_cpu_us:
        return float(args.spark_cpu_us)
    budget = round(args.spark_budget_kb * 1000)
    held = [
        v["cpu_us_per_record"]
        for n, v in results.items()
        if n.startswith("fixed-")
        and v.get("cpu_us_per_record")
        and v.get("peak_state_bytes_per_partition", budget + 1) <= budget
    ]
    return round(0.9 * min(held), 1) if held else None


def run_all(
    spark: Any, work: Workdir, args: argparse.Namespace, shim: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every variant in turn; the input, and per variant its figures (CPU with the shim)."""
    rate_steps, skew_steps, total, rates = schedule(args)
    common = {
        "rateSteps": rate_steps,
        "skewSteps": skew_steps,
        "totalRows": total,
        "keys": args.spark_keys,
    }
    results: dict[str, Any] = {}
    limit = args.spark_seconds + args.drain
    warm_up(spark, work, common, args.timeout)
    todo = list(variants(args).items())
    while todo:
        name, variant = todo.pop(0)
        front = {**common, **variant["front"]}

        def run(
            out: Path, ck: Path, front: dict[str, Any] = front, variant: Any = variant
        ) -> dict[str, Any]:
            peak = PeakState(ck)
            watched = pipeline.run(
                lambda f, o, c: start(spark, f, o, c, variant["applied"]),
                front,
                out,
                ck,
                limit,
                args.timeout,
                poll=peak,
            )
            figures = analyse(ck, rates, total, watched, args.settle)
            if "budgets" in variant["applied"]:
                peak.peak, decisions = controller_peak(ck)
                figures["decisions"] = decisions
                spent = sorted(float(d.get("decideMs", 0.0)) for d in decisions)
                figures["decide_p50_ms"] = percentile(spent, 50) if spent else None
            figures["peak_state_bytes_per_partition"] = peak.peak
            return figures

        entry = {"options": {k: str(v) for k, v in variant["front"].items()}}
        before = cpu_ms(shim)
        results[name] = pipeline.run_variant(work, name, entry, run)
        after, rows = cpu_ms(shim), results[name].get("released_rows")
        if before is not None and after is not None and rows:
            results[name]["cpu_us_per_record"] = round(1000 * (after - before) / rows, 1)
        if not todo and "controller-cpu" not in results:
            budget = cpu_budget(args, results)
            if budget is not None:
                todo.append(("controller-cpu", controller(args, budget)))
                results["cpu_budget_us"] = budget
    data = {"rate_steps": rate_steps, "skew_steps": skew_steps, "total_rows": total}
    return data, results
