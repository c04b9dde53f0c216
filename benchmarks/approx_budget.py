"""Exact or approximate under a state budget (#41 §4): exact-only, approximate-only, the policy.

One workload whose exact state passes the budget: the generator front's records (every value
new, ``--value-bytes`` characters), keyed by their first ``--key-chars`` characters, a distinct
count of the values per key; the whole input available at once (a backlog), read under
``BudgetPolicy(max_state_bytes_per_partition=--budget-kb)`` on ``--partitions`` keyed
partitions. Variants:

* ``exact``: ``exact_or_approximate`` with ``BudgetPolicy(sketch=False)``: exact state only,
  the read limit throttled by the state budget (down to 0: reading waits; the run stops at
  ``--deadline`` s with the rows it read);
* ``approximate``: ``distinct_count`` (the same sketch, ``exact_limit=--floor``): sketches
  from the start;
* ``policy``: ``exact_or_approximate``, the policy sketching key slots when the budget would
  otherwise throttle reading.

Each run is a fresh process (a fresh ``local[2]`` session and Python workers), runs
interleaved (A B C A B C ...) after ``--warmup`` untimed rounds, medians over ``--repeat``.
Per run: the peak resident memory of the application's Python workers (the largest one and
their sum, sampled every 0.1 s, the driver's Python excluded) and of its JVM, p50/p99 batch
duration (Spark's ``triggerExecution`` of the batches that read rows, the first one, which
starts the workers, left out), throughput (those batches' rows / seconds from the second
one's start to the last one's end, or to the stop of a run that did not finish), the share
of released rows that are approximate, the fullest keyed partition's state after any batch
(the policy's decisions), the load averages before and after. Prints one JSON object with
the ratios of the policy to the other two::

    python -m benchmarks.approx_budget [--rows N] [--key-chars C] [--value-bytes B]
        [--budget-kb KB] [--partitions P] [--floor F] [--lg-k K] [--deadline S]
        [--repeat R] [--warmup W] [--timeout S] [--work DIR]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.processes import PeakMemory
from benchmarks.lib.record import Record, emit, load_averages
from benchmarks.lib.stats import median, percentile

VARIANTS = ["exact", "approximate", "policy"]


def graph(variant: str, args: Any) -> Any:
    """The distinct count per key of ``variant``: exact_or_approximate or distinct_count."""
    from flamestream import Dataflow, distinct_count, exact_or_approximate

    chars = args.key_chars
    flow = Dataflow("uniques")
    up = flow.source("values")
    common: dict[str, Any] = {"key": lambda v: v[:chars], "value": lambda v: v, "lg_k": args.lg_k}
    if variant == "approximate":
        counted = distinct_count(flow, "seen", up, exact_limit=args.floor, **common)
    else:
        counted = exact_or_approximate(flow, "seen", up, floor=args.floor, **common)
    flow.sink("out", counted)
    return flow


def start(spark: Any, variant: str, args: Any, out: Path, ck: Path) -> Any:
    """The query of ``variant`` over the generator's backlog, into the files sink."""
    from benchmarks.lib.workloads import files_sink
    from flamestream.spark import apply_graph
    from flamestream.spark.control.budgeted import BudgetPolicy

    reader = spark.readStream.format("flamestream").option("front", "generator")
    front = {
        "partitions": 2,
        "rowsPerSecond": 0,
        "totalRows": args.rows,
        "payloadBytes": args.value_bytes,
        "clock": "logical",
    }
    for name, value in front.items():
        reader = reader.option(name, value)
    policy = BudgetPolicy(
        target_latency_ms=args.target_ms,
        max_state_bytes_per_partition=round(args.budget_kb * 1000),
        min_rows=args.min_rows,
        cores=2,
        sketch=variant != "exact",
    )
    rows = apply_graph(
        graph(variant, args),
        reader,
        payload="value",
        checkpoint_location=str(ck),
        partitions=args.partitions,
        budgets=policy,
    )
    return files_sink(rows, out, ck, "json", "tasks").trigger(processingTime="0 seconds").start()


def watch(query: Any, rows: int, deadline: float) -> tuple[list[dict[str, Any]], bool]:
    """The progress of the batches that read rows, until all rows were read or ``deadline``."""
    progress: dict[int, dict[str, Any]] = {}
    try:
        while time.time() < deadline and query.isActive:
            for p in query.recentProgress:
                if int(p["numInputRows"]):
                    progress[int(p["batchId"])] = p
            if sum(int(p["numInputRows"]) for p in progress.values()) >= rows:
                break
            time.sleep(0.2)
    finally:
        query.stop()
    if query.exception() is not None:
        raise query.exception()
    ordered = [progress[b] for b in sorted(progress)]
    return ordered, sum(int(p["numInputRows"]) for p in ordered) >= rows


def child(variant: str, args: Any) -> dict[str, Any]:
    """One run in this process: the query, its workers' peak memory, its figures."""
    from benchmarks.lib.session import spark_session

    out, ck = args.work / "out", args.work / "ck"
    with spark_session(f"flamestream-approx-budget-{variant}") as spark, PeakMemory(0.1) as peak:
        began = time.time()
        query = start(spark, variant, args, out, ck)
        batches, finished = watch(query, args.rows, began + args.deadline)
        stopped = time.time()
    return figures(batches, None if finished else stopped, out, ck) | {
        "peak_worker_mib": peak.worker_mb,
        "peak_workers_mib": peak.workers_mb,
        "peak_jvm_mib": peak.jvm_mb,
    }


def figures(
    batches: list[dict[str, Any]], stopped: float | None, out: Path, ck: Path
) -> dict[str, Any]:
    """Batch durations, throughput, approximate share and peak state of one run.

    ``stopped``: when a run that did not read every row was stopped (its throughput counts
    the time it waited), None for a finished one.
    """
    from datetime import datetime

    from flamestream.spark.control.budgeted import LimitBoard

    def started(p: dict[str, Any]) -> float:
        return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    def took(p: dict[str, Any]) -> float:
        return float(p["durationMs"]["triggerExecution"]) / 1000

    rows = sum(int(p["numInputRows"]) for p in batches)
    timed = batches[1:]  # the first batch starts the workers: not timed
    durations = sorted(took(p) * 1000 for p in timed)
    end = stopped if stopped is not None else started(timed[-1]) + took(timed[-1]) if timed else 0
    span = end - started(timed[0]) if timed else 0.0
    timed_rows = sum(int(p["numInputRows"]) for p in timed)
    released = approximate = 0
    for part in out.glob("part-*"):
        for line in part.read_text().splitlines():
            released += 1
            approximate += "approximate=True" in json.loads(line).get("value", "")
    board = LimitBoard(str(ck / "flamestream-graph")).entries()
    return {
        "finished": stopped is None,
        "rows_read": rows,
        "batches": len(batches),
        "p50_batch_ms": round(percentile(durations, 50), 1) if durations else None,
        "p99_batch_ms": round(percentile(durations, 99), 1) if durations else None,
        "rows_per_second": round(timed_rows / span, 1) if span > 0 else 0.0,
        "released_rows": released,
        "approximate_share": round(approximate / released, 4) if released else 0.0,
        "peak_partition_state_bytes": max((e["peakPartitionBytes"] for e in board), default=0),
        "sketched_slots": board[-1].get("sketched", []) if board else [],
    }


def one_run(variant: str, args: Any, work: Path) -> dict[str, Any]:
    """:func:`child` in a fresh process (a fresh session, fresh workers)."""
    from flamestream.python_env import worker_python

    work.mkdir(parents=True)
    command = [sys.executable, "-m", "benchmarks.approx_budget", "--child", variant]
    command += [*passed_on(args), "--work", str(work)]
    python = worker_python()
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    before = load_averages()
    done = subprocess.run(  # noqa: S603 (our own interpreter, module and arguments)
        command,
        capture_output=True,
        text=True,
        timeout=args.deadline + args.timeout,
        check=False,
        env=env,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"error": f"{variant}: exit {done.returncode}: {done.stderr[-2000:]}"}
    return {**json.loads(lines[-1]), "load_before": before, "load_after": load_averages()}


#: The workload's flags, handed on to each child run.
WORKLOAD = ("rows", "key_chars", "value_bytes", "budget_kb", "partitions", "floor", "lg_k")
WORKLOAD += ("min_rows", "target_ms", "deadline", "timeout")


def passed_on(args: Any) -> list[str]:
    """The workload's flags as a child's arguments."""
    return [f"--{n.replace('_', '-')}={getattr(args, n)}" for n in WORKLOAD]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a variant's timed runs."""
    keys = ("peak_worker_mib", "peak_workers_mib", "peak_jvm_mib", "p99_batch_ms")
    keys += ("rows_per_second", "approximate_share", "peak_partition_state_bytes", "p50_batch_ms")
    out: dict[str, Any] = {}
    for key in keys:
        values = [r[key] for r in runs if r.get(key) is not None]
        out[f"{key}_median"] = median(values) if values else None
    out["finished_runs"] = sum(bool(r.get("finished")) for r in runs)
    return out


def ratios(medians: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The policy's medians over the exact-only and the approximate-only ones."""
    out: dict[str, Any] = {}
    ours = medians.get("policy", {})
    for other in ("exact", "approximate"):
        theirs = medians.get(other, {})
        for key in ("peak_worker_mib", "peak_workers_mib", "p99_batch_ms", "rows_per_second"):
            a, b = ours.get(f"{key}_median"), theirs.get(f"{key}_median")
            out[f"{key}_policy_vs_{other}"] = round(a / b, 3) if a and b else None
    out["approximate_share_policy"] = ours.get("approximate_share_median")
    return out


def measure(args: Any, work: Path) -> dict[str, Any]:
    """Untimed warm-up rounds, then ``--repeat`` interleaved rounds of every variant."""
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
    for round_ in range(args.warmup + args.repeat):
        for variant in args.variants:
            run = one_run(variant, args, work / f"{variant}-{round_}")
            if "error" in run:
                return {"error": run["error"], "runs": runs}
            if round_ >= args.warmup:
                runs[variant].append(run)
    medians = {v: summary(done) for v, done in runs.items()}
    return {
        "variants": {v: {**medians[v], "runs": runs[v]} for v in runs},
        "ratios": ratios(medians),
    }


NOTES = [
    "exact: exact_or_approximate with BudgetPolicy(sketch=False): exact state only, its read "
    "limit cut by the state budget (to 0 once the state fills it: reading waits, the run "
    "ends at --deadline with the rows read so far; finished=false).",
    "approximate: distinct_count(exact_limit=--floor), sketches from the start.",
    "policy: exact_or_approximate, the budget policy sketching key slots between batches "
    "when the budget would otherwise throttle reading (docs/approximate.md).",
    "peak_worker_mib / peak_workers_mib: the largest one / the sum of the application's "
    "Python processes but the driver's (Spark's Python workers, the data source runners, "
    "the warm servers; forked processes share pages, so the sum overstates), sampled every "
    "0.1 s (benchmarks.lib.processes.PeakMemory); peak_jvm_mib: the driver's JVM.",
    "p99_batch_ms: Spark's triggerExecution of the batches that read rows, the first left "
    "out (it starts the Python workers); rows_per_second: their rows / seconds from the "
    "second such batch's start to the last one's end (a run that did not finish: to its "
    "stop at --deadline, the wait counted). peak_partition_state_bytes: the "
    "fullest keyed partition after any batch, from the policy's decisions.",
]


def pyspark_version() -> str:
    """The installed PySpark's version (the children's Spark)."""
    import pyspark

    return str(pyspark.__version__)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison (or, with ``--child``, one run) and print JSON."""
    made = cli.parser(__doc__, timeout=300.0, repeat=3)
    cli.flag(made, "--rows", 200_000, "input records (all available at once)")
    cli.flag(made, "--key-chars", 1, "a key: the value's first C hex characters (16**C keys)")
    cli.flag(made, "--value-bytes", 32, "characters per value (every value distinct)")
    cli.flag(made, "--budget-kb", 2000.0, "state budget per keyed partition")
    cli.flag(made, "--partitions", 2, "keyed partitions P")
    cli.flag(made, "--floor", 16, "values a sketched key keeps exactly")
    cli.flag(made, "--lg-k", 10, "HLL lg_k")
    cli.flag(made, "--min-rows", 1000, "the policy's minRecordsPerTrigger")
    cli.flag(made, "--target-ms", 10_000.0, "the policy's targetLatencyMs")
    cli.flag(made, "--deadline", 180.0, "seconds from a run's start until it stops")
    cli.flag(made, "--variants", VARIANTS, nargs="+", choices=VARIANTS)
    cli.flag(made, "--child", None, "internal: one run of VARIANT")
    args = cli.parse(made, argv)
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0
    record = Record(library=True)
    work = cli.Workdir(args.work, "flamestream-approx-budget-")
    found = measure(args, work.path)
    workload = {n: getattr(args, n) for n in WORKLOAD}
    report = {
        "machine": record.machine(pyspark_version()),
        "seconds_total": record.seconds(),
        "workload": workload,
        **found,
        "notes": NOTES,
    }
    return emit(report, None if "error" in found else work)


if __name__ == "__main__":
    sys.exit(main())
