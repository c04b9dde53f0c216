"""History then live: backfill speed against streaming the history and against a batch job.

Two workloads, each over a history of ``--records`` records kept in a Delta table (as an
archiver keeps a source's past) and a live source of files that overlaps it and goes on for
``--live`` records more:

* ``count``: the declared word count (``flamestream.count``, ``release="latest"``) of text
  lines; the history's rows hold each line's live determinant (``file``, ``offset``), the
  boundary is ``position``; ``clock=logical``.
* ``gaps``: per key, the time since its previous event (every step a user's lambda, the
  per-key sessions-style workload of bench-compare); the history holds ``value`` (the JSON
  event) and ``time``; the boundary is ``time`` (a cut at the first live event's time);
  ``clock=record``.

Variants, each in the same session, fresh checkpoint and output each run, Trigger.AvailableNow:

* ``history-then-live``: the live files front with ``history=delta``: backfill batches of
  ``--backfill-limit`` records, then the live files ``--live-limit`` records a batch;
* ``stream-limited``: the history alone as a stream (``readStream``, the delta front) through
  the same graph, ``--live-limit`` records a batch: streaming the archive through micro-batches;
* ``bounded``: the history alone as a bounded ``spark.read`` (the delta front) through the
  same graph, written as Parquet: the batch job a backfill replaces.

Throughput is records admitted over wall time (history-then-live admits the live records too).
The switch batch's duration is compared with the median of the live batches after it. The
peak resident memory of any Python worker during a run is sampled from /proc every 0.2 s.
Runs are interleaved (A B C A B C ...) after ``--warmup`` untimed rounds; JSON with every run,
the load averages, medians and the ratios. Run it alone: other work skews every figure::

    python -m benchmarks.backfill [--records N] [--live M] [--workloads count gaps]
        [--repeat R] [--warmup W] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import Record, emit
from benchmarks.lib.stats import median
from benchmarks.lib.workloads import LINE_BYTES, gaps_graph, line, word_count_graph

VARIANTS = ["history-then-live", "stream-limited", "bounded"]
WORKLOADS = ["count", "gaps"]
#: Targets: history-then-live over stream-limited throughput; bounded over history-then-live
#: time per record; the switch batch over a steady live batch.
TARGETS = {"vs_stream_limited": 3.0, "vs_bounded": 1.3, "switch_vs_steady": 2.0}
LIVE_FILES = 2
KEYS = 100_000


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The sizes, limits, rounds and variants."""
    parser = cli.parser(__doc__, timeout=1800.0, repeat=2)
    cli.flag(parser, "--records", 2_000_000, "history records")
    cli.flag(parser, "--live", 250_000, "live records after the history")
    cli.flag(parser, "--live-limit", 50_000, "the live front's maxRecordsPerTrigger")
    cli.flag(parser, "--backfill-limit", 1_000_000, "history.maxRecordsPerTrigger")
    cli.flag(parser, "--warmup-records", 100_000, "history records of the untimed rounds")
    cli.flag(parser, "--workloads", WORKLOADS, nargs="+", choices=WORKLOADS)
    cli.flag(parser, "--variants", VARIANTS, nargs="+", choices=VARIANTS)
    return cli.parse(parser, argv)


# -- input ------------------------------------------------------------------------------------


def event(i: int) -> str:
    """Event ``i``: a key of :data:`KEYS`, time ``i`` (a pure function of ``i``)."""
    return json.dumps({"key": f"k{(i * 7919) % KEYS:05d}", "time": i}, separators=(",", ":"))


def write_table(table: Path, columns: dict[str, Any]) -> None:
    """A Delta table of ``columns``, row groups of 128k rows (what a streaming read slices)."""
    import pyarrow as pa
    from deltalake import WriterProperties, write_deltalake

    props = WriterProperties(max_row_group_size=128 * 1024)
    write_deltalake(str(table), pa.table(columns), mode="overwrite", writer_properties=props)


def live_files(folder: Path, first: int, stop: int, text: Any) -> list[tuple[str, int]]:
    """Records [first, stop) over :data:`LIVE_FILES` files; per record its (file, offset)."""
    folder.mkdir(parents=True, exist_ok=True)
    where: list[tuple[str, int]] = []
    for f in range(LIVE_FILES):
        lo = first + (stop - first) * f // LIVE_FILES
        hi = first + (stop - first) * (f + 1) // LIVE_FILES
        name, offset = f"live-{f}.txt", 0
        with (folder / name).open("w") as out:
            for i in range(lo, hi):
                value = text(i)
                out.write(value + "\n")
                where.append((name, offset))
                offset += len(value.encode()) + 1
    return where


def prepare(work: Path, workload: str, records: int, live: int) -> dict[str, Path]:
    """The workload's history table and live folder under ``work`` (reused when present)."""
    root = work / f"{workload}-{records}-{live}"
    paths = {"history": root / "history", "live": root / "live"}
    if (root / "ready").exists():
        return paths
    shutil.rmtree(root, ignore_errors=True)
    if workload == "count":  # the live files hold every line; the history the first records
        where = live_files(paths["live"], 0, records + live, line)
        write_table(
            paths["history"],
            {
                "file": [w[0] for w in where[:records]],
                "offset": [w[1] for w in where[:records]],
                "value": [line(i) for i in range(records)],
            },
        )
    else:  # the live files overlap the history by a tenth of the live records
        live_files(paths["live"], records - live // 10, records + live, event)
        write_table(
            paths["history"],
            {"value": [event(i) for i in range(records)], "time": list(range(records))},
        )
    (root / "ready").touch()
    assert LINE_BYTES > 0  # noqa: S101 - lines have a fixed width (offsets in the docs)
    return paths


# -- the variants ------------------------------------------------------------------------------


def graph(workload: str) -> Any:
    """The workload's graph, as a SparkGraph."""
    from flamestream.spark import SparkGraph

    if workload == "count":
        return SparkGraph(word_count_graph(declared=True), release="latest")
    return SparkGraph(gaps_graph())


def delta_front(reader: Any, workload: str, history: Path) -> Any:
    """The delta front's options for the workload's table."""
    reader = reader.format("flamestream").option("front", "delta").option("path", str(history))
    if workload == "count":
        return reader.option("clock", "logical")
    return reader.option("clock", "record").option("timestampColumn", "time")


def hybrid_front(spark: Any, workload: str, paths: dict[str, Path], args: Any) -> Any:
    """The live files front with the history."""
    reader = spark.readStream.format("flamestream").option("front", "files")
    reader = reader.option("path", str(paths["live"]))
    reader = reader.option("maxRecordsPerTrigger", args.live_limit)
    reader = reader.option("history", "delta").option("history.path", str(paths["history"]))
    reader = reader.option("history.maxRecordsPerTrigger", args.backfill_limit)
    if workload == "count":
        reader = reader.option("clock", "logical").option("history.boundary", "position")
        return reader.option("history.sourceColumn", "file").option(
            "history.positionColumn", "offset"
        )
    reader = reader.option("clock", "record").option("timestampField", "time")
    reader = reader.option("history.timestampColumn", "time")
    return reader.option("history.boundary", "time").option("history.cutTime", args.records)


def run_variant(
    spark: Any, variant: str, workload: str, paths: dict[str, Path], args: Any, work: Path
) -> dict[str, Any]:
    """One timed run: seconds, records, batches, the switch, peak worker memory."""
    out, ck = work / "out", work / "ck"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ck, ignore_errors=True)
    sampler = WorkerMemory()
    sampler.start()
    began = time.perf_counter()
    try:
        if variant == "bounded":
            # the reader, not loaded: the graph's first stage runs in the front's reads, as
            # in the streaming variants
            reader = delta_front(spark.read, workload, paths["history"])
            graph(workload).apply(reader).write.parquet(str(out))
            progress: list[dict[str, Any]] = []
        else:
            if variant == "stream-limited":
                reader = delta_front(spark.readStream, workload, paths["history"])
                reader = reader.option("maxRecordsPerTrigger", args.live_limit)
            else:
                reader = hybrid_front(spark, workload, paths, args)
            writer = graph(workload).write_stream(reader, checkpoint_location=str(ck))
            writer = writer.option("sink", "files").option("path", str(out))
            query = writer.option("format", "parquet").trigger(availableNow=True).start()
            query.awaitTermination(args.timeout)
            if query.exception():
                raise query.exception()
            progress = list(query.recentProgress)
    finally:
        seconds = time.perf_counter() - began
        sampler.stop()
    records = args.records + (args.live if variant == "history-then-live" else 0)
    found = {
        "variant": variant,
        "workload": workload,
        "seconds": round(seconds, 2),
        "records": records,
        "records_per_second": round(records / seconds),
        "batches": len([p for p in progress if p["numInputRows"]]),
        "peak_worker_rss_mb": sampler.peak_mb,
    }
    if variant == "history-then-live":
        found |= switch_figures(progress)
    return found


def measured(
    spark: Any, variant: str, workload: str, paths: dict[str, Path], args: Any, work: Path
) -> dict[str, Any]:
    """:func:`run_variant`, or what failed (a bounded read of everything at once may not fit)."""
    began = time.perf_counter()
    try:
        return run_variant(spark, variant, workload, paths, args, work)
    except Exception as exc:
        return {
            "variant": variant,
            "workload": workload,
            "failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
            "seconds": round(time.perf_counter() - began, 2),
        }


def switch_figures(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """The switch batch's duration against the live batches after it (from the progress)."""
    phases = []
    for p in progress:
        end = p["sources"][0]["endOffset"] if p["sources"] else None
        offset = json.loads(end) if isinstance(end, str) else end
        record = (offset or {}).get("history") or {}
        phases.append((p["batchId"], record.get("phase"), p["durationMs"]["triggerExecution"]))
    live = [(b, ms) for b, phase, ms in phases if phase == "live"]
    backfill = [ms for _, phase, ms in phases if phase == "backfill"]
    if not live:
        return {"switch_batch": None}
    switch_ms, steady = live[0][1], [ms for _, ms in live[1:]]
    return {
        "switch_batch": live[0][0],
        "backfill_batches_ms": backfill,
        "switch_ms": switch_ms,
        "steady_live_ms": median(steady) if steady else None,
        "switch_vs_steady": round(switch_ms / median(steady), 2) if steady else None,
    }


class WorkerMemory:
    """The largest resident set of any Spark Python process (not this one) while it runs."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Sample from now on."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (``peak_mb`` is final then)."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.2):
            for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != me):
                self.peak_mb = max(self.peak_mb, _python_rss_mb(pid))


def _python_rss_mb(pid: str) -> float:
    """A Spark Python process's resident memory in MB (0: not one, or gone)."""
    try:
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        if b"python" not in program:  # the JVM's class path names python folders too
            return 0.0
        for text in Path(f"/proc/{pid}/status").read_text().splitlines():
            if text.startswith("VmRSS:"):
                return round(int(text.split()[1]) / 1024, 1)
    except OSError:
        return 0.0
    return 0.0


# -- the report ---------------------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]], workloads: list[str]) -> dict[str, Any]:
    """Medians per workload and variant, and the ratios against the targets."""
    out: dict[str, Any] = {}
    for workload in workloads:
        mine = [r for r in runs if r["workload"] == workload and "failed" not in r]
        rate = {
            v: median(r["records_per_second"] for r in mine if r["variant"] == v)
            for v in {r["variant"] for r in mine}
        }
        figures: dict[str, Any] = {"records_per_second": rate}
        hybrid = rate.get("history-then-live")
        if hybrid and rate.get("stream-limited"):
            figures["vs_stream_limited"] = round(hybrid / rate["stream-limited"], 2)
        if hybrid and rate.get("bounded"):
            figures["vs_bounded"] = round(rate["bounded"] / hybrid, 2)
        switches = [r["switch_vs_steady"] for r in mine if r.get("switch_vs_steady")]
        if switches:
            figures["switch_vs_steady"] = median(switches)
        figures["peak_worker_rss_mb"] = max((r["peak_worker_rss_mb"] for r in mine), default=None)
        figures["failed"] = [
            r["variant"] for r in runs if r["workload"] == workload and "failed" in r
        ]
        figures["met"] = {
            name: (figures[name] >= goal if name == "vs_stream_limited" else figures[name] <= goal)
            for name, goal in TARGETS.items()
            if name in figures
        }
        out[workload] = figures
    return out


def main(argv: list[str] | None = None) -> None:
    """Prepare the inputs, run the variants interleaved, print the JSON report."""
    args = arguments(argv)
    record = Record(library=True)
    work = cli.Workdir(args.work, "flamestream-backfill-")
    from benchmarks.lib.session import local_spark

    spark = local_spark("backfill")
    runs: list[dict[str, Any]] = []
    try:
        small = argparse.Namespace(**{**vars(args), "records": args.warmup_records})
        small.live = min(args.live, args.warmup_records // 4)
        for round_ in range(args.warmup + args.repeat):
            sizes = small if round_ < args.warmup else args  # warm up on a small input
            for workload in args.workloads:
                paths = prepare(work.path, workload, sizes.records, sizes.live)
                for variant in args.variants:
                    load = [round(x, 2) for x in os.getloadavg()]
                    run = measured(spark, variant, workload, paths, sizes, work.path)
                    if round_ >= args.warmup:
                        runs.append(run | {"round": round_, "load_before": load})
                        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    finally:
        spark.stop()
        work.close()
    emit(
        {
            "benchmark": "backfill",
            "machine": record.machine(spark="local[2]"),
            "input": {
                "records": args.records,
                "live": args.live,
                "live_limit": args.live_limit,
                "backfill_limit": args.backfill_limit,
            },
            "runs": runs,
            "summary": summarize(runs, args.workloads),
            "targets": TARGETS,
        }
    )


if __name__ == "__main__":
    main()
