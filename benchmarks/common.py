"""What the Spark benchmarks share: the local session, and timing a query from its progress."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Run:
    """One timed streaming query."""

    define: float  #: seconds to define the DataFrame and its writer (not in ``seconds``)
    seconds: float  #: wall seconds from start() to the query's termination
    rows: int  #: input rows over the batches
    batches: int  #: micro-batches that read rows
    first_batch: float  #: seconds from start() to the first batch's trigger
    durations: dict[str, float] = field(default_factory=dict)  #: durationMs summed, in s
    metrics: dict[str, int] = field(default_factory=dict)  #: observed metrics, summed

    @property
    def add_batch(self) -> float:
        """Seconds the batches spent in addBatch (the tasks, and for a sink its commit)."""
        return self.durations.get("addBatch", 0.0)

    @property
    def triggers(self) -> float:
        """Seconds of the batches' triggerExecution, summed: the steady-state time."""
        return self.durations.get("triggerExecution", 0.0)


def run_query(define: Callable[[], Any], timeout: float, *, observed: str | None = None) -> Run:
    """Define a query (``define()`` returns its writer), start it, wait, summarize progress.

    ``observed`` names a ``DataFrame.observe`` whose metrics are summed over the batches.
    """
    began = time.perf_counter()
    writer = define()
    defined, wall = time.perf_counter(), time.time()
    query = writer.start()
    query.awaitTermination(timeout)
    elapsed = time.perf_counter() - defined
    if query.isActive:
        query.stop()
        msg = f"query {query.name or query.id} did not finish within {timeout} s"
        raise TimeoutError(msg)
    if query.exception() is not None:
        raise query.exception()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    first = min(
        (datetime.fromisoformat(p["timestamp"]).timestamp() for p in progress), default=wall
    )
    durations: dict[str, float] = {}
    for p in progress:
        for name, ms in p["durationMs"].items():
            durations[name] = durations.get(name, 0.0) + ms / 1000
    metrics: Counter[str] = Counter()
    if observed is not None:
        for p in query.recentProgress:
            row = p["observedMetrics"].get(observed)
            if row is not None:
                metrics.update({k: int(v or 0) for k, v in row.asDict().items()})
    return Run(
        define=defined - began,
        seconds=elapsed,
        rows=sum(int(p["numInputRows"]) for p in progress),
        batches=len(progress),
        first_batch=first - wall,
        durations=durations,
        metrics=dict(metrics),
    )


def local_spark(app: str, conf: Mapping[str, str] | None = None) -> Any:
    """The benchmarks' SparkSession: ``local[2]``, 2 shuffle partitions, UI and progress off."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for name, setting in (conf or {}).items():
        builder = builder.config(name, setting)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class Timings:
    """Per case: median wall seconds and rates over the timed runs, and the JSON about them."""

    rate: dict[str, float]  #: rows per wall second
    steady: dict[str, float]  #: rows per second of trigger execution
    report: dict[str, Any]  #: seconds, rates, batches and median phases, ready for the JSON


def timings(rows: int, runs: Mapping[str, list[Run]], warmups: Mapping[str, list[Run]]) -> Timings:
    """Summarize each case's runs (``rows`` input rows per run) the way every benchmark reports."""
    median = {case: statistics.median(r.seconds for r in done) for case, done in runs.items()}
    rate = {case: rows / seconds for case, seconds in median.items()}
    steady = {
        case: rows / statistics.median(r.triggers for r in done) for case, done in runs.items()
    }

    def phase(done: list[Run], value: Callable[[Run], float]) -> float:
        return round(statistics.median(value(r) for r in done), 3)

    report = {
        "seconds": {
            case: {
                "median": round(median[case], 3),
                "runs": [round(r.seconds, 3) for r in done],
                "warmup": [round(r.seconds, 3) for r in warmups.get(case, [])],
            }
            for case, done in runs.items()
        },
        "rows_per_second": {case: round(r) for case, r in rate.items()},
        "steady_rows_per_second": {case: round(r) for case, r in steady.items()},
        "batches": {case: sorted({r.batches for r in done}) for case, done in runs.items()},
        "phases_median_seconds": {
            case: {
                "define": phase(done, lambda r: r.define),
                "start_to_first_batch": phase(done, lambda r: r.first_batch),
                "add_batch": phase(done, lambda r: r.add_batch),
                "trigger_execution": phase(done, lambda r: r.triggers),
                "after_last_batch": phase(done, lambda r: r.seconds - r.first_batch - r.triggers),
            }
            for case, done in runs.items()
        },
    }
    return Timings(rate, steady, report)
