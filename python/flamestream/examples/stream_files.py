"""The main job: word count on three files appended at uneven rates, checked against the oracle.

Every line of the bundled text gets a record time (its place in the text) and is dealt to one
of three files, the fronts ``east``, ``north`` and ``south``. A writer thread appends them at
uneven rates: ``north`` appends each line on time, ``east`` a second late, ``south`` in
bursts every two seconds. Stamped from the record times (``clock=record``), the lines reach the
query out of global-time order across micro-batches: a word's count is first computed
without the earlier occurrences ``south`` has not delivered yet. The grouping then replays
(re-emits the counts after a late occurrence) and invalidates (the counts it re-emitted
replace their older versions), and the barrier sink drops the invalidated versions it holds
and releases a count only when no earlier record can arrive any more: exactly once, in
global-time order. The query runs ``SparkGraph.write_stream`` on the files front: the first
stage in the front's reads, the keyed stage in the sink's writes.

The job prints, per batch, the records read (``progress.observedMetrics``; Spark's own
``numInputRows`` counts the blocks the front sends), the grouping's replays and
invalidations (its snapshots' counters), what the barrier dropped, released and holds (its
commit marker). At the end it runs the reference runtime (``flamestream.testing.run_in_order``)
on the same records with the same global times and compares the released rows::

    python -m flamestream.examples.stream_files [--work DIR] [--seconds S] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flamestream import Dataflow, Reduced, map_reduce
from flamestream.examples.wordcount import load_sample, split_words
from flamestream.python_env import RECOMMENDED_CONF, worker_python

#: The fronts: file name -> (seconds behind the text's timeline, seconds between appends).
#: ``north`` appends each line on time, ``east`` each a second late, ``south`` its lines in
#: bursts every two seconds: lines reach the query up to two seconds out of order.
FRONT_PACE = {"east.txt": (1.0, 0.0), "north.txt": (0.0, 0.0), "south.txt": (0.0, 2.0)}
#: The order the lines are dealt in (line n goes to DEAL[n % 3]).
DEAL = ("north.txt", "east.txt", "south.txt")
#: Record times: line n of the input has time FIRST_TIME + STEP * n.
FIRST_TIME, STEP = 1_000, 10
#: The key partitions of the grouping (Spark's shuffle partitions).
PARTITIONS = 2
#: The grouping's step id (``map_reduce`` names it after its own: ``count``).
GROUPING = "count.grouping"


def words_of(line: str) -> list[str]:
    """The words of a front line: a JSON object whose ``text`` is the line of the text."""
    return split_words(json.loads(line)["text"])


def show(reduced: Reduced[str, int]) -> str:
    """A released count as ``word=count``."""
    return f"{reduced.key}={reduced.value}"


def build_flow() -> Dataflow:
    """Word count over JSON lines: lines -> split -> count (map_reduce) -> show -> counts."""
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), words_of)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=int.__add__)
    flow.sink("counts", flow.map("show", counts, show))
    return flow


@dataclass
class Front:
    """One file: its records ``(record time, line)`` in order, and when each is appended."""

    name: str
    records: list[tuple[int, str]] = field(default_factory=list)

    def append_times(self, seconds: float, lines: int) -> list[float]:
        """When each record is appended: its place among ``lines`` over ``seconds``, late."""
        delay, burst = FRONT_PACE[self.name]
        times = []
        for record_time, _ in self.records:
            due = seconds * (record_time - FIRST_TIME) / STEP / lines + delay
            times.append(math.ceil(due / burst) * burst if burst else due)
        return times


def make_fronts(text: list[str], copies: int) -> list[Front]:
    """The text ``copies`` times over, line by line dealt to the fronts, with record times.

    Each front ends with a line of no words and a time after every other line: once read, it
    tells the sink that nothing earlier comes from that front any more, so the job ends with
    everything released (a front's report is its next record time).
    """
    fronts = {name: Front(name) for name in sorted(FRONT_PACE)}
    lines = [line for _ in range(copies) for line in text if line.strip()]
    for n, line in enumerate(lines):
        record = json.dumps({"t": FIRST_TIME + STEP * n, "text": line})
        fronts[DEAL[n % len(DEAL)]].records.append((FIRST_TIME + STEP * n, record))
    end = FIRST_TIME + STEP * (len(lines) + 1)
    for front in fronts.values():
        front.records.append((end, json.dumps({"t": end, "text": ""})))
    return list(fronts.values())


def feed(folder: Path, fronts: list[Front], seconds: float, done: threading.Event) -> None:
    """Append every front's lines but the first (:func:`prepare` wrote it) at its own pace."""
    lines = sum(len(front.records) for front in fronts)
    plan = sorted(
        (at, front.name, line)
        for front in fronts
        for at, (_, line) in list(
            zip(front.append_times(seconds, lines), front.records, strict=True)
        )[1:]
    )
    handles = {front.name: (folder / front.name).open("a", encoding="utf-8") for front in fronts}
    started = time.monotonic()
    try:
        for at, name, line in plan:
            time.sleep(max(0.0, started + at - time.monotonic()))
            handles[name].write(line + "\n")
            handles[name].flush()
    finally:
        for out in handles.values():
            out.close()
        done.set()


def prepare(work: Path, fronts: list[Front]) -> Path:
    """A clean working directory with the fronts' files; returns the input folder.

    Each file has its first line before the query starts: the first batch sees all three
    fronts (a front first seen later would start at the others' clock, connectors.md,
    "Stamping"), and :func:`feed` starts once it ran, so that how long Spark takes to start
    changes nothing in the uneven rates the query sees.
    """
    for name in ("out", "checkpoint", "in"):
        shutil.rmtree(work / name, ignore_errors=True)
    source = work / "in"
    source.mkdir(parents=True)
    for front in fronts:
        (source / front.name).write_text(front.records[0][1] + "\n", encoding="utf-8")
    return source


def first_batch(query: Any, timeout: float = 300.0) -> None:
    """Wait until the query reported its first batch (or failed, or ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while query.lastProgress is None and query.exception() is None:
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)


def start_query(spark: Any, source: Path, work: Path, limit: int) -> Any:
    """The main job's query: word count from the files front into the files barrier sink."""
    from flamestream.spark import SparkGraph

    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(source))
        .option("clock", "record")
        .option("timestampField", "t")
        .option("maxRecordsPerTrigger", limit)
    )
    graph = SparkGraph(build_flow(), partitions=PARTITIONS)
    writer = graph.write_stream(reader, checkpoint_location=str(work / "checkpoint"))
    return (
        writer.option("sink", "files")
        .option("path", str(work / "out"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


# --- what each batch did ---------------------------------------------------------------------


def grouping_counters(checkpoint: Path, batch: int) -> dict[int, tuple[int, int]]:
    """Per key partition, the grouping's replays and invalidations so far, after ``batch``.

    Every key partition's snapshot keeps its grouping's counters (cumulative); a partition
    that got no rows in a batch keeps its snapshot from before. Only the newest two
    snapshots are kept: a partition whose snapshots up to ``batch`` are gone is left out.
    """
    from flamestream.runtime.grouping import GroupingState
    from flamestream.spark.durable.checkpoint import QueryCheckpoint
    from flamestream.spark.durable.state import StateStore

    store = StateStore(QueryCheckpoint(str(checkpoint)).graph_url, GROUPING)
    counters = {}
    for partition in range(PARTITIONS):
        data = store.load(partition, batch + 1)
        if data is not None:
            state = GroupingState(GROUPING, 2, key=len)
            state.restore(data)
            counters[partition] = (state.stats.replayed, state.stats.invalidated)
    return counters


def commit_marker(checkpoint: Path, batch: int) -> dict[str, Any]:
    """What the barrier sink's commit of ``batch`` recorded (released, pending, dropped)."""
    path = checkpoint / "flamestream-sink" / "commits" / f"{batch:012d}.json"
    try:
        marker: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:  # a batch without a commit yet
        return {}
    return marker


def released_rows(out: Path) -> list[dict[str, Any]]:
    """Every released row, batch file by batch file, line by line."""
    rows: list[dict[str, Any]] = []
    for part in sorted(out.glob("part-*.jsonl")):
        rows += [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines()]
    return rows


@dataclass
class Totals:
    """What the batches printed so far add up to."""

    batches: set[int] = field(default_factory=set)
    records: int = 0
    replayed: int = 0
    invalidated: int = 0
    dropped: int = 0
    released: int = 0


class BatchPrinter:
    """Prints a line per batch that read or released something, from the query's progress."""

    def __init__(self, query: Any, work: Path) -> None:
        self.query = query
        self.checkpoint = work / "checkpoint"
        self.totals = Totals()
        self._counters: dict[int, tuple[int, int]] = {}  # per key partition, cumulative

    def report(self) -> None:
        """Print the batches not printed yet."""
        for progress in self.query.recentProgress:
            batch = progress["batchId"]
            marker = commit_marker(self.checkpoint, batch)
            if batch in self.totals.batches or not marker:
                continue
            records = int(progress.observedMetrics["flamestream"]["records"])
            if not records and not marker["released"]:
                continue
            self.totals.batches.add(batch)
            print(self._line(batch, records, progress["numInputRows"], marker))

    def _summed(self) -> tuple[int, int]:
        """Replays and invalidations so far, over the key partitions."""
        counters = self._counters.values()
        return sum(r for r, _ in counters), sum(i for _, i in counters)

    def _line(self, batch: int, records: int, rows: int, marker: dict[str, Any]) -> str:
        """One batch's line; adds it to the totals."""
        replayed, invalidated = (-count for count in self._summed())
        self._counters.update(grouping_counters(self.checkpoint, batch))
        now = self._summed()
        replayed, invalidated = replayed + now[0], invalidated + now[1]
        totals = self.totals
        totals.records += records
        totals.replayed += replayed
        totals.invalidated += invalidated
        totals.dropped += marker["dropped"]
        totals.released += marker["released"]
        return (
            f"  batch {batch:>3}: read {records:>3} lines ({rows:>2} rows to Spark) | "
            f"grouping replayed {replayed:>4}, invalidated {invalidated:>4} | barrier dropped "
            f"{marker['dropped']:>4}, released {marker['released']:>4}, "
            f"holds {marker['pending']:>4}"
        )


def watch(query: Any, printer: BatchPrinter, fed: threading.Event, expected: int) -> None:
    """Report batches until all ``expected`` rows were released (or the query failed, or 300 s)."""
    started = time.monotonic()
    while time.monotonic() - started < 300 and query.exception() is None:
        printer.report()
        if fed.is_set() and printer.totals.released >= expected:
            return
        time.sleep(0.3)


# --- the check against the reference runtime ---------------------------------------------------


def stamped(records: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """A front's records with the ts ``clock=record`` gives them: monotonic record times."""
    previous = -1
    for record_time, line in records:
        previous = max(record_time, previous + 1)
        yield previous, line


def expected_rows(fronts: list[Front]) -> list[tuple[int, int, str, int, str]]:
    """The reference runtime's released rows, in order: ``(ts, front, trace hex, flags, value)``.

    Its input is every front's records with the global times the query gives them: front
    ids in sorted order of the file names (the files front numbers them so), ts from the
    record times. It admits them in global-time order, each run to quiescence.
    """
    from flamestream.spark.exec.general.items import encode_trace
    from flamestream.testing import run_in_order

    ids = {name: n for n, name in enumerate(sorted(front.name for front in fronts))}
    inputs = {ids[front.name]: list(stamped(front.records)) for front in fronts}
    result = run_in_order(build_flow(), inputs)
    return [
        (r.global_time.ts, r.global_time.front, encode_trace(r.trace).hex(), 0, str(r.payload))
        for r in result.released()
    ]


def as_released(row: dict[str, Any]) -> tuple[int, int, str, int, str]:
    """A released row of the files sink in :func:`expected_rows`' terms."""
    return (
        int(row["ts"]),
        int(row["front"]),
        str(row["trace"]),
        int(row["flags"]),
        str(row["value"]),
    )


def verify(out: Path, expected: list[tuple[int, int, str, int, str]], totals: Totals) -> bool:
    """Print the summary and the verdict: the released rows are the reference runtime's.

    Compared: every column of every row (global time, released trace, flags, value), as a
    multiset, and the release order: by global time, a global time's rows by their traces.
    The reference runtime reads the lines in global-time order and never replays; the query
    replays what late lines changed, and releases the same rows all the same (a released
    trace is a lineage, free of the logical times that count a grouping's replays).
    Exactly once: no two rows share a global time and a trace (a version released twice, or
    two versions of one output).
    """
    rows = [as_released(row) for row in released_rows(out)]
    same = sorted(rows) == sorted(expected)
    in_order = [row[:3] for row in rows] == sorted(row[:3] for row in rows)
    once = len({row[:3] for row in rows}) == len(rows)
    late = totals.replayed > 0 and totals.invalidated > 0
    print(
        f"done: {totals.records} lines read in {len(totals.batches)} batches; the grouping "
        f"replayed {totals.replayed} and invalidated {totals.invalidated}, the barrier "
        f"dropped {totals.dropped} invalidated versions and released {len(rows)} counts"
    )
    print(
        "verification: "
        + ("OK" if same and in_order and once and late else "FAILED")
        + f", released = reference runtime's {len(expected)} rows: {same}, each once: {once}, "
        f"in global-time order: {in_order}, late lines replayed: {late}"
    )
    return same and in_order and once and late


def session() -> Any:
    """A local Spark session for the job (no cluster, no broker)."""
    from pyspark.sql import SparkSession  # imported here: the rest of the package needs no Spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("flamestream-main-job")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=RECOMMENDED_CONF)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    """Run the job; return 0 when the released rows are the reference runtime's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=12.0, help="how long the feed runs")
    parser.add_argument("--limit", type=int, default=40, help="maxRecordsPerTrigger")
    parser.add_argument("--copies", type=int, default=3, help="times the text is fed")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    fronts = make_fronts(load_sample().splitlines(), args.copies)
    expected = expected_rows(fronts)
    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-job-"))
    source = prepare(work, fronts)
    spark = session()
    lines = sum(len(front.records) for front in fronts)
    print(f"flamestream main job: word count over {lines} lines on 3 fronts under {work}")
    fed = threading.Event()
    writer = threading.Thread(target=feed, args=(source, fronts, args.seconds, fed), daemon=True)
    query = start_query(spark, source, work, args.limit)
    printer = BatchPrinter(query, work)
    try:
        first_batch(query)
        writer.start()
        watch(query, printer, fed, len(expected))
    finally:
        query.stop()
        spark.stop()
    if query.exception() is not None:
        print(f"the query failed: {query.exception()}")
        return 1
    return 0 if verify(work / "out", expected, printer.totals) else 1


if __name__ == "__main__":
    raise SystemExit(main())
