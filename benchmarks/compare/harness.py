"""Run the variants interleaved over the corpus, check every result, print JSON, plot."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks.compare import engines, report, spark_variants, venvs
from benchmarks.compare.corpus import Corpus, corpus, count, mismatch
from benchmarks.compare.errors import CompareError, MismatchError, SetupError

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = (
    "flamestream_latest",
    "flamestream_every",
    "plain_pyspark",
    "bytewax",
    "pathway",
    "counter",
    "flamestream_latest_apply",
    "flamestream_latest_opaque",
)
#: Not run unless asked for, to show what a way of writing the query gains: word count latest
#: the way before readers and write_stream (apply on the loaded front, then writeStream), and
#: with the count written out as map_reduce with a lambda mapper instead of ``count``.
EXTRA = ("flamestream_latest_apply", "flamestream_latest_opaque")
SPARK = (*VARIANTS[:3], *EXTRA)
MATPLOTLIB = "3.11.2"

#: One run of a variant: its seconds and what else to report; raises on a failure.
Runner = Callable[[], tuple[float, dict[str, Any]]]


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The flags."""
    made = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    made.add_argument("--lines", type=int, default=400_000, help="corpus lines")
    made.add_argument("--files", type=int, default=4, help="corpus files")
    made.add_argument("--rounds", type=int, default=5, help="timed rounds (A B C .. A B C ..)")
    made.add_argument("--warmup", type=int, default=1, help="untimed runs of each Spark variant")
    made.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=[v for v in VARIANTS if v not in EXTRA],
    )
    made.add_argument(
        "--work",
        type=Path,
        default=ROOT / ".bench",
        help="corpus, peer virtualenvs (venvs/) and run directories (default: .bench)",
    )
    made.add_argument(
        "--plot",
        default=str(ROOT / "docs" / "img" / "bench-compare.png"),
        help="the PNG to write ('' for none)",
    )
    made.add_argument("--bytewax", default=engines.PEERS["bytewax"].version, help="version")
    made.add_argument("--pathway", default=engines.PEERS["pathway"].version, help="version")
    made.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = made.parse_args(argv)
    if args.rounds < 1 or args.lines < 1 or args.files < 1:
        made.error("--rounds, --lines and --files must be at least 1")
    return args


@dataclass
class Bench:
    """What the runs share: the flags, the corpus and its counts, the session, the peers."""

    args: argparse.Namespace
    corpus: Corpus
    expected: Counter[str]
    spark: Any = None
    runs: int = 0

    def fresh(self, name: str) -> Path:
        """A new, empty run directory."""
        self.runs += 1
        path: Path = self.args.work / "runs" / f"{self.runs:03d}-{name}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path


def spark_runner(bench: Bench, name: str) -> Runner:
    """A Spark variant's run: define, start, await, then read the output back and check it."""
    from benchmarks.lib.timing import run_query

    def once() -> tuple[float, dict[str, Any]]:
        path = bench.fresh(name)
        out, checkpoint = path / "out", path / "checkpoint"
        source, spark = bench.corpus.path, bench.spark
        release: spark_variants.Release = "every" if name == "flamestream_every" else "latest"
        if name == "plain_pyspark":
            define = partial(spark_variants.plain_writer, spark, source, out, checkpoint)
        else:
            define = partial(
                spark_variants.flamestream_writer,
                spark,
                source,
                out,
                checkpoint,
                release,
                fused=name != "flamestream_latest_apply",
                declared=name != "flamestream_latest_opaque",
            )
        try:
            run = run_query(define, bench.args.timeout)
            if name == "plain_pyspark":
                extra = spark_variants.check_plain(spark, out, bench.expected)
            else:
                extra = spark_variants.check_flamestream(spark, out, bench.expected, release)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        return run.seconds, extra | {"batches": run.batches, "define": round(run.define, 3)}

    return once


def peer_runner(bench: Bench, peer: engines.Peer, python: Path) -> Runner:
    """A peer's run: its script in its virtualenv, the counts it writes checked."""

    def once() -> tuple[float, dict[str, Any]]:
        path = bench.fresh(peer.name)
        try:
            return engines.run(
                peer,
                python,
                bench.corpus.path,
                path / "result.json",
                bench.expected,
                bench.args.timeout,
            )
        finally:
            shutil.rmtree(path, ignore_errors=True)

    return once


def counter_run(bench: Bench) -> tuple[float, dict[str, Any]]:
    """One ``collections.Counter`` pass over the files, in this process: the floor."""
    began = time.perf_counter()
    found = count(bench.corpus.path)
    seconds = time.perf_counter() - began
    problem = mismatch(bench.expected, dict(found))
    if problem is not None:
        msg = f"counter: {problem}"
        raise MismatchError(msg)
    return seconds, {}


def failures() -> tuple[type[BaseException], ...]:
    """What a failed run raises: ours, a timeout, I/O, and Spark's and Py4J's errors."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return CompareError, TimeoutError, OSError, PySparkException, Py4JError


def measure(runner: Runner, name: str, index: int, into: report.Measured, warmup: bool) -> bool:
    """Run once with the load averages around it; record it or its error. True if it ran."""
    before = os.getloadavg()
    try:
        seconds, extra = runner()
    except failures() as e:
        into.errors.append({"round": index, "warmup": warmup, "error": f"{type(e).__name__}: {e}"})
        return False
    after = os.getloadavg()
    run = {
        "round": index,
        "seconds": round(seconds, 4),
        "load_before": [round(x, 2) for x in before],
        "load_after": [round(x, 2) for x in after],
        **extra,
    }
    (into.warmups if warmup else into.runs).append(run)
    return True


def rounds(
    runners: dict[str, Runner], measured: dict[str, report.Measured], args: argparse.Namespace
) -> None:
    """Spark's warm-ups, then ``args.rounds`` rounds of every variant in turn.

    A variant that fails is not run again (its error is recorded).
    """
    live = dict(runners)
    for index in range(args.warmup):
        for name in [n for n in live if n in SPARK]:
            if not measure(live[name], name, index + 1, measured[name], warmup=True):
                del live[name]
    for index in range(args.rounds):
        for name in list(live):
            if not measure(live[name], name, index + 1, measured[name], warmup=False):
                del live[name]


def setup_peers(
    bench: Bench, measured: dict[str, report.Measured], versions: dict[str, Any]
) -> dict[str, Runner]:
    """The selected peers' runners, their virtualenvs made first (failures recorded)."""
    runners: dict[str, Runner] = {}
    for name in [v for v in bench.args.variants if v in engines.PEERS]:
        peer = replace(engines.PEERS[name], version=getattr(bench.args, name))
        try:
            python = engines.ensure(peer, bench.args.work / "venvs")
            versions[name] = {"requested": peer.version, "installed": venvs.installed(python, name)}
        except SetupError as e:
            measured[name].errors.append({"round": 0, "warmup": False, "error": str(e)})
            continue
        runners[name] = peer_runner(bench, peer, python)
    return runners


def run_all(bench: Bench, versions: dict[str, Any]) -> dict[str, report.Measured]:
    """Make the runners (the session, the peers' virtualenvs), run the rounds, stop Spark."""
    from benchmarks.lib.session import local_spark

    measured = {name: report.Measured() for name in bench.args.variants}
    peer_runners = setup_peers(bench, measured, versions)
    if any(v in SPARK for v in bench.args.variants):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        bench.spark = local_spark("flamestream-bench-compare")
        versions["spark"] = bench.spark.version
        versions["java"] = bench.spark.sparkContext._jvm.System.getProperty("java.version")
    try:
        runners: dict[str, Runner] = {}
        for name in bench.args.variants:
            if name in SPARK:
                runners[name] = spark_runner(bench, name)
            elif name == "counter":
                runners[name] = partial(counter_run, bench)
            elif name in peer_runners:
                runners[name] = peer_runners[name]
        rounds(runners, measured, bench.args)
    finally:
        if bench.spark is not None:
            bench.spark.stop()
        shutil.rmtree(bench.args.work / "runs", ignore_errors=True)
    return measured


def plot(args: argparse.Namespace, data: Path) -> dict[str, Any]:
    """Draw the PNG with matplotlib from its own virtualenv; where it went, or the error."""
    if not args.plot:
        return {"path": None}
    png = Path(args.plot).resolve()
    try:
        python = venvs.ensure(args.work / "venvs", "matplotlib", MATPLOTLIB)
        command = [str(python), str(Path(__file__).with_name("plot.py")), str(data), str(png)]
        done = subprocess.run(  # noqa: S603
            command, capture_output=True, text=True, check=False, timeout=300
        )
    except (SetupError, OSError, subprocess.TimeoutExpired) as e:
        return {"path": None, "error": str(e)}
    if done.returncode:
        return {"path": None, "error": done.stderr.strip().splitlines()[-1:]}
    return {"path": str(png), "matplotlib": MATPLOTLIB}


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the corpus, run and check the variants, print JSON, plot."""
    args = parse(argv)
    args.work = args.work.resolve()
    made = corpus(args.work, args.lines, args.files)
    bench = Bench(args, made, count(made.path))
    versions: dict[str, Any] = {
        "python": report.machine()["python"],
        "pyspark": version("pyspark"),
        "flamestream": version("flamestream"),
        "flamestream_git": report.git_commit(),
    }
    measured = run_all(bench, versions)
    medians = {name: m.median() for name, m in measured.items()}
    errors = [{"variant": n, **e} for n, m in measured.items() for e in m.errors]
    found: dict[str, Any] = {
        "benchmark": "word count: flamestream vs plain PySpark, Bytewax, Pathway, Counter",
        "input": made.report(),
        "rounds": args.rounds,
        "spark_warmup": args.warmup,
        "order": args.variants,
        "variants": {
            n: report.variant_report(m, made.words, made.lines) for n, m in measured.items()
        },
        "ratios": report.ratios(medians),
        "versions": versions,
        "machine": report.machine() | {"spark_master": "local[2]", "shuffle_partitions": 2},
        "errors": errors,
        "notes": report.NOTES,
    }
    data = args.work / "bench-compare.json"
    data.write_text(json.dumps(found, indent=2))
    found["plot"] = plot(args, data)
    data.write_text(json.dumps(found, indent=2))
    print(json.dumps(found, indent=2))
    return 1 if errors else 0
