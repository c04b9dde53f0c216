"""Python worker memory of word count, one batch: the peak resident set of Spark's Python workers.

Each run is its own process with a fresh ``local[2]`` session (reused Python workers keep the
memory they once reached), running ``benchmarks.compare``'s flamestream word count (files
front -> ``write_stream`` -> files sink) over a generated corpus in one
``Trigger.AvailableNow`` batch. Meanwhile the resident set of every Python worker process
(the JVM and the driver excluded) is sampled every 0.1 s: the peak of one worker and of all
of them together. Releases run interleaved (latest every latest every ...); medians reported.
Plain PySpark's word count runs no Python worker at all (its foreachBatch runs in the driver).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import emit, load_averages, machine
from benchmarks.lib.stats import median

RELEASES = ["latest", "every"]
GIB = 2**30

#: Where generated corpora are kept (shared with ``make bench-compare``).
CORPUS_DIR = Path(__file__).resolve().parent.parent / ".bench"


#: What a warm server and the processes it forks show as their command line
#: (``flamestream.warm_start``: Spark's daemons and their workers are forked from it).
WARM_SERVER = b"flamestream.warm_start"


def _processes() -> dict[int, tuple[int, list[bytes], int]]:
    """Every process: pid -> (parent pid, command line, resident bytes)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            fields = dict(line.split(":", 1) for line in status if ":" in line)
            rss = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
            found[int(pid)] = (int(fields["PPid"]), command, rss)
        except (OSError, ValueError, KeyError):  # the process ended meanwhile
            continue
    return found


def python_workers() -> tuple[dict[int, int], int]:
    """Resident bytes of each Spark Python worker, and of the warm servers together.

    Workers: ``pyspark.daemon`` and its forks, started cold or, with warm starts, forked from
    the JVM's warm server (whose command line they show); the processes Spark started for
    them (the launchers, ``flamestream-python -m pyspark.daemon``) count too. The servers
    (a warm process whose parent is not one) are reported apart.
    """
    processes = _processes()
    warm = {pid for pid, (_, command, _) in processes.items() if WARM_SERVER in command}
    workers, servers = {}, 0
    for pid, (parent, command, rss) in processes.items():
        if pid == os.getpid():
            continue
        if pid in warm and parent not in warm:
            servers += rss
        elif pid in warm or b"pyspark.daemon" in command:
            workers[pid] = rss
    return workers, servers


class Peaks:
    """Samples the workers' memory in a thread until stopped; keeps the peaks."""

    def __init__(self) -> None:
        self.one = self.all = self.servers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            workers, servers = python_workers()
            sizes = list(workers.values())
            if sizes:
                self.one, self.all = max(self.one, max(sizes)), max(self.all, sum(sizes))
            self.servers = max(self.servers, servers)
            self._stop.wait(0.1)


def child(release: str, source: Path, work: Path, timeout: float) -> dict[str, Any]:
    """One run in this process: the query over ``source`` with the workers sampled."""
    from benchmarks.compare.spark_variants import Release, flamestream_writer

    if release not in ("latest", "every"):
        return {"error": f"release {release!r}: latest or every"}
    chosen: Release = "latest" if release == "latest" else "every"
    from benchmarks.lib.session import spark_session

    with spark_session("flamestream-memory") as spark, Peaks() as peaks:
        start = time.perf_counter()
        query = flamestream_writer(spark, source, work / "out", work / "ck", chosen).start()
        if not query.awaitTermination(timeout):
            query.stop()
            return {"error": f"{release}: no end within {timeout} s"}
        seconds = time.perf_counter() - start
        batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    return {
        "seconds": round(seconds, 3),
        "batches_with_rows": batches,
        "peak_one_worker_gib": round(peaks.one / GIB, 3),
        "peak_all_workers_gib": round(peaks.all / GIB, 3),
        "peak_warm_servers_gib": round(peaks.servers / GIB, 3),
    }


def one_run(release: str, source: Path, work: Path, timeout: float) -> dict[str, Any]:
    """:func:`child` in a fresh process (and so a fresh session and fresh workers)."""
    work.mkdir(parents=True)
    command = [sys.executable, "-m", "benchmarks.spark_memory", "--child", release, str(source)]
    command += ["--work", str(work), "--timeout", str(timeout)]
    before = load_averages()
    # our own interpreter and module, our own arguments
    done = subprocess.run(  # noqa: S603
        command, capture_output=True, text=True, timeout=timeout + 120, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"error": f"{release}: exit {done.returncode}: {done.stderr[-2000:]}"}
    return {**json.loads(lines[-1]), "load_before": before}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a release's runs."""
    keys = ("seconds", "peak_one_worker_gib", "peak_all_workers_gib", "peak_warm_servers_gib")
    return {f"{key}_median": median([run[key] for run in runs]) for key in keys}


def measure(args: Any, source: Path, work: Path) -> dict[str, Any]:
    """Every release ``--repeat`` times, interleaved; per release its runs and medians."""
    runs: dict[str, list[dict[str, Any]]] = {release: [] for release in args.releases}
    for round_ in range(args.repeat):
        for release in args.releases:
            run = one_run(release, source, work / f"{release}-{round_}", args.timeout)
            if "error" in run:
                return {"error": run["error"], "runs": runs}
            runs[release].append(run)
    return {release: {**summary(done), "runs": done} for release, done in runs.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison (or, with ``--child``, one run) and print JSON."""
    made = cli.parser(__doc__, timeout=600.0, repeat=3)
    cli.corpus_flags(made, lines=200_000, files=2)
    cli.flag(made, "--releases", RELEASES, nargs="+", choices=RELEASES)
    cli.flag(made, "--child", None, "internal: one run of RELEASE over SOURCE", nargs=2)
    args = cli.parse(made, argv)
    if args.child:
        release, source = args.child
        print(json.dumps(child(release, Path(source), args.work, args.timeout)))
        return 0
    from benchmarks.compare.corpus import corpus

    work = cli.Workdir(args.work, "flamestream-memory-")
    made_corpus = corpus(CORPUS_DIR, args.lines, args.files)
    results = measure(args, Path(made_corpus.folder), work.path)
    report = {"benchmark": "spark_memory", "input": asdict(made_corpus), **results}
    return emit({**report, "machine": machine("local[2]")}, work)


if __name__ == "__main__":
    raise SystemExit(main())
