"""The generator pipeline of the latency benchmarks: start it, watch it, probe its cost.

generator front (``GENERATOR_PARTITIONS`` partitions, the graph applied to its ``key``
column) -> ``apply_graph`` -> flamestream files sink (JSON) with a processing-time trigger.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.lib.checkpoint import first_offset_mtime
from benchmarks.lib.cli import Workdir
from benchmarks.lib.record import Record, emit, load_average
from benchmarks.lib.session import local_spark
from benchmarks.lib.stats import median
from benchmarks.lib.workloads import files_sink, word_count_graph

#: Generator front settings.
GENERATOR_PARTITIONS = 2
GENERATOR_KEYS = 100


def shares(total: int) -> dict[str, int]:
    """Records per generator partition of ``total``."""
    p = GENERATOR_PARTITIONS
    return {f"generator-{i}": total // p + (i < total % p) for i in range(p)}


def setup(name: str, work: Path | None) -> tuple[Workdir, Record, Any, Any]:
    """The working directory, the run's record, the session and its JVM shim (or None).

    The shim is on when its jar is installed: per-task metrics, the controller's progress.
    """
    from flamestream import jvm

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir, record = Workdir(work, f"flamestream-{name}-"), Record(library=True)
    conf: dict[str, str] = {}
    if any(jvm.spark_jars_dir().glob("flamestream-shim-*.jar")):
        conf = {
            "spark.plugins": jvm.PLUGIN_CLASS,
            "spark.extraListeners": jvm.TASK_LISTENER_CLASS,
            "spark.sql.streaming.streamingQueryListeners": jvm.PROGRESS_LISTENER_CLASS,
        }
    spark = local_spark(f"flamestream-spark-{name}", conf)
    return workdir, record, spark, jvm.Shim.of_session(spark)


def finish(
    record: Record, spark: str, shim: Any, report: dict[str, Any], notes: list[str], work: Workdir
) -> int:
    """Print a step benchmark's report: the machine, the total seconds, ``report``, notes."""
    machine = record.machine(spark, shuffle_partitions=2, shim=shim is not None)
    result = {"machine": machine, "seconds_total": record.seconds(), **report, "notes": notes}
    return emit(result, work)


def start(
    spark: Any,
    front: Mapping[str, Any],
    out: Path,
    ck: Path,
    *,
    graph: Callable[[], Any] = word_count_graph,
    release: str = "tasks",
    trigger: str = "0 seconds",
    **applied: Any,
) -> Any:
    """Start the pipeline with the front's options ``front`` (``applied``: to apply_graph)."""
    from flamestream.spark import apply_graph

    reader = spark.readStream.format("flamestream").option("front", "generator")
    for name, value in {"partitions": GENERATOR_PARTITIONS, **front}.items():
        reader = reader.option(name, value)
    rows = apply_graph(
        graph(), reader.load(), payload="key", checkpoint_location=str(ck), **applied
    )
    return files_sink(rows, out, ck, "json", release).trigger(processingTime=trigger).start()


@dataclass
class Watched:
    """A query run until it had processed a number of rows (or a deadline)."""

    started: float  #: wall time (s) the watch began
    stopped: float = 0.0
    finished: bool = True  #: every row was processed before the deadline
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)  #: batches with rows
    seen: dict[str, float] = field(default_factory=dict)  #: visible output file -> first seen
    tasks: dict[int, list[list[int]]] = field(default_factory=dict)  #: batch -> keyed tasks

    @property
    def rows(self) -> int:
        """Input rows processed."""
        return sum(int(p["numInputRows"]) for p in self.progress.values())


def watch(
    query: Any,
    total: int,
    deadline: float,
    *,
    started: float | None = None,
    out: Path | None = None,
    clock: tuple[Path, float] | None = None,
    poll: Callable[[Any, Watched], None] | None = None,
) -> Watched:
    """Poll ``query`` until it processed ``total`` input rows or ``deadline``, then stop it.

    ``out``: also note when each visible file first appears there (every 10 ms). ``clock``
    ``(ck, limit)``: the deadline becomes offsets/0's mtime + ``limit`` once it exists.
    ``poll(query, watched)`` runs at every poll and once after the stop.
    """
    watched = Watched(time.time() if started is None else started)
    polled = 0.0
    try:
        while True:
            now = time.time()
            if out is not None and out.is_dir():
                for entry in os.scandir(out):
                    if not entry.name.startswith((".", "_")):
                        watched.seen.setdefault(entry.name, now)
            if now - polled >= 0.25:
                polled = now
                first = first_offset_mtime(clock[0]) if clock else None
                if clock and first is not None:
                    deadline, clock = first + clock[1], None
                for p in query.recentProgress:
                    if int(p["numInputRows"]):
                        watched.progress[int(p["batchId"])] = p
                if poll is not None:
                    poll(query, watched)
                if watched.rows >= total or not query.isActive or now > deadline:
                    watched.finished = watched.rows >= total
                    break
            time.sleep(0.01 if out is not None else 0.05)
    finally:
        query.stop()
        watched.stopped = time.time()
        if poll is not None:
            poll(query, watched)
    if query.exception() is not None:
        raise query.exception()
    return watched


def run(
    starter: Callable[[Mapping[str, Any], Path, Path], Any],
    front: Mapping[str, Any],
    out: Path,
    ck: Path,
    limit: float,
    timeout: float,
    poll: Callable[[Any, Watched], None] | None = None,
) -> Watched:
    """Start a step run; stop it once every row was processed, or ``limit`` s after offsets/0.

    Until offsets/0 exists (the first planning) the deadline is ``limit + timeout`` s away.
    """
    began = time.time()
    query = starter(front, out, ck)
    total = int(front["totalRows"])
    return watch(query, total, began + limit + timeout, started=began, clock=(ck, limit), poll=poll)


def report(release: str, **extra: Any) -> dict[str, Any]:
    """The ``pipeline`` section of a step benchmark's report."""
    return {
        "front": "generator",
        "partitions": GENERATOR_PARTITIONS,
        **extra,
        "payload_column": "key",
        "graph": "wordcount",
        "sink": "files",
        "release": release,
        "trigger": "ProcessingTime(0)",
    }


def probe(
    starter: Callable[[Mapping[str, Any], Path, Path], Any],
    work: Workdir,
    batch_rows: int,
    batches: int,
    timeout: float,
) -> dict[str, Any]:
    """Median batch seconds at ``batch_rows`` rows per batch, fed from a backlog.

    The backlog: ``rowsPerSecond`` 0 makes every row available at once. The first batch is
    a warm-up (and for elastic graphs the one still under the default layout): not timed.
    """
    out, ck = work.fresh("probe")
    total = batch_rows * (batches + 1)
    front = {"rowsPerSecond": 0, "totalRows": total, "maxRecordsPerTrigger": batch_rows}
    began = time.time()
    watched = watch(starter(front, out, ck), total, began + timeout, started=began)
    if not watched.finished:
        msg = f"probe of {batch_rows} rows per batch did not finish in {timeout} s"
        raise TimeoutError(msg)
    timed = [watched.progress[b] for b in sorted(watched.progress)[1:]]
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in timed]
    work.drop(out, ck)
    return {
        "batch_rows": batch_rows,
        "batch_seconds": [round(s, 3) for s in seconds],
        "batch_seconds_median": median(seconds),
    }


def run_variant(
    work: Workdir, name: str, entry: dict[str, Any], run: Callable[[Path, Path], dict[str, Any]]
) -> dict[str, Any]:
    """``run(out, ck)`` in fresh directories; a failure is reported, not raised.

    One failed variant (the library under test is a shared, changing tree) leaves the others.
    """
    out, ck = work.fresh(name.replace("+", "-"))
    began = time.perf_counter()
    analysed: dict[str, Any] = {}
    try:
        analysed = run(out, ck)
    except Exception as exc:  # reported in the variant's JSON
        lines = [t for t in str(exc).splitlines() if t.strip() and "SQLSTATE" not in t] or [""]
        entry["error"] = f"{type(exc).__name__}: {lines[0][:300]} ... {lines[-1][:300]}"
    work.drop(out, ck)
    return {
        **entry,
        "wall_seconds": round(time.perf_counter() - began, 1),
        "load_average_1m_after": load_average(),
        **analysed,
    }
