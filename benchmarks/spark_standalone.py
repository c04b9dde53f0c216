"""What losing a Worker costs: word count on a standalone cluster, unbroken vs one Worker killed.

A :class:`~flamestream.testing.standalone.StandaloneCluster` (a Master and two Workers of one
core each, one executor on each) runs the word count of ``tests/cluster/wordcount_job.py`` (three
files fronts, four records a batch, ``Trigger.AvailableNow``) as a child driver, alternately
unbroken and with the Worker of the task that splits the gate line (mid-run) SIGKILLed as soon as
that task reaches it (its executor exits, the task runs again on the other Worker, the rest of
the run has one executor). Reported per case: the run's wall time (child start to exit: driver
JVM, executor registration, every batch, stop) and the affected batch's duration (the batch
running at the kill; the same batch id in the unbroken runs), medians and every value. Run from
the project root (the child job is in ``tests/``); see docs/benchmarks.md::

    python -m benchmarks.spark_standalone [--repeat R] [--warmup W] [--lines N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.cluster.wordcount_job import GATE_LINE
from tests.crash import spawn

from benchmarks.lib import cli
from benchmarks.lib.record import Record, emit
from benchmarks.lib.stats import median
from flamestream.testing.standalone import StandaloneCluster

JOB = "tests.cluster.wordcount_job"


def make_input(folder: Path, lines: int) -> None:
    """Three fronts of ``lines`` lines each; the gate line halfway through the second."""
    folder.mkdir(parents=True)
    words = ["the cat", "a dog", "the bird and the cat", "dog dog", "end"]
    for front, name in enumerate(("a", "b", "c")):
        text = [words[(i + front) % len(words)] for i in range(lines)]
        if front == 1:
            text[lines // 2] = GATE_LINE
        (folder / f"{name}.txt").write_text("".join(f"{line}\n" for line in text))


def batches(progress: Path) -> list[tuple[int, float, float]]:
    """The run's batches: (id, start in epoch seconds, duration in seconds)."""
    found = []
    for p in json.loads(progress.read_text()):
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        found.append((int(p["batchId"]), start, p["durationMs"] / 1000))
    return found


def run(cluster: StandaloneCluster, work: Path, lines: int, kill: bool) -> dict[str, Any]:
    """One run of the job; with ``kill``, the gate's Worker is SIGKILLed when a task reaches it."""
    make_input(work / "in", lines)
    gate = work / "gate"  # the job stops at the gate line only where this folder exists
    if kill:
        gate.mkdir()
    args = [cluster.master_url, str(work)]
    began = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        child = pool.submit(spawn, JOB, args, {}, 900)
        killed = kill_at_gate(cluster, gate, child) if kill else None
        done = child.result()
        wall = time.perf_counter() - began
    if killed is not None:  # after the run: the Worker's restart is no part of its time
        cluster.restart_worker(killed[0])
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode()[-3000:])
    found = batches(work / "progress.json")
    if kill and "Lost executor" not in done.stderr.decode():
        msg = "the driver did not report the killed Worker's executor as lost"
        raise RuntimeError(msg)
    at = killed[1] if killed is not None else 0.0
    hit = next((b for b, start, took in found if start <= at <= start + took), None)
    return {"wall_s": round(wall, 2), "batches": found, "affected": hit}


def kill_at_gate(cluster: StandaloneCluster, gate: Path, child: Any) -> tuple[int, float]:
    """Wait for a task at the gate line and SIGKILL its Worker: (its index, the kill's time)."""
    while not (gate / "reached").exists():
        if child.done():
            msg = "the job ended before reaching the gate line"
            raise RuntimeError(msg)
        time.sleep(0.02)
    index = cluster.workers().index(os.getsid(int((gate / "reached").read_text())))
    cluster.kill_worker(index)
    return index, time.time()


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Warm-up runs, then unbroken and killed runs alternately."""
    runs: dict[str, list[dict[str, Any]]] = {"unbroken": [], "worker_killed": []}
    with StandaloneCluster(workers=2, worker_cores=1, worker_memory="1g") as cluster:
        for i in range(args.warmup):
            run(cluster, work / f"warmup{i}", args.lines, kill=False)
        for i in range(args.repeat):
            runs["unbroken"].append(run(cluster, work / f"unbroken{i}", args.lines, kill=False))
            runs["worker_killed"].append(run(cluster, work / f"killed{i}", args.lines, kill=True))
    return summarise(runs)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians of the wall times and of the affected batch's durations, and every value."""
    affected = [r["affected"] for r in runs["worker_killed"]]
    report: dict[str, Any] = {}
    for case, found in runs.items():
        walls = [r["wall_s"] for r in found]
        took = [
            next(d for b, _, d in r["batches"] if b == batch)
            for r, batch in zip(found, affected, strict=True)
            if batch is not None
        ]
        report[case] = {
            "wall_s_median": median(walls, 2),
            "wall_s": walls,
            "affected_batch_s_median": median(took, 2) if took else None,
            "affected_batch_s": [round(t, 2) for t in took],
            "batches": len(found[0]["batches"]),
        }
    report["affected_batch_ids"] = affected
    return report


def main() -> int:
    """Run the benchmark; print one JSON object."""
    parser = cli.parser(__doc__, timeout=900.0, repeat=3)
    cli.flag(parser, "--lines", 12, "lines per front (three fronts, four records a batch)")
    args = parser.parse_args()
    record = Record(library=True)
    work = Path(tempfile.mkdtemp(prefix="bench-standalone-")) if args.work is None else args.work
    report = {"benchmark": "spark_standalone", "lines_per_front": args.lines}
    report |= measure(args, work)
    report["machine"] = record.machine("4.3", master="spark:// (2 Workers x 1 core)")
    report["seconds"] = record.seconds()
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return emit(report)


if __name__ == "__main__":
    raise SystemExit(main())
