"""A word count releasing every update, its sink writing fewer columns: the same release.

With ``columns=value`` or ``value,time`` the files sink writes, per released row, exactly the
columns of the row the same query writes with every column (``all``), in the same files and
the same order, byte for byte (after a SIGKILL and a restart too: the crash test is in
``test_graph_crash_recovery``, beside the full-column run it compares with).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from flamestream import Dataflow, Template, count
from flamestream.spark import SparkGraph

from . import graph_crash_job
from .conftest import run_writer
from .test_graph_crash_recovery import make_input, narrowed


def test_write_stream_releasing_in_tasks_writes_the_values_of_the_full_rows(
    spark: SparkSession, tmp_path: Path
):
    """The keyed stage in the sink's write tasks, each releasing its own parts: with
    ``columns=value`` every JSON part is the full part's value column, line for line; with
    ``value,time`` every Parquet part holds the full part's global times and values."""
    make_input(tmp_path / "in")
    graph = SparkGraph(graph_crash_job.word_count(), partitions=2, release="every")
    choices = (("all", "json"), ("value", "json"), ("value,time", "parquet"))
    parts = written_parts(spark, graph, tmp_path, choices)
    full = {name: path.read_bytes() for name, path in parts["all"].items()}
    assert len(full) >= 2
    assert {name: path.read_bytes() for name, path in parts["value"].items()} == narrowed(
        full, ["value"]
    )
    timed = {p.removesuffix(".parquet"): pq.read_table(f) for p, f in parts["value,time"].items()}
    assert set(timed) == {name.removesuffix(".jsonl") for name in full}
    for name, data in full.items():
        rows = [json.loads(line) for line in data.splitlines()]
        table = timed[name.removesuffix(".jsonl")]
        assert table.column_names == ["ts", "front", "value"]
        assert table.to_pylist() == [{c: r[c] for c in ("ts", "front", "value")} for r in rows]


def written_parts(
    spark: SparkSession, graph: SparkGraph, tmp_path: Path, choices: tuple[tuple[str, str], ...]
) -> dict[str, dict[str, Path]]:
    """Per ``columns`` choice (and format), the parts ``graph`` releases in tasks, by name."""
    parts = {}
    for choice, fmt in choices:
        reader = (
            spark.readStream.format("flamestream")
            .option("front", "files")
            .option("path", str(tmp_path / "in"))
            .option("maxRecordsPerTrigger", graph_crash_job.RECORDS_PER_BATCH)
            .option("clock", "logical")
        )
        where = tmp_path / choice.replace(",", "-")
        writer = graph.write_stream(reader, checkpoint_location=str(where / "ck"))
        run_writer(writer, where / "out", release="tasks", columns=choice, format=fmt)
        parts[choice] = {p.name: p for p in sorted((where / "out").glob("part-*"))}
    return parts


def test_a_declared_count_rendered_in_arrow_writes_the_values_of_the_full_rows(
    spark: SparkSession, tmp_path: Path
):
    """The declared word count (``count``, a ``Template``: summed and rendered in Arrow),
    whose keyed stage makes no determinant for a sink writing values only: every part is
    the full part's value column, line for line."""
    make_input(tmp_path / "in")
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", flow.map("show", count(flow, "count", words), Template("{key}={value}")))
    graph = SparkGraph(flow, partitions=2, release="every")
    assert "rendered-template" in graph.describe()
    parts = written_parts(spark, graph, tmp_path, (("all", "json"), ("value", "json")))
    full = {name: path.read_bytes() for name, path in parts["all"].items()}
    assert len(full) >= 2
    assert all(b'"source":"' in data for data in full.values())  # the full rows' determinants
    values = {name: path.read_bytes() for name, path in parts["value"].items()}
    assert values == narrowed(full, ["value"])
