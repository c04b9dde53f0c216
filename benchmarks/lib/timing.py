"""Timing a streaming query from its progress, interleaved rounds, and their medians."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

from benchmarks.lib.cli import Workdir
from benchmarks.lib.record import emit
from benchmarks.lib.session import spark_session

K = TypeVar("K", bound=Hashable)


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
    #: the last batch's ``stateOperators`` (Spark's own stateful operators; plain dicts)
    state: list[dict[str, Any]] = field(default_factory=list)

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
        state=[_plain(op) for op in progress[-1]["stateOperators"]] if progress else [],
    )


def _plain(value: Any) -> Any:
    """A progress entry as dicts, lists and scalars (PySpark gives Row-like objects)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    as_dict = getattr(value, "asDict", None)
    return _plain(as_dict()) if callable(as_dict) else value


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


@dataclass
class Rounds(Generic[K]):
    """Per case: its timed runs and its untimed warm-up runs."""

    runs: dict[K, list[Run]]
    warmups: dict[K, list[Run]]


def interleave(
    cases: Mapping[K, Callable[[Path, Path], Any]],
    work: Workdir,
    args: Any,
    *,
    observed: str | None = None,
    check: Callable[[K, Path, Run], None] | None = None,
    order: Callable[[int], Sequence[K]] | None = None,
) -> Rounds[K]:
    """``args.warmup`` untimed then ``args.repeat`` timed rounds, the cases in turn (A B A B).

    Each case's ``define(out, checkpoint)`` returns its writer; every run gets fresh
    directories, ``check`` looks at the output before they are removed. ``order(round)``
    gives a round's order (default: the cases' own), so drift hits every case alike.
    """
    rounds: Rounds[K] = Rounds({k: [] for k in cases}, {k: [] for k in cases})
    for attempt in range(args.warmup + args.repeat):
        for key in order(attempt) if order else list(cases):
            out, checkpoint = work.fresh()
            run = run_query(partial(cases[key], out, checkpoint), args.timeout, observed=observed)
            (rounds.warmups if attempt < args.warmup else rounds.runs)[key].append(run)
            if check is not None:
                check(key, out, run)
            work.drop(out, checkpoint)
    return rounds


def run_cases(
    name: str, args: Any, make: Callable[[Any, Any, Workdir], Any], observed: str | None = None
) -> int:
    """An AvailableNow experiment in one session: variants, interleaved runs, analysis, JSON.

    ``make(spark, args, work)`` gives the experiment: its ``cases()`` (key -> define), its
    ``check(key, out, run)`` of every run's output and its ``analyse(rounds, spark_version)``
    (the report, or an ``error`` report). Prints the report; its exit status.
    """
    work = Workdir(args.work, f"flamestream-{name}-")
    with spark_session(f"flamestream-spark-{name}") as spark:
        job = make(spark, args, work)
        rounds = interleave(job.cases(), work, args, observed=observed, check=job.check)
        spark_version = spark.version
    return emit(job.analyse(rounds, spark_version), work)


#: How every AvailableNow benchmark times its queries (for the reports' notes).
TIMING_NOTE = (
    "seconds: wall time from writeStream.start() to the query's termination "
    "(Trigger.AvailableNow; --batches B > 1 splits the input into B batches), the median of "
    "the timed runs after untimed warm-ups, cases interleaved, fresh directories per run; "
    "defining the DataFrame (phases_median_seconds.define) not included. steady: the "
    "batches' triggerExecution summed, without the query's one-time start (for a Python data "
    "source about 1 s here: a Python planner process per query)."
)
