"""Soak: a grouping graph on appended files for long; do files, batches and memory stay flat.

A writer thread appends numbered lines at a steady rate, round-robin, to a few files (one
front each). The query: files front -> ``grouping("pairs", window=2)`` per key (a bounded
key space, ``--keys``; a key's lines all go to one file, so its pairs are known in advance)
-> render -> barrier sink (files, Parquet), ``--trigger`` seconds processing-time trigger.
Every ``--every`` seconds one JSON line: the lines written, the batches done, the file count
of every folder under the checkpoint (Spark's logs, the graph's state, the sink's store) and
of the output, the output's bytes, the batches' durations since the last sample (from the
query's progress), the resident memory of every process of the application by role
(:mod:`benchmarks.lib.processes`) and the load average. At the end a summary: per quantity
its slope per minute after ``--settle`` minutes (least squares), and the check that every
line written was released exactly once, as the second item of the pair its key's previous
line makes with it (or alone, its key's first), the held tail aside. Run by hand, not in CI::

    python -m benchmarks.soak [--minutes M] [--rate LINES_PER_S] [--files F] [--keys K]
        [--trigger S] [--every S] [--settle MIN] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.processes import roles
from benchmarks.lib.record import load_averages
from benchmarks.lib.stats import linear_fit

MB = 2**20

#: Line ``n`` is ``SEQ_DIGITS`` digits of ``n``, a space, then its key ``k`` + digits.
SEQ_DIGITS = 10


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The flags; the keys must be a multiple of the files (a key's lines in one file)."""
    made = cli.parser(__doc__, timeout=120.0, repeat=None)
    cli.flag(made, "--minutes", 15.0, "minutes of input")
    cli.flag(made, "--rate", 3000, "lines appended per second, all files together")
    cli.flag(made, "--files", 4, "files appended to (fronts)")
    cli.flag(made, "--keys", 1000, "distinct keys (a multiple of --files)")
    cli.flag(made, "--trigger", 1.0, "processing-time trigger interval, seconds")
    cli.flag(made, "--every", 30.0, "seconds between samples")
    cli.flag(made, "--settle", 3.0, "minutes left out of the slopes (warm-up, state filling)")
    args = made.parse_args(argv)
    if args.keys % args.files:
        made.error(f"--keys must be a multiple of --files ({args.files}); got {args.keys}")
    return args


def text(seq: int, keys: int) -> str:
    """Line ``seq``: its number and its key (``seq % keys``)."""
    return f"{seq:0{SEQ_DIGITS}d} k{seq % keys}"


def line_key(line: str) -> str:
    """The grouping's key: the line's key field."""
    return line[SEQ_DIGITS + 1 :]


def render_pair(lines: tuple[str, ...]) -> str:
    """The released value: the numbers of the tuple's lines, space-separated."""
    return " ".join(str(int(line[:SEQ_DIGITS])) for line in lines)


class Writer(threading.Thread):
    """Appends ``rate`` lines a second round-robin to ``files`` files until stopped."""

    def __init__(self, folder: Path, args: argparse.Namespace) -> None:
        super().__init__(daemon=True)
        self.paths = [folder / f"front-{f}.txt" for f in range(args.files)]
        for path in self.paths:
            path.touch()
        self.rate, self.keys = args.rate, args.keys
        self.written = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        """Every 0.1 s, append the lines due by then (a steady rate, whatever a write took)."""
        handles = [path.open("a", encoding="utf-8") for path in self.paths]
        began = time.monotonic()
        try:
            while not self.stopped.wait(0.1):
                due = int((time.monotonic() - began) * self.rate)
                chunks: list[list[str]] = [[] for _ in handles]
                for seq in range(self.written, due):
                    chunks[seq % len(handles)].append(text(seq, self.keys) + "\n")
                for out, chunk in zip(handles, chunks, strict=True):
                    out.write("".join(chunk))
                    out.flush()
                self.written = max(self.written, due)
        finally:
            for out in handles:
                out.close()


def start_query(spark: Any, source: Path, out: Path, ck: Path, trigger: float) -> Any:
    """Files front -> pairs per key -> render -> files sink (Parquet, release=tasks)."""
    from flamestream import Dataflow
    from flamestream.spark import SparkGraph

    flow = Dataflow("soak")
    pairs = flow.grouping("pairs", flow.source("lines"), window=2, key=line_key)
    flow.sink("out", flow.map("render", pairs, render_pair))
    lines = spark.readStream.format("flamestream").option("front", "files")
    lines = lines.option("path", str(source))
    writer = SparkGraph(flow).write_stream(lines, checkpoint_location=str(ck))
    writer = writer.option("sink", "files").option("format", "parquet").option("path", str(out))
    return writer.trigger(processingTime=f"{int(trigger * 1000)} milliseconds").start()


def file_counts(root: Path, depth: int = 3) -> dict[str, int]:
    """Files under ``root`` per folder, folders deeper than ``depth`` counted in their parent."""
    counts: Counter[str] = Counter()
    for path in root.rglob("*"):
        if path.is_file():
            parts = path.relative_to(root).parts[:-1][:depth]
            counts["/".join(parts) or "."] += 1
    return dict(sorted(counts.items()))


def folder_bytes(root: Path) -> int:
    """Bytes of the files under ``root``."""
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


class Progress:
    """The query's batches, collected from ``recentProgress`` (Spark keeps the last 100)."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.batches: dict[int, dict[str, Any]] = {}
        self.taken = 0

    def poll(self) -> None:
        """Keep the batches not seen yet: id, rows, trigger and addBatch milliseconds."""
        for progress in self.query.recentProgress:
            batch = int(progress["batchId"])
            if batch not in self.batches:
                durations = progress.get("durationMs", {})
                self.batches[batch] = {
                    "rows": progress.get("numInputRows", 0),
                    "trigger_ms": durations.get("triggerExecution", 0),
                    "add_batch_ms": durations.get("addBatch", 0),
                }

    def since_last(self) -> dict[str, Any]:
        """The batches seen since the last call: count, and their durations' median and max."""
        ids = sorted(b for b in self.batches if b >= self.taken)
        self.taken = max(ids, default=self.taken - 1) + 1
        took = [self.batches[b]["trigger_ms"] for b in ids]
        return {
            "batches": len(ids),
            "rows": sum(self.batches[b]["rows"] for b in ids),
            "trigger_ms_median": statistics.median(took) if took else None,
            "trigger_ms_max": max(took, default=None),
        }


def sample(began: float, writer: Writer, progress: Progress, work: Path) -> dict[str, Any]:
    """One sample of everything the soak watches."""
    memory = roles()
    return {
        "minute": round((time.monotonic() - began) / 60, 2),
        "written": writer.written,
        "batches_total": len(progress.batches),
        **progress.since_last(),
        "rss_mb": {role: round(rss / MB, 1) for role, (_, rss) in memory.items()},
        "processes": {role: count for role, (count, _) in memory.items()},
        "checkpoint_files": file_counts(work / "ck"),
        "output_files": sum(file_counts(work / "out").values()),
        "output_mb": round(folder_bytes(work / "out") / MB, 1),
        "load_average": load_averages(),
    }


def released(out: Path) -> list[str]:
    """Every released value, from the visible Parquet parts."""
    import pyarrow.parquet as pq

    values: list[str] = []
    for part in sorted(out.glob("part-*.parquet")):
        values += pq.read_table(part, columns=["value"]).column("value").to_pylist()
    return values


def check(values: list[str], written: int, keys: int, rate: int) -> dict[str, Any]:
    """Whether every line was released once, in the right pair; what is still held.

    Line ``n``'s pair is ``(n - keys, n)`` (its key's previous line, the same file) or, for
    a key's first line, ``(n,)``. Lines not released must be the held tail: the last ones.
    """
    lasts: Counter[int] = Counter()
    wrong = 0
    for value in values:
        seqs = [int(part) for part in value.split()]
        lasts[seqs[-1]] += 1
        expected = [seqs[-1] - keys, seqs[-1]] if seqs[-1] >= keys else [seqs[-1]]
        wrong += seqs != expected
    twice = sum(1 for times in lasts.values() if times > 1)
    unknown = sum(1 for seq in lasts if not 0 <= seq < written)
    held = [seq for seq in range(written) if seq not in lasts]
    tail_seconds = (written - min(held)) / rate if held else 0.0
    return {
        "written": written,
        "released": len(values),
        "released_twice": twice,
        "released_unwritten": unknown,
        "wrong_pair": wrong,
        "held": len(held),
        "held_tail_seconds": round(tail_seconds, 2),
        "exactly_once": not (twice or unknown or wrong),
    }


def slopes(samples: list[dict[str, Any]], settle: float) -> dict[str, Any]:
    """Per quantity, its least-squares slope per minute over the samples after ``settle``."""
    kept = [s for s in samples if s["minute"] >= settle]
    if len(kept) < 3:
        return {"error": f"{len(kept)} samples after {settle} minutes: too few for a slope"}
    series: dict[str, list[tuple[float, float]]] = {}

    def add(name: str, minute: float, value: float | None) -> None:
        if value is not None:
            series.setdefault(name, []).append((minute, value))

    for s in kept:
        for role, mb in s["rss_mb"].items():
            add(f"rss_mb.{role}", s["minute"], mb)
        add("rss_mb.python_total", s["minute"], python_total(s["rss_mb"]))
        for folder, count in s["checkpoint_files"].items():
            add(f"checkpoint_files.{folder}", s["minute"], count)
        add("output_files", s["minute"], s["output_files"])
        add("output_mb", s["minute"], s["output_mb"])
        add("trigger_ms_median", s["minute"], s["trigger_ms_median"])
    found = {}
    for name, points in sorted(series.items()):
        if len(points) >= 3:
            slope, _ = linear_fit([m for m, _ in points], [v for _, v in points])
            found[name] = {"first": points[0][1], "last": points[-1][1], "per_minute": slope}
            found[name]["per_minute"] = round(slope, 2)
    return {"from_minute": kept[0]["minute"], "to_minute": kept[-1]["minute"], "slopes": found}


def python_total(rss_mb: dict[str, float]) -> float:
    """Every Python process's resident MB together (all roles but the driver JVM)."""
    return round(sum(mb for role, mb in rss_mb.items() if role != "driver_jvm"), 1)


def soak(spark: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Run the writer and the query for ``--minutes``, sampling; stop both; check the output."""
    for name in ("in", "out", "ck"):
        cli.Workdir.drop(work / name)
    (work / "in").mkdir(parents=True)
    writer = Writer(work / "in", args)
    writer.start()
    query = start_query(spark, work / "in", work / "out", work / "ck", args.trigger)
    progress, samples = Progress(query), []
    began = next_sample = time.monotonic()
    try:
        while time.monotonic() - began < args.minutes * 60 and query.exception() is None:
            progress.poll()
            if time.monotonic() >= next_sample:
                next_sample += args.every
                samples.append(sample(began, writer, progress, work))
                print(json.dumps(samples[-1]), flush=True)
            time.sleep(1.0)
        writer.stopped.set()
        writer.join()
        drain(query, progress, args.timeout)
    finally:
        writer.stopped.set()
        query.stop()
    if query.exception() is not None:
        return {"error": f"the query failed: {query.exception()}", "samples": len(samples)}
    summary = slopes(samples, args.settle)
    summary["check"] = check(released(work / "out"), writer.written, args.keys, args.rate)
    summary["batches"] = batch_summary(progress)
    return summary


def drain(query: Any, progress: Progress, timeout: float) -> None:
    """After the writer stopped: wait for batches until one reads nothing (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    seen = len(progress.batches)
    while time.monotonic() < deadline and query.exception() is None:
        time.sleep(1.0)
        progress.poll()
        quiet = [b for b in list(progress.batches)[seen:] if not progress.batches[b]["rows"]]
        if quiet:
            return


def batch_summary(progress: Progress) -> dict[str, Any]:
    """All batches: how many, the durations' median and 99th percentile, the rows per batch."""
    took = sorted(b["trigger_ms"] for b in progress.batches.values())
    rows = [b["rows"] for b in progress.batches.values()]
    return {
        "count": len(took),
        "trigger_ms_median": statistics.median(took) if took else None,
        "trigger_ms_p99": took[int(0.99 * (len(took) - 1))] if took else None,
        "input_rows_median": statistics.median(rows) if rows else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the soak; print the samples as JSON lines, then the summary; 1 on a failed check."""
    from benchmarks.lib.pipeline import setup

    args = arguments(argv)
    workdir, record, spark, _ = setup("soak", args.work)
    print(json.dumps({"soak": vars(args) | {"work": str(workdir.path)}}, default=str))
    try:
        summary = soak(spark, args, workdir.path)
    finally:
        spark.stop()
    summary["machine"] = record.machine("local[2]", shuffle_partitions=2)
    print(json.dumps({"summary": summary}, indent=2))
    failed = "error" in summary or not summary["check"]["exactly_once"]
    if not failed:
        workdir.close()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
