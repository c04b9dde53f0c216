"""Helpers to run flamestream queries in the Spark tests (the session is in tests/conftest.py),
and the references more than one Spark test module compares with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.python_env import worker_python


@pytest.fixture(scope="session")
def unbroken_sketches(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, bytes]:
    """The approximate aggregations' released files by name, never interrupted, fixed layout:
    what the crash test and the rescale test of the same query must release (run once)."""
    from .test_graph_crash_recovery import sketches_unbroken  # that module owns the input

    return sketches_unbroken(spark, tmp_path_factory.mktemp("unbroken-sketches"))


def write_lines(path: Path, lines: list[str], *, tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write("".join(line + "\n" for line in lines) + tail)


def files_front(spark: SparkSession, path: Path, **options: Any) -> DataFrame:
    reader = spark.readStream.format("flamestream").option("front", "files")
    reader = reader.option("path", str(path))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def run_to_files(df: DataFrame, out: Path, checkpoint: Path, **options: Any) -> StreamingQuery:
    writer = df.writeStream.format("flamestream").option("checkpointLocation", str(checkpoint))
    return run_writer(writer, out, **options)


def run_writer(writer: Any, out: Path, **options: Any) -> StreamingQuery:
    """Run a ``format("flamestream")`` writer (checkpoint set) into a files sink at ``out``."""
    writer = writer.option("sink", "files").option("path", str(out))
    for key, value in options.items():
        writer = writer.option(key, str(value))
    query = writer.trigger(availableNow=True).start()
    finished = query.awaitTermination(300)
    if query.exception():
        raise query.exception()  # type: ignore[misc]
    if not finished:  # partial output must not pass for a result
        query.stop()
        raise TimeoutError(f"the query writing to {out} did not finish within 300 s")
    return query


def released(out: Path) -> list[dict[str, Any]]:
    """Every released row, file by file in batch order, line by line."""
    rows = []
    for part in sorted(out.glob("part-*.jsonl")):
        rows += [json.loads(line) for line in part.read_text().splitlines()]
    return rows


def run_example(module: str, work: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> --work <work>`` as a user would, from the project root.

    Fails the calling test with the job's output unless it exits 0 and prints
    ``verification: OK``.
    """
    done = subprocess.run(
        [sys.executable, "-m", module, "--work", str(work)],
        cwd=Path(__file__).resolve().parents[2],
        env=dict(os.environ, PYSPARK_PYTHON=worker_python()),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    assert "verification: OK" in done.stdout, done.stdout
    return done
