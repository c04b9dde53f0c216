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
from dataclasses import dataclass, field, replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks.compare import (
    engines,
    events,
    own_work,
    report,
    spark_gaps,
    spark_variants,
    venvs,
)
from benchmarks.compare.corpus import Corpus, corpus, count, mismatch
from benchmarks.compare.errors import CompareError, MismatchError, SetupError
from benchmarks.compare.events import Events, Gap

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = (
    "flamestream_latest",
    "flamestream_every",
    "flamestream_every_values",
    "plain_pyspark",
    "flamestream_lambdas",
    "pyspark_udf",
    "flamestream_readme",
    "flamestream_readme_apply",
    "flamestream_gaps",
    "pyspark_gaps_pandas_state",
    "pyspark_gaps_transform_with_state",
    "bytewax",
    "pathway",
    "counter",
    "flamestream_latest_apply",
)
#: Not run unless asked for, to show what a way of writing the query gains: word count latest
#: the way before readers and write_stream (apply on the loaded front, then writeStream).
EXTRA = ("flamestream_latest_apply",)
#: The word count variants releasing every update (``_values``: the sink writes values only).
EVERY = ("flamestream_every", "flamestream_every_values")
#: The README's first way (its lambda graph, release="every", JSON): write_stream, apply.
README = ("flamestream_readme", "flamestream_readme_apply")
#: The gaps workload's variants (over the event corpus); the others count the words' corpus.
GAPS = ("flamestream_gaps", "pyspark_gaps_pandas_state", "pyspark_gaps_transform_with_state")
#: The variants run on the benchmark's Spark session (the others: peers' processes, Counter).
SPARK = tuple(v for v in VARIANTS if v not in ("bytewax", "pathway", "counter"))
MATPLOTLIB = "3.11.2"
#: The event corpus' default size: events and the keys they are drawn from.
EVENTS = 400_000
KEYS = 4_000

#: One run of a variant: its seconds and what else to report; raises on a failure.
Runner = Callable[[], tuple[float, dict[str, Any]]]


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The flags."""
    made = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    made.add_argument("--lines", type=int, default=400_000, help="corpus lines")
    made.add_argument("--files", type=int, default=4, help="corpus files")
    made.add_argument("--events", type=int, default=EVENTS, help="the gaps workload's events")
    made.add_argument("--event-files", type=int, default=4, help="event files")
    made.add_argument("--keys", type=int, default=KEYS, help="keys the events are drawn from")
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
    made.add_argument(
        "--own-work-lines",
        type=int,
        default=20_000,
        help="corpus lines for the in-process own-work measure (own_work.py; 0: not run)",
    )
    args = made.parse_args(argv)
    sizes = (args.rounds, args.lines, args.files, args.events, args.event_files, args.keys)
    if min(sizes) < 1:
        made.error("--rounds, --lines, --files, --events, --event-files, --keys must be >= 1")
    return args


@dataclass
class Bench:
    """What the runs share: the flags, the corpora and their results, the session, the peers.

    A corpus is made only if a variant selected reads it (``corpus`` and ``expected`` for the
    word count, ``events`` and ``gaps`` for the gaps workload), else it is None.
    """

    args: argparse.Namespace
    corpus: Corpus | None = None
    expected: Counter[str] = field(default_factory=Counter)
    events: Events | None = None
    gaps: list[Gap] = field(default_factory=list)
    spark: Any = None
    runs: int = 0

    def fresh(self, name: str) -> Path:
        """A new, empty run directory."""
        self.runs += 1
        path: Path = self.args.work / "runs" / f"{self.runs:03d}-{name}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def words(self) -> Corpus:
        """The word corpus (made when a word count variant is selected)."""
        if self.corpus is None:
            msg = "the word corpus was not made: no word count variant was selected"
            raise SetupError(msg)
        return self.corpus

    def event_corpus(self) -> Events:
        """The event corpus (made when a gaps variant is selected)."""
        if self.events is None:
            msg = "the event corpus was not made: no gaps variant was selected"
            raise SetupError(msg)
        return self.events


#: A Spark variant's (define, check): define(out, checkpoint) -> writer, check(out) -> extra.
Case = tuple[Callable[[Path, Path], Any], Callable[[Path], dict[str, Any]]]


def gaps_case(bench: Bench, name: str) -> Case:
    """A gaps variant's writer and checker over the event corpus."""
    spark, source = bench.spark, bench.event_corpus().path
    define = {
        "flamestream_gaps": spark_gaps.flamestream_writer,
        "pyspark_gaps_pandas_state": spark_gaps.pandas_state_writer,
        "pyspark_gaps_transform_with_state": spark_gaps.transform_with_state_writer,
    }[name]
    check = spark_gaps.check_flamestream if name == "flamestream_gaps" else spark_gaps.check_peer
    return partial(define, spark, source), partial(check, spark, expected=bench.gaps, name=name)


def word_case(bench: Bench, name: str) -> Case:
    """A word count variant's writer and checker over the word corpus."""
    spark, source = bench.spark, bench.words().path
    if name in ("plain_pyspark", "pyspark_udf"):
        plain = name == "plain_pyspark"
        writer = spark_variants.plain_writer if plain else spark_variants.udf_writer
        check = partial(spark_variants.check_plain, expected=bench.expected, name=name)
        return partial(writer, spark, source), partial(check, spark)
    if name in README:
        apply = name == "flamestream_readme_apply"
        readme = partial(spark_variants.readme_writer, spark, source, apply=apply)
        check = partial(spark_variants.check_readme, expected=bench.expected, name=name)
        return readme, partial(check, spark)
    release: spark_variants.Release = "every" if name in EVERY else "latest"
    define = partial(
        spark_variants.flamestream_writer,
        spark,
        source,
        release=release,
        fused=name != "flamestream_latest_apply",
        declared=name != "flamestream_lambdas",
        columns="value" if name == "flamestream_every_values" else "all",
    )
    check = partial(
        spark_variants.check_flamestream, expected=bench.expected, release=release, name=name
    )
    return define, partial(check, spark)


def spark_runner(bench: Bench, name: str) -> Runner:
    """A Spark variant's run: define, start, await, then read the output back and check it."""
    from benchmarks.lib.timing import run_query

    define, check = gaps_case(bench, name) if name in GAPS else word_case(bench, name)

    def once() -> tuple[float, dict[str, Any]]:
        path = bench.fresh(name)
        out, checkpoint = path / "out", path / "checkpoint"
        try:
            run = run_query(partial(define, out, checkpoint), bench.args.timeout)
            extra = check(out)
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
                bench.words().path,
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
    found = count(bench.words().path)
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


def run_all(
    bench: Bench, versions: dict[str, Any], spark: Any = None
) -> dict[str, report.Measured]:
    """Make the runners (the session, the peers' virtualenvs), run the rounds, stop Spark.

    ``spark``: a session to run the Spark variants in instead of a new one (not stopped).
    """
    from benchmarks.lib.session import local_spark

    measured = {name: report.Measured() for name in bench.args.variants}
    peer_runners = setup_peers(bench, measured, versions)
    own = spark is None and any(v in SPARK for v in bench.args.variants)
    if own:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = local_spark("flamestream-bench-compare")
    if spark is not None:
        bench.spark = spark
        versions["spark"] = spark.version
        versions["java"] = spark.sparkContext._jvm.System.getProperty("java.version")
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
        if own:
            spark.stop()
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


def prepare(args: argparse.Namespace) -> Bench:
    """The corpora the selected variants read (generated or reused), with their results."""
    bench = Bench(args)
    if any(v not in GAPS for v in args.variants):
        bench.corpus = corpus(args.work, args.lines, args.files)
        bench.expected = count(bench.corpus.path)
    if any(v in GAPS for v in args.variants):
        bench.events = events.corpus(args.work, args.events, args.event_files, args.keys)
        bench.gaps = events.reference_gaps(events.read(bench.events.path))
    return bench


def plans(variants: list[str]) -> dict[str, list[str]]:
    """What the planner decided for each flamestream variant's graph (``describe()``)."""
    from benchmarks.lib.workloads import gaps_graph, readme_word_count_graph, word_count_graph
    from flamestream.spark.plan import plan_execution

    found = {}
    for name in [v for v in variants if v.startswith("flamestream_")]:
        if name == "flamestream_gaps":
            flow, release = gaps_graph(), "every"
        elif name in README:
            flow, release = readme_word_count_graph(), "every"
        else:
            flow = word_count_graph(commutative=True, declared=name != "flamestream_lambdas")
            release = "every" if name in EVERY else "latest"
        found[name] = plan_execution(flow.build(), release=release).describe().splitlines()
    return found


def own_work_report(bench: Bench) -> dict[str, Any] | None:
    """The own work per word around the lambdas, in process (:mod:`.own_work`).

    Measured when a variant of the general path's word count runs (and ``--own-work-lines``).
    """
    general = ("flamestream_lambdas", *README)
    if not bench.args.own_work_lines or not any(v in general for v in bench.args.variants):
        return None
    path = bench.fresh("own-work")
    try:
        return own_work.measure(Path(bench.words().path), bench.args.own_work_lines, path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def variant_reports(bench: Bench, measured: dict[str, report.Measured]) -> dict[str, Any]:
    """Each variant's section, its rates in its workload's units (words, or events)."""
    found: dict[str, Any] = {}
    for name, runs in measured.items():
        if name in GAPS:
            made = bench.event_corpus()
            units = {"events": made.events, "gaps": made.gaps}
        else:
            words = bench.words()
            units = {"words": words.words, "lines": words.lines}
        found[name] = report.variant_report(runs, units)
    return found


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    """Generate (or reuse) the corpora, run and check the variants, print JSON, plot.

    ``spark``: run the Spark variants in this session (left running) instead of a new one.
    """
    args = parse(argv)
    args.work = args.work.resolve()
    bench = prepare(args)
    versions: dict[str, Any] = {
        "python": report.machine()["python"],
        "pyspark": version("pyspark"),
        "flamestream": version("flamestream"),
        "flamestream_git": report.git_commit(),
    }
    measured = run_all(bench, versions, spark)
    own = own_work_report(bench)
    medians = {name: m.median() for name, m in measured.items()}
    errors = [{"variant": n, **e} for n, m in measured.items() for e in m.errors]
    found: dict[str, Any] = {
        "benchmark": "word count and per-key gaps: flamestream vs PySpark (built-ins, the same "
        "Python as UDFs and pandas state), Bytewax, Pathway, Counter",
        "input": None if bench.corpus is None else bench.corpus.report(),
        "events_input": None if bench.events is None else bench.events.report(),
        "rounds": args.rounds,
        "spark_warmup": args.warmup,
        "order": args.variants,
        "workloads": {n: "gaps" if n in GAPS else "word count" for n in args.variants},
        "variants": variant_reports(bench, measured),
        "ratios": report.ratios(medians, [n for n in medians if n not in GAPS]),
        "plans": plans(args.variants),
        "own_work": own,
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
