"""One local[2] Spark session for every Spark test, and helpers to run flamestream queries."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("flamestream-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


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
    writer = df.writeStream.format("flamestream").option("sink", "files")
    writer = writer.option("path", str(out)).option("checkpointLocation", str(checkpoint))
    for key, value in options.items():
        writer = writer.option(key, str(value))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    if query.exception():
        raise query.exception()  # type: ignore[misc]
    return query


def released(out: Path) -> list[dict[str, Any]]:
    """Every released row, file by file in batch order, line by line."""
    rows = []
    for part in sorted(out.glob("part-*.jsonl")):
        rows += [json.loads(line) for line in part.read_text().splitlines()]
    return rows
