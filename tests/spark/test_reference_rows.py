"""Every released column is the reference runtime's, on records that repeat a key, on every path.

Released rows are ``ts, front, trace, flags, source, position, sink, value``. The reference
runtime (``run_in_order`` on the global times the fronts stamped) gives the global time, the
released trace (a lineage: ``flamestream.model.lineage``), the payload, and through the
front's rows the determinant of each global time; a released row's flags are 0. The input
repeats keys within one record (``"a a b a"``) and across fronts read at uneven rates, so a
grouping's buckets get several items of one global time and items arriving late (replays,
invalidated versions the barrier drops); the graphs between them take every path the plan
has (``flamestream.spark.plan.paths``): the general keyed cycle, the declared count and sums
in Arrow, a Template rendered in Arrow, the in-order lane of a grouping alone, a stage fused
into the fronts' reads, a keyed stage run in the sink's tasks, ``release="every"`` and
``"latest"``, released by the commit or by the tasks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flamestream import Dataflow, Template, count, map_reduce, sum_by
from flamestream.spark import SparkGraph
from flamestream.spark.exec.general.items import encode_trace
from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order

from .conftest import released, run_to_files, run_writer, write_lines
from .test_graph_on_spark import inverted_index, window3

#: Three fronts; keys repeat within a line and across the fronts. ``clock=logical`` stamps a
#: line with its byte offset and a front that has read all reports its file's size, so each
#: file ends with a line longer than the files' other lines differ: every line is released.
TEXT = {
    "f0": ["a a b a", "b a b", "c c c a", "a", "b b", "a b c a b c a b c"],
    "f1": ["a b a b", "the cat the hat the", "c a", "", "a a a a", "a b c a b c a b c"],
    "f2": ["b", "a c a", "hat cat hat", "a b c a b c", "c", "a b c a b c a b c"],
}
#: Read limits per front: uneven, so a front's lines reach a key after later ones of another.
LIMITS = {"f0": 1, "f1": 2, "f2": 3}


def word_count() -> Dataflow:
    """map_reduce with lambdas: the general keyed cycle."""
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=lambda a, b: a + b)
    flow.sink("out", counts)
    return flow


def declared_count() -> Dataflow:
    """``count`` of split text with a Template: counted, summed and rendered in Arrow."""
    flow = Dataflow("declared")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", flow.map("show", count(flow, "count", words), Template("{key}={value}")))
    return flow


def lengths() -> Dataflow:
    """``sum_by``: int values summed per key in Arrow in the keyed stage."""
    flow = Dataflow("lengths")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", sum_by(flow, "sum", words, key=lambda w: w[0], value=len))
    return flow


GRAPHS: dict[str, Callable[[], Dataflow]] = {
    "wordcount": word_count,
    "declared": declared_count,
    "sum": lengths,
    "window3": window3,
    "index": inverted_index,
}

#: How the query runs: the fronts' readers given to write_stream (first stage in the reads,
#: the keyed stage in the sink's tasks), or loaded fronts through apply and the sink; with
#: key partitions, release mode and the barrier's release place.
WAYS = {
    "readers-write_stream": {"readers": True, "partitions": 2, "release": "commit"},
    "loaded-apply-3parts": {"readers": False, "partitions": 3, "release": "commit"},
    "readers-tasks": {"readers": True, "partitions": 1, "release": "tasks"},
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("reference-rows")
    for front, lines in TEXT.items():
        write_lines(folder / front / "lines.txt", lines)
    return folder


def readers(spark: SparkSession, folder: Path) -> list[Any]:
    return [
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(folder / front))
        .option("clock", "logical")
        .option("frontIdBase", 10 * number)
        .option("maxRecordsPerTrigger", LIMITS[front])
        for number, front in enumerate(TEXT)
    ]


def loaded(spark: SparkSession, folder: Path) -> Any:
    return union(readers(spark, folder))


def union(readers: list[Any]) -> Any:
    """The readers' fronts, loaded and unioned."""
    frames = [reader.load() for reader in readers]
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    return rows


@pytest.fixture(scope="module")
def front_rows(spark: SparkSession, inputs: Path, tmp_path_factory: pytest.TempPathFactory):
    """The rows the fronts admit (ts, front, source, position, value), as stamped on Spark."""
    work = tmp_path_factory.mktemp("fronts")
    run_to_files(loaded(spark, inputs), work / "out", work / "ck")
    rows = released(work / "out")
    assert len(rows) == sum(len(lines) for lines in TEXT.values())
    return rows


def reference(flow: Dataflow, fronts: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The reference runtime's released rows, every column, in release order per sink."""
    inputs: dict[int, list[tuple[int, Any]]] = {}
    where = {}
    for row in sorted(fronts, key=lambda r: (r["front"], r["ts"])):
        inputs.setdefault(row["front"], []).append((row["ts"], row["value"]))
        where[row["ts"], row["front"]] = (row["source"], row["position"])
    result = run_in_order(flow, inputs)
    return [
        (
            r.global_time.ts,
            r.global_time.front,
            encode_trace(r.trace).hex(),
            0,
            *where[r.global_time],
            r.sink,
            render_default(r.payload),
        )
        for sink in flow.build().sinks
        for r in result.released(sink)
    ]


def as_row(row: dict[str, Any]) -> tuple[Any, ...]:
    columns = ("ts", "front", "trace", "flags", "source", "position", "sink", "value")
    return tuple(row[c] for c in columns)


def run(spark: SparkSession, inputs: Path, flow: Dataflow, way: str, work: Path, **graph: Any):
    """Run ``flow`` the ``way`` says: its released rows file by file, and the barrier's drops."""
    setting = WAYS[way]
    spark_graph = SparkGraph(flow, partitions=setting["partitions"], **graph)
    checkpoint = str(work / "ck")
    if setting["readers"]:
        writer = spark_graph.write_stream(readers(spark, inputs), checkpoint_location=checkpoint)
        run_writer(writer, work / "out", release=setting["release"])
    else:
        rows = spark_graph.apply(loaded(spark, inputs), checkpoint_location=checkpoint)
        run_to_files(rows, work / "out", work / "ck", release=setting["release"])
    files = [
        [as_row(json.loads(line)) for line in part.read_text().splitlines()]
        for part in sorted((work / "out").glob("part-*.jsonl"))
    ]
    markers = (work / "ck" / "flamestream-sink" / "commits").glob("*.json")
    dropped = sum(json.loads(marker.read_text()).get("dropped", 0) for marker in markers)
    return files, dropped


@pytest.mark.parametrize("way", list(WAYS))
def test_every_released_column_is_the_reference_runtimes(
    spark: SparkSession, inputs: Path, front_rows, way: str, tmp_path: Path
):
    dropped = 0
    for name, make in GRAPHS.items():
        flow = make()
        files, drops = run(spark, inputs, flow, way, tmp_path / name)
        got = [row for rows in files for row in rows]
        assert sorted(got) == sorted(reference(flow, front_rows)), f"{name}, {way}"
        # each file in meta order: a global time's rows by their released traces
        assert all(rows == sorted(rows, key=lambda r: r[:3]) for rows in files), f"{name}, {way}"
        dropped += drops
    # late items really came: the barrier dropped versions that later ones invalidated
    assert dropped > 0


@pytest.mark.parametrize("graph", ["wordcount", "declared"])
def test_latest_releases_the_reference_runtimes_rows(
    spark: SparkSession, inputs: Path, front_rows, graph: str, tmp_path: Path
):
    """``release="latest"``: every released row is one of the reference's, byte for byte."""
    flow = GRAPHS[graph]()
    files, _ = run(spark, inputs, flow, "readers-write_stream", tmp_path, release="latest")
    got = [row for rows in files for row in rows]
    assert set(got) <= set(reference(flow, front_rows))
    assert len(got) > 5


@pytest.mark.parametrize("given", ["reader", "loaded"])
def test_a_bounded_input_gives_the_reference_runtimes_rows(
    spark: SparkSession, inputs: Path, given: str
):
    """``apply`` on ``spark.read`` fronts: its rows are the output (any batch writer's), the
    released rows, every column."""
    fronts = [
        spark.read.format("flamestream")
        .option("front", "files")
        .option("path", str(inputs / front))
        .option("clock", "logical")
        .option("frontIdBase", 10 * number)
        for number, front in enumerate(TEXT)
    ]
    front_rows = [row.asDict() for reader in fronts for row in reader.load().collect()]
    for name, make in GRAPHS.items():
        flow = make()
        df = fronts if given == "reader" else union(fronts)
        rows = SparkGraph(flow, partitions=2).apply(df).collect()
        got = [as_row({**row.asDict(), "trace": bytes(row.trace).hex()}) for row in rows]
        assert sorted(got) == sorted(reference(flow, front_rows)), name
