"""The main job: a real streaming query from a files front through a flamestream sink.

A writer thread appends the bundled text, line by line, to three files over a few seconds
(records arriving over time, on three fronts). A Structured Streaming query reads them with
``format("flamestream")`` (front ``files``, a read limit per trigger) and writes through the
barrier sink to JSON-lines files named by batch id. The job prints one line per batch and a
summary, and checks that every line written was released exactly once, in global-time order::

    python -m flamestream.examples.stream_files [--work DIR] [--seconds S] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from flamestream.examples.wordcount import load_sample
from flamestream.launcher import RECOMMENDED_CONF, worker_python

FRONT_FILES = ("north.txt", "east.txt", "south.txt")


def feed(folder: Path, lines: list[str], seconds: float, done: threading.Event) -> None:
    """Append ``lines`` round-robin to the three files, spread over ``seconds``."""
    pause = seconds / max(1, len(lines))
    handles = [(folder / name).open("a", encoding="utf-8") for name in FRONT_FILES]
    try:
        for index, line in enumerate(lines):
            out = handles[index % len(handles)]
            out.write(line + "\n")
            out.flush()
            time.sleep(pause)
    finally:
        for out in handles:
            out.close()
        done.set()


def backlog_bytes(progress: dict[str, Any]) -> int:
    """Bytes available to the front but not yet read: latest minus end offsets."""
    source = progress["sources"][0]
    if not source.get("latestOffset") or not source.get("endOffset"):
        return 0
    available = json.loads(source["latestOffset"])["available"]
    from flamestream.spark.connector.offsets import FrontOffset

    end = FrontOffset.from_json(json.loads(source["endOffset"]))
    read = {front.key: front.position for front in end.fronts}
    return sum(max(0, end - read.get(key, 0)) for key, end in available.items())


def released_rows(out: Path) -> list[dict[str, object]]:
    """Every released row, batch file by batch file."""
    rows: list[dict[str, object]] = []
    for part in sorted(out.glob("part-*.jsonl")):
        rows += [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines()]
    return rows


def prepare(work: Path) -> Path:
    """A clean working directory with three empty front files; returns the input folder."""
    for name in ("out", "checkpoint", "in"):
        shutil.rmtree(work / name, ignore_errors=True)
    source = work / "in"
    source.mkdir(parents=True)
    for name in FRONT_FILES:
        (source / name).touch()
    return source


def start_query(spark: Any, source: Path, work: Path, limit: int) -> Any:
    """The main job's query: the files front into the files barrier sink."""
    df = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(source))
        .option("maxRecordsPerTrigger", limit)
        .load()
    )
    return (
        df.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


class ProgressPrinter:
    """Prints a line per batch that read records, from the query's recent progress."""

    def __init__(self, query: Any, out: Path) -> None:
        self.query = query
        self.out = out
        self.batches: set[int] = set()
        self.read = 0

    def report(self) -> None:
        """Print the batches not printed yet."""
        for progress in self.query.recentProgress:
            batch = progress["batchId"]
            if batch in self.batches or not progress["numInputRows"]:
                continue
            self.batches.add(batch)
            self.read += progress["numInputRows"]
            print(
                f"  batch {batch:>3}: read {progress['numInputRows']:>3} records, "
                f"backlog {backlog_bytes(progress):>5} bytes, "
                f"released so far {len(released_rows(self.out)):>4}"
            )


def watch(query: Any, printer: ProgressPrinter, fed: threading.Event, lines: int) -> None:
    """Report progress until every line was released (or the query failed, or 300 s)."""
    started = time.monotonic()
    while True:
        printer.report()
        if fed.is_set() and len(released_rows(printer.out)) >= lines:
            break
        if query.exception() is not None or time.monotonic() - started > 300:
            break
        time.sleep(0.5)
    deadline = time.monotonic() + 10  # the last batch's progress comes after its release
    while printer.read < lines and time.monotonic() < deadline:
        printer.report()
        time.sleep(0.2)


def verify(out: Path, lines: list[str], batches: int, elapsed: float) -> bool:
    """Print the summary; whether every line was released exactly once, in global-time order."""
    rows = released_rows(out)
    values = [str(row["value"]) for row in rows]
    times = [(int(str(row["ts"])), int(str(row["front"]))) for row in rows]
    per_front = {name: sum(str(r["source"]).endswith(name) for r in rows) for name in FRONT_FILES}
    print(
        f"done: {len(rows)} records released in {batches} batches, "
        f"{elapsed:.1f} s; per front {per_front}"
    )
    exactly_once = sorted(values) == sorted(lines)
    in_order = times == sorted(times) and len(set(times)) == len(times)
    print(
        "verification: "
        + ("OK" if exactly_once and in_order else "FAILED")
        + f", every line released exactly once: {exactly_once}, in global-time order: {in_order}"
    )
    return exactly_once and in_order


def main(argv: list[str] | None = None) -> int:
    """Run the job; return 0 when the release was exactly once and in order."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long the feed runs")
    parser.add_argument("--limit", type=int, default=10, help="maxRecordsPerTrigger")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    from pyspark.sql import SparkSession  # imported here: the rest of the package needs no Spark

    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-job-"))
    source = prepare(work)
    lines = [line for line in load_sample().splitlines() if line.strip()]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("flamestream-main-job")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=RECOMMENDED_CONF)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"flamestream main job: {len(lines)} lines onto 3 fronts under {work}")
    fed = threading.Event()
    writer = threading.Thread(target=feed, args=(source, lines, args.seconds, fed), daemon=True)
    writer.start()
    query = start_query(spark, source, work, args.limit)
    started = time.monotonic()
    printer = ProgressPrinter(query, work / "out")
    try:
        watch(query, printer, fed, len(lines))
    finally:
        query.stop()
        spark.stop()
    if query.exception() is not None:
        print(f"the query failed: {query.exception()}")
        return 1
    ok = verify(work / "out", lines, len(printer.batches), time.monotonic() - started)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
