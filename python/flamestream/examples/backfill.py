"""History, then live: the main job's word count over an archive first, then the live files.

The bundled text, line by line with record times as in the main job
(:mod:`flamestream.examples.stream_files`), is split at a cut time. An **archive** (two files
of the same JSON lines, as a log shipper would have rotated them to cold storage) holds every
line below the cut and a few past it; the **live** files (``east``, ``north``, ``south``)
hold a few lines below the cut and everything after it, appended by a writer thread at the
main job's uneven rates. The archive and the live files overlap on both sides of the cut.

One query reads both: the files front on the live folder with ``history=files`` on the
archive and ``history.boundary=time`` at the cut. It backfills the archive in batches of
``--backfill-limit`` lines (a progress bar from ``watch_backfill``), switches to the live
files without stopping, and goes on with the same grouping state: the counts keep counting.
Each line is admitted once: archive lines at or past the cut and live lines below it are
not read. At the end the job runs the reference runtime (``flamestream.testing.run_in_order``)
on the lines below the cut from the archive and the lines from the cut on from the live
files, with the same global times, and compares every released row::

    python -m flamestream.examples.backfill [--work DIR] [--seconds S] [--copies N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from flamestream.examples.stream_files import (
    DEAL,
    FIRST_TIME,
    FRONT_PACE,
    STEP,
    BatchPrinter,
    Front,
    build_flow,
    feed,
    session,
    verify,
    watch,
)
from flamestream.examples.wordcount import load_sample
from flamestream.python_env import worker_python

#: The archive's files: line n of the archive goes to ARCHIVE[n % 2].
ARCHIVE = ("archive-0.txt", "archive-1.txt")
#: The share of the text below the cut, and the lines each side holds past the cut.
CUT_SHARE, OVERLAP = 0.6, 12


def timed_lines(text: list[str], copies: int) -> list[tuple[int, str]]:
    """The text ``copies`` times over as ``(record time, JSON line)``, as the main job has it."""
    lines = [line for _ in range(copies) for line in text if line.strip()]
    return [
        (FIRST_TIME + STEP * n, json.dumps({"t": FIRST_TIME + STEP * n, "text": line}))
        for n, line in enumerate(lines)
    ]


def split(records: list[tuple[int, str]]) -> tuple[int, list[Front], list[Front]]:
    """The cut time, the archive's files and the live files (overlapping around the cut).

    Each live file ends with a line of no words after every other line, as in the main job:
    once read, nothing earlier can come from it, so everything is released in the end.
    """
    at = int(len(records) * CUT_SHARE)
    cut = records[at][0]
    archive = [Front(name) for name in ARCHIVE]
    for n, record in enumerate(records[: at + OVERLAP]):
        archive[n % len(ARCHIVE)].records.append(record)
    live = {name: Front(name) for name in sorted(FRONT_PACE)}
    for n, record in enumerate(records[at - OVERLAP :]):
        live[DEAL[n % len(DEAL)]].records.append(record)
    end = records[-1][0] + STEP
    for front in live.values():
        front.records.append((end, json.dumps({"t": end, "text": ""})))
    return cut, archive, list(live.values())


def prepare(work: Path, archive: list[Front], live: list[Front]) -> tuple[Path, Path]:
    """The archive written whole; each live file with its first line (the rest is fed)."""
    for name in ("out", "checkpoint", "archive", "live"):
        shutil.rmtree(work / name, ignore_errors=True)
    for folder, fronts, whole in ((work / "archive", archive, True), (work / "live", live, False)):
        folder.mkdir(parents=True)
        for front in fronts:
            lines = [line for _, line in (front.records if whole else front.records[:1])]
            (folder / front.name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return work / "archive", work / "live"


def start_query(spark: Any, archive: Path, live: Path, work: Path, cut: int, args: Any) -> Any:
    """The live files front with the archive as its history, cut by time, into the files sink."""
    from flamestream.spark import SparkGraph

    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(live))
        .option("clock", "record")
        .option("timestampField", "t")
        .option("maxRecordsPerTrigger", args.limit)
        .option("history", "files")
        .option("history.path", str(archive))
        .option("history.timestampField", "t")
        .option("history.boundary", "time")
        .option("history.cutTime", cut)
        .option("history.maxRecordsPerTrigger", args.backfill_limit)
    )
    graph = SparkGraph(build_flow(), partitions=2)
    writer = graph.write_stream(reader, checkpoint_location=str(work / "checkpoint"))
    return (
        writer.option("sink", "files")
        .option("path", str(work / "out"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def expected_rows(cut: int, archive: list[Front], live: list[Front]) -> list[Any]:
    """The reference runtime's released rows for the archive below the cut, then live.

    Front ids: the archive's files in name order, then the live files in name order (first
    seen at the switch). Record times are distinct, so each line's ts is its record time:
    live lines start above the archive's, which the switch's horizon keeps.
    """
    from flamestream.spark.exec.general.items import encode_trace
    from flamestream.testing import run_in_order

    inputs = {
        n: [(t, line) for t, line in front.records if t < cut]
        for n, front in enumerate(sorted(archive, key=lambda f: f.name))
    }
    for n, front in enumerate(sorted(live, key=lambda f: f.name), start=len(archive)):
        inputs[n] = [(t, line) for t, line in front.records if t >= cut]
    result = run_in_order(build_flow(), inputs)
    return [
        (r.global_time.ts, r.global_time.front, encode_trace(r.trace).hex(), 0, str(r.payload))
        for r in result.released()
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the job; return 0 when the released rows are the reference runtime's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long the live feed runs")
    parser.add_argument("--limit", type=int, default=40, help="live maxRecordsPerTrigger")
    parser.add_argument("--backfill-limit", type=int, default=250, help="lines per backfill batch")
    parser.add_argument("--copies", type=int, default=3, help="times the text is fed")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    cut, archive, live = split(timed_lines(load_sample().splitlines(), args.copies))
    expected = expected_rows(cut, archive, live)
    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-backfill-"))
    archive_dir, live_dir = prepare(work, archive, live)
    spark = session()
    held = sum(len(f.records) for f in archive)
    print(f"history then live: {held} archived lines, then 3 live files, cut at t={cut}")
    from flamestream.spark import watch_backfill

    fed = threading.Event()
    writer = threading.Thread(target=feed, args=(live_dir, live, args.seconds, fed), daemon=True)
    query = start_query(spark, archive_dir, live_dir, work, cut, args)
    printer = BatchPrinter(query, work)
    try:
        status = watch_backfill(query, every=0.2, out=sys.stdout)
        print(f"switched to live: {status.bar() if status else 'no backfill reported'}")
        writer.start()
        watch(query, printer, fed, len(expected))
        printer.report()
    finally:
        query.stop()
        spark.stop()
    if query.exception() is not None:
        print(f"the query failed: {query.exception()}")
        return 1
    return 0 if verify(work / "out", expected, printer.totals) else 1


if __name__ == "__main__":
    raise SystemExit(main())
