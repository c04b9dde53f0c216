"""Python worker connect-back under CPU load: how many short flamestream queries start.

Spark 4.x starts the Python process behind a streaming Python data source (the driver-side
``pyspark.sql.streaming.python_streaming_source_runner``) as a fresh interpreter and gives it
10 s to connect back (``PythonWorkerFactory.createSimpleWorker``: a fixed ``select(10000)``,
no conf; ``spark.python.use.daemon`` does not apply to it). Before connecting, that process
imports pyspark, and Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its
``PYTHONPATH``: source files only, so every such start compiles pyspark again. The setting
measured here, ``zipless``, runs Python workers through a wrapper that drops Spark's source
zips from ``PYTHONPATH`` when the interpreter has pyspark installed (same version, bytecode
cached in site-packages). See docs/connectors.md, "Running on a loaded machine".

It starts ``--load`` CPU-burning processes (each stops by itself after ``--burn-seconds``, and
all are stopped at the end), waits ``--ramp`` seconds, then for each mode runs ``--runs``
short queries (files front -> files sink, ``Trigger.AvailableNow``) and records how many
started (the source's Python process connected back) and finished (every line released once).
Each mode runs in a child process with one session for its ``--runs`` queries: every query
start spawns a new source runner process (never reused), so each query is one independent
trial of the 10 s race, while a fresh session (a new JVM) per query would add minutes of JVM
start under load and no trial. Modes run one after the other in the order given, so a later
mode meets a higher load average (conservative for ``zipless``, which runs last by default).
Prints one JSON object::

    python -m benchmarks.connect_back [--load N] [--runs K] [--lines L] [--modes a,b]
        [--ramp S] [--burn-seconds S] [--timeout S] [--work DIR]

It also times, under the same load, what the source runner imports before it connects back,
with Spark's ``PYTHONPATH`` and without the zips (wall and CPU seconds, median of 3).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flamestream.launcher import worker_python

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
    return {
        "wall_s": round(statistics.median(walls), 2),
        "cpu_s": round(statistics.median(cpus), 2),
    }


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
    return round(statistics.median(delays), 2)


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


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 1) for x in os.getloadavg()]


# --- the child: one session, K queries -------------------------------------------------


def child(runs: int, lines: int, work: Path, timeout: float) -> dict[str, Any]:
    """Run ``runs`` files -> files queries in one session; say how each one ended."""
    from benchmarks.lib.session import local_spark
    from benchmarks.lib.workloads import files_sink

    source = work / "in"
    source.mkdir(parents=True, exist_ok=True)
    (source / "a.txt").write_text("".join(f"line {i}\n" for i in range(lines)))
    started_at = time.perf_counter()
    spark = local_spark(
        "flamestream-connect-back",
        {"spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"]},
    )
    session_s = time.perf_counter() - started_at
    results = []
    try:
        for run in range(runs):
            out, checkpoint = work / f"out-{run}", work / f"ck-{run}"
            began = time.perf_counter()
            status, detail = "finished", ""
            try:
                df = (
                    spark.readStream.format("flamestream")
                    .option("front", "files")
                    .option("path", str(source))
                    .load()
                )
                sink = files_sink(df, out, checkpoint, fmt=None, release=None)
                query = sink.trigger(availableNow=True).start()
                done = query.awaitTermination(timeout)
                error = query.exception()
                if error is not None:
                    raise error  # type: ignore[misc]
                if not done:
                    query.stop()
                    status = "timeout"
            except Exception as exc:  # classify: the connect-back race, or anything else
                text = str(exc)
                status = "connect_back" if "connect back" in text else "failed"
                detail = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
            released = sum(
                len(p.read_text().splitlines()) for p in sorted(out.glob("part-*.jsonl"))
            )
            if status == "finished" and released != lines:
                status, detail = "failed", f"released {released} of {lines} lines"
            results.append(
                {
                    "status": status,
                    "seconds": round(time.perf_counter() - began, 1),
                    "load": load(),
                    **({"detail": detail} if detail else {}),
                }
            )
    finally:
        spark.stop()
    return {"session_start_s": round(session_s, 1), "queries": results}


# --- the parent ------------------------------------------------------------------------


def run_mode(mode: str, args: argparse.Namespace, work: Path, wrapper: Path) -> dict[str, Any]:
    """One mode in a child process (a fresh JVM), its JSON back."""
    python = {"zipless": str(wrapper), "launcher": worker_python()}.get(mode, sys.executable)
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [
        sys.executable,
        "-m",
        "benchmarks.connect_back",
        "--child",
        "--runs",
        str(args.runs),
        "--lines",
        str(args.lines),
        "--timeout",
        str(args.timeout),
        "--work",
        str(work / mode),
    ]
    load_before = load()
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
    result["load_at_end"] = load()
    return result


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments; run the burners and the modes (or, with --child, one mode)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=15, help="CPU-burning processes")
    parser.add_argument("--runs", type=int, default=3, help="queries per mode")
    parser.add_argument("--lines", type=int, default=200, help="input lines per query")
    parser.add_argument("--modes", default="default,launcher", help=f"comma-separated: {MODES}")
    parser.add_argument("--ramp", type=float, default=30.0, help="seconds of load before runs")
    parser.add_argument(
        "--burn-seconds", type=float, default=1200.0, help="burners end by themselves after this"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per query")
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.runs, args.lines, args.work, args.timeout)))
        return
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes: unknown {unknown}; known: {list(MODES)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-connect-back-"))
    work.mkdir(parents=True, exist_ok=True)
    wrapper = write_wrapper(work)
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_before_burners": load(),
        "burners": args.load,
        "runs": args.runs,
    }
    burners = start_burners(args.load, args.burn_seconds)
    try:
        time.sleep(args.ramp)
        report["load_after_ramp"] = load()
        with_zips = spark_pythonpath()
        report["runner_imports_under_load"] = {
            "spark_pythonpath": import_cost(with_zips),
            "zipless": import_cost(with_zips.split(os.pathsep)[-1]),
        }
        report["connect_back_s_under_load"] = {
            "default": connect_delay(sys.executable),
            "launcher": connect_delay(worker_python()),
        }
        report["modes"] = {mode: run_mode(mode, args, work, wrapper) for mode in modes}
    finally:
        stop_burners(burners)
        report["burners_left"] = sum(b.poll() is None for b in burners)
        report["load_after"] = load()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
