"""Python worker connect-back under CPU load: how many short flamestream queries start.

Spark 4.x gives the Python process behind a streaming Python data source 10 s to connect back
(docs/connectors.md, "Running on a loaded machine"). This starts ``--load`` CPU-burning
processes, waits ``--ramp`` seconds, then per mode (the interpreter Spark's Python workers
run: ``default``, ``launcher`` = ``flamestream-python``, ``zipless`` = Spark's source zips
dropped from ``PYTHONPATH``) runs ``--runs`` short files -> files queries in one child
process and session (each query start is one trial of the race) and counts those that
started and finished. Modes run in the order given (a later one meets a higher load). It
also times, under the same load, the runner's imports and its connect-back. Prints one JSON
object::

    python -m benchmarks.connect_back [--load N] [--runs K] [--lines L] [--modes a,b]
        [--ramp S] [--burn-seconds S] [--timeout S] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import emit, load_averages, machine
from benchmarks.lib.stats import median
from flamestream.python_env import worker_python

#: The module Spark runs for a streaming Python data source, on the driver.
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"

#: What a burner runs: a busy loop that ends by itself.
BURN = (
    "import sys, time\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end: pass\n"
)

#: The ``zipless`` interpreter: Spark's PYTHONPATH without its source-only zips, then Python.
WRAPPER = """#!/bin/sh
# Python for Spark workers: drop Spark's source-only pyspark.zip / py4j zip from PYTHONPATH
# (this interpreter has pyspark installed), so imports use site-packages' cached bytecode.
PYTHONPATH=$(printf '%s' "$PYTHONPATH" | tr ':' '\\n' \\
    | grep -v -e '/python/lib/pyspark\\.zip$' -e '/python/lib/py4j-[^/]*-src\\.zip$' | paste -sd: -)
export PYTHONPATH
exec {python} "$@"
"""

#: ``default``: the project's interpreter; ``launcher``: ``flamestream-python`` (connects back
#: before importing pyspark); ``zipless``: the wrapper above.
MODES = ("default", "launcher", "zipless")


def write_wrapper(directory: Path) -> Path:
    """The ``zipless`` interpreter wrapper, for this interpreter."""
    path = directory / "python-worker"
    path.write_text(WRAPPER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def spark_pythonpath() -> str:
    """The PYTHONPATH Spark gives its Python workers (local mode, pip-installed pyspark)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    zips = sorted((home / "python" / "lib").glob("*.zip"))
    core = sorted((home / "jars").glob("spark-core_*.jar"))
    return os.pathsep.join(str(p) for p in [*zips, *core])


def import_cost(pythonpath: str, repeat: int = 3) -> dict[str, float]:
    """Median wall and CPU seconds of a fresh interpreter importing :data:`RUNNER`."""
    walls, cpus = [], []
    env = dict(os.environ, PYTHONPATH=pythonpath)
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {RUNNER}"], env=env, check=True)  # noqa: S603
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {"wall_s": median(walls, 2), "cpu_s": median(cpus, 2)}


def connect_delay(python: str, repeat: int = 3) -> float:
    """Median seconds from starting ``python -m RUNNER`` to its connecting back.

    A server stands in for the JVM (it accepts, then closes: the runner then fails, and is
    killed); what is timed is exactly the 10 s race Spark runs.
    """
    import socket

    delays = []
    for _ in range(repeat):
        with socket.create_server(("127.0.0.1", 0)) as server:
            server.settimeout(120)
            env = dict(
                os.environ,
                PYTHONPATH=spark_pythonpath(),
                PYTHON_WORKER_FACTORY_PORT=str(server.getsockname()[1]),
                PYTHON_WORKER_FACTORY_SECRET=secrets.token_hex(8),
            )
            start = time.perf_counter()
            child = subprocess.Popen(  # noqa: S603
                [python, "-m", RUNNER], env=env, stderr=subprocess.DEVNULL
            )
            try:
                conn, _ = server.accept()
                delays.append(time.perf_counter() - start)
                conn.close()
            finally:
                child.kill()
                child.wait()
    return median(delays, 2)


def start_burners(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """``count`` busy loops, each ending by itself after ``seconds``."""
    return [
        subprocess.Popen([sys.executable, "-c", BURN, str(seconds)])  # noqa: S603
        for _ in range(count)
    ]


def stop_burners(burners: list[subprocess.Popen[bytes]]) -> None:
    """Stop the burners this run started (by their own handles), and reap them."""
    for burner in burners:
        if burner.poll() is None:
            burner.terminate()
    for burner in burners:
        try:
            burner.wait(timeout=10)
        except subprocess.TimeoutExpired:
            burner.kill()
            burner.wait()


# --- the child: one session, K queries -------------------------------------------------


def one_query(spark: Any, source: Path, work: Path, run: int, lines: int, timeout: float) -> Any:
    """One files -> files query: how it ended (finished, timeout, connect_back, failed)."""
    from benchmarks.lib.workloads import files_sink

    out, began, status, detail = work / f"out-{run}", time.perf_counter(), "finished", ""
    try:
        reader = spark.readStream.format("flamestream").option("front", "files")
        rows = reader.option("path", str(source)).load()
        sink = files_sink(rows, out, work / f"ck-{run}", fmt=None, release=None)
        query = sink.trigger(availableNow=True).start()
        done = query.awaitTermination(timeout)
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]
        if not done:
            query.stop()
            status = "timeout"
    except Exception as exc:  # classify: the connect-back race, or anything else
        text = str(exc)
        status = "connect_back" if "connect back" in text else "failed"
        detail = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
    released = sum(len(p.read_text().splitlines()) for p in sorted(out.glob("part-*.jsonl")))
    if status == "finished" and released != lines:
        status, detail = "failed", f"released {released} of {lines} lines"
    seconds = round(time.perf_counter() - began, 1)
    found = {"status": status, "seconds": seconds, "load": load_averages()}
    return found | ({"detail": detail} if detail else {})


def child(runs: int, lines: int, work: Path, timeout: float) -> dict[str, Any]:
    """Run ``runs`` files -> files queries in one session; say how each one ended."""
    from benchmarks.lib.session import spark_session

    source = work / "in"
    source.mkdir(parents=True, exist_ok=True)
    (source / "a.txt").write_text("".join(f"line {i}\n" for i in range(lines)))
    began = time.perf_counter()
    conf = {"spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"]}
    with spark_session("flamestream-connect-back", conf) as spark:
        session_s = time.perf_counter() - began
        results = [one_query(spark, source, work, run, lines, timeout) for run in range(runs)]
    return {"session_start_s": round(session_s, 1), "queries": results}


# --- the parent ------------------------------------------------------------------------


def run_mode(mode: str, args: argparse.Namespace, work: Path, wrapper: Path) -> dict[str, Any]:
    """One mode in a child process (a fresh JVM), its JSON back."""
    python = {"zipless": str(wrapper), "launcher": worker_python()}.get(mode, sys.executable)
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [sys.executable, "-m", "benchmarks.connect_back", "--child"]
    command += ["--work", str(work / mode)]
    command += [f"--{k}={getattr(args, k)}" for k in ("runs", "lines", "timeout")]
    load_before = load_averages()
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)  # noqa: S603
    result: dict[str, Any] = {"python_workers": python, "load_at_start": load_before}
    try:
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        result["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    queries = result.get("queries", [])
    result["started"] = sum(q["status"] not in ("connect_back",) for q in queries)
    result["finished"] = sum(q["status"] == "finished" for q in queries)
    result["seconds"] = round(time.perf_counter() - began, 1)
    result["load_at_end"] = load_averages()
    return result


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The load, the queries and the modes."""
    parser = cli.parser(__doc__, timeout=300.0, repeat=None)
    cli.flag(parser, "--load", 15, "CPU-burning processes")
    cli.flag(parser, "--runs", 3, "queries per mode")
    cli.flag(parser, "--lines", 200, "input lines per query")
    cli.flag(parser, "--modes", "default,launcher", f"comma-separated: {MODES}")
    cli.flag(parser, "--ramp", 30.0, "seconds of load before runs")
    cli.flag(parser, "--burn-seconds", 1200.0, "burners end by themselves after this")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        parser.error(f"--modes: unknown {unknown}; known: {list(MODES)}")
    return args


def under_load(args: argparse.Namespace, work: Path, report: dict[str, Any]) -> None:
    """After the ramp: the runner's import and connect-back costs, then the modes."""
    time.sleep(args.ramp)
    report["load_after_ramp"] = load_averages()
    with_zips = spark_pythonpath()
    report["runner_imports_under_load"] = {
        "spark_pythonpath": import_cost(with_zips),
        "zipless": import_cost(with_zips.split(os.pathsep)[-1]),
    }
    report["connect_back_s_under_load"] = {
        "default": connect_delay(sys.executable),
        "launcher": connect_delay(worker_python()),
    }
    wrapper = write_wrapper(work)
    report["modes"] = {mode: run_mode(mode, args, work, wrapper) for mode in args.modes}


def main(argv: list[str] | None = None) -> int:
    """Run the burners and the modes (or, with --child, one mode's queries)."""
    args = arguments(argv)
    if args.child:
        print(json.dumps(child(args.runs, args.lines, args.work, args.timeout)))
        return 0
    work = cli.Workdir(args.work, "flamestream-connect-back-")
    report: dict[str, Any] = {"machine": machine(), "load_before_burners": load_averages()}
    report |= {"burners": args.load, "runs": args.runs}
    burners = start_burners(args.load, args.burn_seconds)
    try:
        under_load(args, work.path, report)
    finally:
        stop_burners(burners)
        report["burners_left"] = sum(b.poll() is None for b in burners)
        report["load_after"] = load_averages()
    return emit(report, work)


if __name__ == "__main__":
    raise SystemExit(main())
