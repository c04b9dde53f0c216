"""Budget benchmark: the budget policy against a sweep of fixed (read limit x partitions).

A bursty, skewed workload: ``--rate`` rows/s with a ``--factor`` x burst, and a hot key range
(``--hot-share`` of the rows on a few slots of one partition). Variants: ``controller`` (the
budget policy deciding read limit, active partitions and slot moves every tick) and
``fixed-<limit>x<n>`` for every ``--limits`` x ``--actives``. Reported for each: p50/p99
availability->release, throughput, peak state bytes of any partition, whether the memory
budget held; the ratios of the controller to the best fixed setting (overall, and among those
that held the budget); the controller's decisions per tick, drawn into ``--plot``.

``simulated``: the keyed pipeline model of :mod:`benchmarks.lib.budget_model` (cost per tick,
state per item and its expiry), deterministic, no Spark. ``spark``: the same comparison on
local Spark (:mod:`benchmarks.lib.budget_spark`), unless ``--no-spark``. Prints one JSON
object::

    python -m benchmarks.spark_budgets [--seconds S] [--rate R] [--factor F]
        [--budget-mb M] [--partitions P] [--target-ms T] [--limits L ...]
        [--actives N ...] [--plot PNG] [--work DIR] [--no-spark] [--spark-seconds S]
        [--spark-rate R] [--spark-burst FROM TO] [--spark-keys K] [--spark-budget-kb KB]
        [--spark-partitions P] [--spark-limits L ...] [--spark-actives N ...] [--drain S]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks.compare import venvs
from benchmarks.compare.errors import SetupError
from benchmarks.compare.harness import MATPLOTLIB
from benchmarks.lib import record
from benchmarks.lib.budget_model import Run, Workload, controller, fixed, simulate
from flamestream.spark.control.policy import Budgets, Setting

#: Stands for "no read limit" in the fixed sweep.
NO_LIMIT = 2**31 - 1


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The workload, the budgets, the fixed sweep, where the plot goes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--seconds", type=float, default=60.0, help="input seconds")
    add("--rate", type=float, default=2000.0, help="rows/s outside the burst")
    add("--factor", type=float, default=10.0, help="the burst: rate x factor")
    add("--burst", type=float, nargs=2, default=[20.0, 30.0], help="burst from, to (s)")
    add("--hot", type=float, nargs=2, default=[15.0, 40.0], help="hot key range from, to (s)")
    add("--hot-share", type=float, default=0.8, help="share of rows on the hot slots")
    add("--row-bytes", type=int, default=200, help="state bytes an item adds")
    add("--window-ticks", type=int, default=4, help="ticks an item's state lives")
    add("--budget-mb", type=float, default=3.0, help="state budget per keyed partition")
    add("--partitions", type=int, default=4, help="maximum parallelism P")
    add("--cores", type=int, default=2, help="cores (tasks run in parallel)")
    add("--target-ms", type=float, default=2000.0, help="targetLatencyMs")
    add("--max-moves", type=int, default=4, help="slots moved per tick at most")
    add("--limits", type=int, nargs="*", default=[1000, 2000, 4000, 16000, NO_LIMIT])
    add("--actives", type=int, nargs="*", default=[1, 2, 4])
    add("--plot", default="docs/img/bench-budgets.png", help="PNG of the decisions ('' none)")
    add("--work", type=Path, default=Path(".bench"), help="plot virtualenv under <work>/venvs")
    spark_arguments(parser)
    return parser.parse_args(argv)


def spark_arguments(parser: argparse.ArgumentParser) -> None:
    """The local Spark part's flags (``--no-spark``: the simulation only)."""
    add = parser.add_argument
    add("--no-spark", action="store_true", help="skip the local Spark part")
    add("--spark-seconds", type=float, default=40.0, help="input seconds on Spark")
    add("--spark-rate", type=float, default=1000.0, help="rows/s outside the burst")
    add("--spark-burst", type=float, nargs=2, default=[10.0, 20.0], help="burst from, to (s)")
    add("--spark-keys", type=int, default=50000, help="distinct keys (state grows with them)")
    add("--spark-exponent", type=float, default=1.3, help="Zipf exponent of the hot range")
    add("--spark-partitions", type=int, default=4, help="the controller's P")
    add("--spark-target-ms", type=float, default=8000.0, help="targetLatencyMs on Spark")
    # the word count's final state is ~6 MB over 50,000 keys: 2.5 MB a partition needs at
    # least 3 of the 4 (1.5 MB, the final state over P, leaves no setting any headroom)
    add("--spark-budget-kb", type=float, default=2500.0, help="state budget per partition")
    add("--spark-limits", type=int, nargs="*", default=[2000, 8000, 0], help="0: no limit")
    add("--spark-actives", type=int, nargs="*", default=[1, 2, 4])
    add("--drain", type=float, default=30.0, help="seconds after the input until a stop")
    add("--settle", type=float, default=3.0, help="records of the first seconds not measured")
    add("--timeout", type=float, default=300.0, help="seconds for the first planning")
    add("--spark-work", type=Path, default=None, help="checkpoints and outputs (default: tmp)")
    add(
        "--spark-cpu-us",
        type=float,
        default=0.0,
        help="CPU budget, us a record (0: from the sweep)",
    )
    add("--spark-cpu-window-ms", type=float, default=10_000.0, help="the CPU budget's window")


def spark_part(args: argparse.Namespace) -> dict[str, Any]:
    """The controller and the fixed sweep on local Spark (timings provisional if shared)."""
    from benchmarks.lib import budget_spark, pipeline

    work, _, spark, shim = pipeline.setup("budgets", args.spark_work)
    try:
        version = spark.version
        data, variants = budget_spark.run_all(spark, work, args, shim)
    finally:
        spark.stop()
    cpu_budget = variants.pop("cpu_budget_us", None)
    budget = round(args.spark_budget_kb * 1000)
    for figures in variants.values():
        if "p99_ms" in figures:
            figures["budget_held"] = figures["peak_state_bytes_per_partition"] <= budget
    measured = {n: v for n, v in variants.items() if v.get("p99_ms") is not None}
    work.close()
    return {
        "provisional": True,
        "spark": version,
        "shim": shim is not None,
        "input": data | {"keys": args.spark_keys, "burst": args.spark_burst},
        "budget_bytes": budget,
        "cpu_budget_us_per_record": cpu_budget,
        "variants": variants,
        "ratios": compare(measured) if "controller" in measured else {},
        "ratios_three_budgets": compare(measured, "controller-cpu")
        if "controller-cpu" in measured
        else {},
    }


def workload_of(args: argparse.Namespace) -> tuple[Workload, Budgets]:
    """The simulated workload and the declared budgets, from the arguments."""
    hot_slots = tuple(range(0, 4 * args.partitions, args.partitions))  # all on partition 0
    workload = Workload(
        seconds=args.seconds,
        rate=args.rate,
        burst=tuple(args.burst),
        burst_factor=args.factor,
        hot=tuple(args.hot),
        hot_slots=hot_slots,
        hot_share=args.hot_share,
        row_bytes=args.row_bytes,
        window_ticks=args.window_ticks,
        cores=args.cores,
    )
    budgets = Budgets(
        target_latency_ms=args.target_ms,
        partitions=args.partitions,
        max_state_bytes_per_partition=round(args.budget_mb * 1e6),
        max_moves=args.max_moves,
    )
    return workload, budgets


def simulated(args: argparse.Namespace) -> dict[str, Any]:
    """The controller and every fixed setting on the simulated pipeline."""
    workload, budgets = workload_of(args)
    budget = budgets.max_state_bytes_per_partition
    first = Setting.initial(budgets, workload.cores)
    runs: dict[str, Run] = {
        "controller": simulate(workload, budgets, first, controller(budgets)),
        # as on Spark: the fronts read with the limit decided a tick earlier
        "controller-lagged": simulate(workload, budgets, first, controller(budgets), lag=True),
    }
    for limit in args.limits:
        for n in args.actives:
            start = Setting(limit, n, tuple(s % n for s in range(budgets.slots)))
            name = f"fixed-{'nolimit' if limit == NO_LIMIT else limit}x{n}"
            runs[name] = simulate(workload, budgets, start, fixed())
    variants = {name: run.summary(budget) for name, run in runs.items()}
    # all three budgets: CPU 0.9x the cheapest fixed setting's that held the state budget
    cheapest = min(
        (
            v["cpu_us_per_record"]
            for n, v in variants.items()
            if n.startswith("fixed-") and v["budget_held"]
        ),
        default=None,
    )
    if cheapest is not None:
        three = replace(budgets, max_cpu_us_per_record=round(0.9 * cheapest, 1))
        run = simulate(workload, three, first, controller(three))
        runs["controller-cpu"] = run
        variants["controller-cpu"] = run.summary(budget)
    ratios = compare(variants)
    best = ratios.get("best_fixed_overall")
    return {
        "provisional": False,
        "workload": asdict(workload),
        "budget_bytes": budget,
        "budgets": asdict(budgets),
        "variants": variants,
        "ratios": ratios,
        "ratios_three_budgets": compare(variants, "controller-cpu")
        if "controller-cpu" in variants
        else {},
        "cpu_budget_us_per_record": round(0.9 * cheapest, 1) if cheapest else None,
        "controller_ticks": runs["controller"].ticks,
        "best_fixed_ticks": [
            {k: t[k] for k in ("end_s", "rows", "peak_partition_bytes")} for t in runs[best].ticks
        ]
        if best
        else [],
    }


def compare(variants: dict[str, dict[str, Any]], name: str = "controller") -> dict[str, Any]:
    """Controller ``name`` against the best fixed setting by p99, overall and within budget.

    With CPU figures (``cpu_us_per_record``), its CPU per record against the same ones.
    """
    ours = variants[name]
    fixed_ones = {n: v for n, v in variants.items() if n.startswith("fixed-")}
    held = {n: v for n, v in fixed_ones.items() if v["budget_held"]}
    out: dict[str, Any] = {"controller_budget_held": ours["budget_held"]}
    for label, pool in (("overall", fixed_ones), ("within_budget", held)):
        if not pool:
            out[f"best_fixed_{label}"] = None
            continue
        best = min(pool, key=lambda n: (pool[n]["p99_ms"], -pool[n]["rows_per_second"]))
        out[f"best_fixed_{label}"] = best
        out[f"p99_controller_vs_best_fixed_{label}"] = round(
            ours["p99_ms"] / max(pool[best]["p99_ms"], 1e-9), 3
        )
        out[f"throughput_controller_vs_best_fixed_{label}"] = round(
            ours["rows_per_second"] / max(pool[best]["rows_per_second"], 1e-9), 3
        )
        if ours.get("cpu_us_per_record") and pool[best].get("cpu_us_per_record"):
            out[f"cpu_controller_vs_best_fixed_{label}"] = round(
                ours["cpu_us_per_record"] / pool[best]["cpu_us_per_record"], 3
            )
    return out


def plot(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, Any]:
    """Draw the decisions with matplotlib from its own virtualenv; where it went, or why not."""
    if not args.plot:
        return {"path": None}
    png = Path(args.plot).resolve()
    data = args.work.resolve() / "budgets-report.json"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(json.dumps(report))
    try:
        python = venvs.ensure(args.work.resolve() / "venvs", "matplotlib", MATPLOTLIB)
        script = Path(__file__).with_name("budgets_plot.py")
        done = subprocess.run(  # noqa: S603
            [str(python), str(script), str(data), str(png)],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    except (SetupError, OSError, subprocess.TimeoutExpired) as e:
        return {"path": None, "error": str(e)}
    if done.returncode:
        return {"path": None, "error": done.stderr.strip().splitlines()[-1:]}
    return {"path": args.plot, "matplotlib": MATPLOTLIB}


NOTES = [
    "simulated: a tick of r rows takes overhead + per_row x max(hottest partition's rows, "
    "r / min(active, cores)) + moved state x move cost; an item adds row_bytes to its slot's "
    "state for window_ticks ticks. Latency: a row's arrival to the end of the tick that read "
    "it. Throughput: rows / seconds until the last row is released. Peak state: the fullest "
    "partition during a tick (before expiry).",
    "controller-lagged: the same, its read limit applied a tick late (as on Spark, where a "
    "front may plan before the control channel decides).",
    "fixed-<limit>x<n>: that read limit (nolimit: none), n active partitions, slot s on s mod "
    "n, never changed. The hot slots share partition 0 under every default layout.",
    "ratios: controller / best fixed by p99 (ties by throughput), among all fixed settings "
    "and among those whose peak state held the budget.",
    "spark: the generator pipeline into a word count over many keys (its state grows with "
    "them), a rate burst (rateSteps) and a hot key range (skewSteps, Zipf over the middle "
    "third of the records); fixed-<limit>x<n>: maxRecordsPerTrigger (nolimit: none) and "
    "partitions=n; controller: budgets=BudgetPolicy on partitions=P. Peak state: the fullest "
    "partition after a batch (controller: its decisions; fixed: snapshots listed every "
    "0.25 s). Timings are provisional unless the machine ran nothing else.",
]


def main(argv: list[str] | None = None) -> int:
    """Run the sweep, print JSON, draw the plot."""
    args = arguments(argv)
    began = record.Record(library=True)
    report: dict[str, Any] = {"benchmark": "budget policy vs fixed read limit x partitions"}
    report["simulated"] = simulated(args)
    report["plot"] = plot(args, report)
    if not args.no_spark:
        report["spark"] = spark_part(args)
    report["machine"] = began.machine()
    report["seconds"] = began.seconds()
    report["notes"] = NOTES
    return record.emit(report)


if __name__ == "__main__":
    raise SystemExit(main())
