"""Graphs applied to front DataFrames on Spark give exactly the reference runtime's output."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from flamestream import Dataflow, Template, count, map_reduce, max_by, sum_by
from flamestream.errors import GraphError
from flamestream.examples import inverted_index as index_example
from flamestream.model import lineage
from flamestream.spark import SparkGraph, apply_graph
from flamestream.spark.exec.general.items import decode_trace, encode_trace
from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order

from .conftest import run_writer, write_lines

TEXT = {
    "a.txt": ["the quick brown fox", "jumps over", "", "the lazy dog"],
    "b.txt": ["a b c", "lorem ipsum dolor sit amet", "x"],
    "c.txt": ["one", "two three", "four five six", "seven"],
}


def chain() -> Dataflow:
    """Six stateless operations in a row, one of them a flat_map that can output nothing."""
    flow = Dataflow("chain")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    kept = flow.filter("not-a", words, lambda w: w != "a")
    upper = flow.map("upper", kept, str.upper)
    tagged = flow.map("tag", upper, lambda w: (len(w), w))
    odd = flow.filter("odd", tagged, lambda t: t[0] % 2 == 1)
    flow.sink("out", flow.map("show", odd, lambda t: f"{t[1]}:{t[0]}"))
    return flow


def diamond() -> Dataflow:
    """Broadcast into two branches merged again, plus a second sink on one branch."""
    flow = Dataflow("diamond")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    left, right, side = flow.broadcast("copy", words, 3)
    lengths = flow.map("length", left, lambda w: str(len(w)))
    firsts = flow.flat_map("chars", right, lambda w: list(w[:2]))
    flow.sink("joined", flow.merge("merge", lengths, firsts))
    flow.sink("words", flow.filter("long", side, lambda w: len(w) > 3))
    return flow


def word_count() -> Dataflow:
    """map_reduce: a grouping whose key-local cycle runs inside the keyed stage."""
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=int.__add__)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def passthrough() -> Dataflow:
    """The empty graph: the source straight to the sink, the payloads only rendered."""
    flow = Dataflow("passthrough")
    flow.sink("out", flow.source("lines"))
    return flow


def window3() -> Dataflow:
    """A grouping with window 3 and no cycle, keyed by a word's first letter."""
    flow = Dataflow("window3")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    tuples = flow.grouping("by-letter", words, window=3, key=lambda w: w[0])
    flow.sink("out", flow.map("join", tuples, "+".join))
    return flow


def inverted_index() -> Dataflow:
    """The inverted index example's graph, documents read as lines (doc id: line length)."""
    flow = Dataflow("inverted_index")
    documents = flow.map("parse", flow.source("lines"), lambda line: (len(line), line))
    pairs = flow.flat_map("postings", documents, index_example.postings)
    index = map_reduce(
        flow,
        "index",
        pairs,
        mapper=index_example.posting_pair,
        initial=index_example.first_posting,
        reducer=index_example.add_posting,
    )
    flow.sink("index", index)
    return flow


GRAPHS: dict[str, Callable[[], Dataflow]] = {
    "chain": chain,
    "diamond": diamond,
    "wordcount": word_count,
    "window3": window3,
    "passthrough": passthrough,
    "inverted-index": inverted_index,
}


@pytest.fixture(scope="module")
def lines_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("graph") / "in"
    for name, lines in TEXT.items():
        write_lines(folder / name, lines)
    return folder


def fronts(
    spark: SparkSession, folder: Path, *, stream: bool, limit: int | None, clock: str = "logical"
) -> DataFrame:
    return front_reader(spark, folder, stream=stream, limit=limit, clock=clock).load()


def front_reader(
    spark: SparkSession, folder: Path, *, stream: bool, limit: int | None, clock: str = "logical"
) -> Any:
    """The front's reader, not loaded: ``apply`` given it runs the first stage in the front."""
    reader = spark.readStream if stream else spark.read
    reader = reader.format("flamestream").option("front", "files").option("path", str(folder))
    reader = reader.option("clock", clock)
    if limit:
        reader = reader.option("maxRecordsPerTrigger", limit)
    return reader


def collect(df: DataFrame, name: str, checkpoint: Path | None = None) -> list[Any]:
    """Every row of ``df`` (streaming: run it to the end through a memory sink)."""
    if not df.isStreaming:
        return df.collect()
    writer = df.writeStream.format("memory").queryName(name).trigger(availableNow=True)
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    query = writer.start()
    query.awaitTermination(180)
    if query.exception():
        raise query.exception()  # type: ignore[misc]
    rows = df.sparkSession.table(name).collect()
    df.sparkSession.catalog.dropTempView(name)
    return rows


def to_files(df: DataFrame, out: Path, checkpoint: Path) -> None:
    query = (
        df.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None


def read_rows(out: Path) -> list[SimpleNamespace]:
    return [
        SimpleNamespace(**json.loads(line))
        for part in sorted(out.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]


def expected(flow: Dataflow, front_rows: list[Any]) -> list[tuple[Any, ...]]:
    """The reference runtime's released items for the same global times, in meta order."""
    inputs: dict[int, list[tuple[int, Any]]] = {}
    for row in sorted(front_rows, key=lambda r: (r.front, r.ts)):
        inputs.setdefault(row.front, []).append((row.ts, row.value))
    result = run_in_order(flow, inputs)
    released = [r for sink in flow.build().sinks for r in result.released(sink)]
    return sorted(
        (
            r.sink,
            r.global_time.ts,
            r.global_time.front,
            encode_trace(r.trace),
            render_default(r.payload),
        )
        for r in released
    )


def observed(rows: list[Any]) -> list[tuple[Any, ...]]:
    """``apply``'s rows as a barrier sink releases them (with their traces' lineages)."""
    return sorted((r.sink, r.ts, r.front, released_trace(r.trace), r.value) for r in rows)


def released_trace(trace: bytes) -> bytes:
    return encode_trace(lineage(decode_trace(bytes(trace))))


MODES = {
    "batch-fused": {"stream": False, "limit": None, "fusion": True, "partitions": None},
    "stream-limit4-unfused-3parts": {"stream": True, "limit": 4, "fusion": False, "partitions": 3},
    "stream-limit3-fused-1part": {"stream": True, "limit": 3, "fusion": True, "partitions": 1},
    "stream-fused-4parts": {"stream": True, "limit": None, "fusion": True, "partitions": 4},
    # the reader handed to apply: the first stage (or the keying) runs in the front's reads
    "batch-in-front": {"stream": False, "limit": None, "fusion": True, "front": True},
    "stream-limit3-in-front": {"stream": True, "limit": 3, "fusion": True, "front": True},
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("graph", list(GRAPHS))
def test_graphs_release_what_the_reference_runtime_releases(
    spark: SparkSession, lines_dir: Path, graph: str, mode: str, tmp_path: Path
):
    setting = MODES[mode]
    flow = GRAPHS[graph]()
    df = fronts(spark, lines_dir, stream=setting["stream"], limit=setting["limit"])
    front_rows = collect(df, f"fronts_{graph}_{mode}".replace("-", "_"))
    assert len(front_rows) == sum(len(lines) for lines in TEXT.values())
    if setting.get("partitions"):
        df = df.repartition(setting["partitions"])
    if setting.get("front"):
        df = front_reader(spark, lines_dir, stream=setting["stream"], limit=setting["limit"])
    checkpoint = tmp_path / "ck" if setting["stream"] else None
    out = apply_graph(
        flow, df, fusion=setting["fusion"], checkpoint_location=checkpoint and str(checkpoint)
    )
    rows = collect(out, f"out_{graph}_{mode}".replace("-", "_"), checkpoint)
    want = expected(flow, front_rows)
    assert observed(rows) == want
    assert len(want) > 10


def test_stream_and_bounded_read_give_the_same_items(spark: SparkSession, lines_dir: Path):
    flow = diamond()
    bounded = observed(
        collect(apply_graph(flow, fronts(spark, lines_dir, stream=False, limit=None)), "b")
    )
    streamed = observed(
        collect(apply_graph(flow, fronts(spark, lines_dir, stream=True, limit=None)), "s")
    )
    assert bounded == streamed


def test_fusion_shows_in_describe_and_explain(spark: SparkSession, lines_dir: Path, capsys):
    keyed = SparkGraph(word_count()).describe()
    assert "[keyed by count.grouping: count.merge -> count.grouping -> count.filter" in keyed
    fused, unfused = SparkGraph(chain()), SparkGraph(chain(), fusion=False)
    assert len(fused.stages) == 1 and len(unfused.stages) == 6
    assert "stage 1 [fused: split -> not-a -> upper -> tag -> odd -> show]" in fused.describe()
    assert "fusion off" in unfused.describe()
    fused.apply(fronts(spark, lines_dir, stream=False, limit=None)).explain()
    plan = capsys.readouterr().out
    assert len(re.findall(r"MapInArrow", plan)) == 1
    assert "flamestream_stage_1__split__not-a__upper__tag__odd__show" in plan
    unfused.apply(fronts(spark, lines_dir, stream=False, limit=None)).explain()
    assert len(re.findall(r"MapInArrow", capsys.readouterr().out)) == 6


def test_stateless_steps_after_a_keyed_stage_run_in_its_tasks(
    spark: SparkSession, lines_dir: Path, capsys
):
    """Word count's show step has no pass of its own: Python passes = the plan's passes."""
    graph = SparkGraph(word_count())
    assert graph.plan.hosts == {3: 2}, graph.describe()
    assert "in stage 2's tasks, after it" in graph.describe()
    graph.apply(fronts(spark, lines_dir, stream=False, limit=None)).explain()
    passes = len(re.findall(r"MapInArrow", capsys.readouterr().out))
    assert passes == graph.plan.passes() == len(graph.stages) - 1


def test_a_reader_runs_the_first_stage_in_the_front(spark: SparkSession, lines_dir: Path, capsys):
    """Given the reader, word count is one Python pass after the front: the keyed stage."""
    graph = SparkGraph(word_count())
    assert graph.plan.in_front == 1
    reader = front_reader(spark, lines_dir, stream=False, limit=None)
    rows = graph.apply(reader)
    assert set(rows.columns) >= {"ts", "front", "trace", "sink", "value"}
    rows.explain()
    passes = len(re.findall(r"MapInArrow", capsys.readouterr().out))
    assert passes == graph.plan.passes(front=True) == 1
    # the front sends the keyed stage its rows in blocks; released as from loaded fronts
    assert graph.plan.blocked_into() == 2
    loaded = graph.apply(fronts(spark, lines_dir, stream=False, limit=None))
    metas = ["ts", "front", "trace", "flags", "source", "position", "sink", "value"]
    released = sorted(rows.select(*metas).collect())
    assert released == sorted(loaded.select(*metas).collect()) and len(released) > 3
    assert graph._front_rows(reader, "value")[0].columns == ["to", "key", "block"]
    # a session whose Arrow batches to Python may pass 2 GiB with blocks gets rows instead
    spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", "2000m")
    try:
        assert "block" not in graph._front_rows(reader, "value")[0].columns
        assert sorted(graph.apply(reader).select(*metas).collect()) == released
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxBytesPerBatch")
    # the caller's reader still loads plain front rows
    assert "value" in reader.load().columns and "trace" not in reader.load().columns
    with pytest.raises(GraphError, match="readers not loaded yet"):
        graph.apply([reader.load(), reader.load()])


def test_write_stream_runs_the_keyed_stage_in_the_sink(
    spark: SparkSession, lines_dir: Path, tmp_path: Path, capsys
):
    """Word count given the reader, through write_stream: no Python pass between front and
    sink (words cross twice), and the same released rows as apply's."""
    graph = SparkGraph(word_count(), partitions=2)
    assert graph.plan.in_sink == 2 and graph.plan.crossings(front=True, sink=True) == 2
    assert graph.plan.crossings() == 6
    outs = {}
    for way in ("apply", "write_stream"):
        reader = front_reader(spark, lines_dir, stream=True, limit=3)
        checkpoint = str(tmp_path / way / "ck")
        if way == "apply":
            writer = graph.apply(reader, checkpoint_location=checkpoint).writeStream
            writer = writer.format("flamestream").option("checkpointLocation", checkpoint)
        else:
            writer = graph.write_stream(reader, checkpoint_location=checkpoint)
        query = run_writer(writer, tmp_path / way / "out")
        capsys.readouterr()
        query.explain()
        passes = len(re.findall(r"MapInArrow", capsys.readouterr().out))
        assert passes == graph.plan.passes(front=True, sink=way == "write_stream")
        outs[way] = sorted(
            (r.sink, r.ts, r.front, r.trace, r.value) for r in read_rows(tmp_path / way / "out")
        )
    assert outs["write_stream"] == outs["apply"] and len(outs["apply"]) > 10
    assert graph.plan.passes(front=True, sink=True) == 0


@pytest.mark.parametrize("release", ["commit", "tasks"])
def test_the_empty_graph_sends_the_sink_blocks_of_rendered_rows(
    spark: SparkSession, lines_dir: Path, tmp_path: Path, release: str
):
    """Source straight to sink through write_stream: the fronts render the rows and send them
    in blocks, the sink opens them, and it writes what the front's rows written directly
    and apply's rows (rendered in one pass over a loaded DataFrame) hold."""
    render = str.upper
    graph = SparkGraph(passthrough(), render=render)
    assert "path passthrough" in graph.describe() and graph.plan.passthrough
    assert graph.plan.passes(front=True, sink=True) == 0 and graph.plan.passes() == 1
    reader = front_reader(spark, lines_dir, stream=True, limit=4)
    assert graph._front_rows(reader, "value", to_sink=True)[0].columns == ["to", "key", "block"]
    ways = {}
    for way in ("write_stream", "apply", "direct"):
        checkpoint = str(tmp_path / way / "ck")
        if way == "write_stream":
            writer = graph.write_stream(reader, checkpoint_location=checkpoint)
        else:
            rows = reader.load()
            if way == "apply":
                rows = graph.apply(rows, checkpoint_location=checkpoint)
            writer = rows.writeStream.format("flamestream").option("checkpointLocation", checkpoint)
        run_writer(writer, tmp_path / way / "out", release=release)
        ways[way] = read_rows(tmp_path / way / "out")
    meta = [(r.ts, r.front, r.source, r.position) for r in ways["direct"]]
    assert len(meta) == sum(len(lines) for lines in TEXT.values())
    for way in ("write_stream", "apply"):
        rows = ways[way]
        assert [(r.ts, r.front, r.source, r.position) for r in rows] == meta
        assert [r.value for r in rows] == [render(r.value) for r in ways["direct"]]
        assert {(r.sink, r.trace, r.flags) for r in rows} == {("out", "", 0)}
    # the sink writing values only: the same values, nothing else
    checkpoint = str(tmp_path / "values" / "ck")
    writer = graph.write_stream(reader, checkpoint_location=checkpoint)
    run_writer(writer, tmp_path / "values" / "out", release=release, columns="value")
    values = [vars(r) for r in read_rows(tmp_path / "values" / "out")]
    assert values == [{"value": r.value} for r in ways["write_stream"]]


def test_graph_output_goes_through_the_barrier_sink_in_meta_order(
    spark: SparkSession, lines_dir: Path, tmp_path: Path
):
    flow = chain()
    df = fronts(spark, lines_dir, stream=True, limit=5)
    front_rows = collect(df, "fronts_barrier")
    query = (
        apply_graph(flow, df.repartition(2))
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    lines = [
        json.loads(line)
        for part in sorted((tmp_path / "out").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    # one sink, so expected() is in meta order: global time, then trace
    want = [(ts, front, value) for _, ts, front, _, value in expected(flow, front_rows)]
    assert [(r["ts"], r["front"], r["value"]) for r in lines] == want


def test_a_raising_function_fails_the_query_naming_step_and_determinant(
    spark: SparkSession, tmp_path: Path
):
    write_lines(tmp_path / "in" / "a.txt", ["10", "20", "oops", "30"])
    flow = Dataflow("parse")
    flow.sink("out", flow.map("parse", flow.source("lines"), int))
    df = fronts(spark, tmp_path / "in", stream=True, limit=None)
    with pytest.raises(Exception, match=r"step 'parse'.*ValueError.*determinant \('a.txt', 6\)"):
        collect(apply_graph(flow, df), "raising")


def test_wrong_input_columns_are_reported(spark: SparkSession, lines_dir: Path):
    df = fronts(spark, lines_dir, stream=False, limit=None)
    with pytest.raises(GraphError, match=r"payload column 'text'.*columns ts, front, source"):
        apply_graph(chain(), df, payload="text")
    with pytest.raises(GraphError, match=r"string or binary payload column 'position'.*bigint"):
        apply_graph(chain(), df, payload="position")


def test_state_survives_a_restart_and_the_counts_go_on(spark: SparkSession, tmp_path: Path):
    """Two runs from one checkpoint, more input in between: the reference over all input."""
    folder = tmp_path / "in"
    write_lines(folder / "a.txt", ["the cat", "the dog"])
    write_lines(folder / "b.txt", ["a cat"])
    flow = word_count()
    for _ in range(2):  # the memory sink cannot restart: the barrier sink to files, read back
        df = fronts(spark, folder, stream=True, limit=2)
        to_files(df, tmp_path / "fronts", tmp_path / "ck-fronts")
        out = apply_graph(flow, df, checkpoint_location=str(tmp_path / "ck"))
        to_files(out, tmp_path / "out", tmp_path / "ck")
        write_lines(folder / "a.txt", ["the end"])
        write_lines(folder / "c.txt", ["cat and dog"])
    rows = read_rows(tmp_path / "out")
    want = [
        (sink, ts, front, value)
        for sink, ts, front, _, value in expected(flow, read_rows(tmp_path / "fronts"))
    ]
    assert sorted((r.sink, r.ts, r.front, r.value) for r in rows) == sorted(want)
    values = {r.value for r in rows}
    assert {"the=3", "cat=3", "dog=2"} <= values  # counted on from the first run's state
    state = list((tmp_path / "ck" / "flamestream-graph" / "count.grouping").glob("part-*/*.state"))
    assert state, "the grouping kept no state"


def test_a_streaming_graph_with_groupings_needs_the_checkpoint(
    spark: SparkSession, lines_dir: Path
):
    df = fronts(spark, lines_dir, stream=True, limit=None)
    with pytest.raises(GraphError, match=r"checkpoint_location"):
        apply_graph(word_count(), df)


def test_late_items_across_batches_replay_and_the_sink_drops_what_they_invalidate(
    spark: SparkSession, tmp_path: Path
):
    """Two sources read at uneven rates: one front's items reach the grouping batches late.

    Source B is read whole in the first batch, source A one line per batch, so A's items
    carry global times below B's already-counted ones: the grouping replays, its new versions
    invalidate pending outputs, and the sink must release exactly the in-order result.
    """
    write_lines(tmp_path / "a" / "a.txt", ["cat dog", "dog", "cat bird", "bird bird", "end"])
    write_lines(tmp_path / "b" / "b.txt", ["x x x x x x x x x x", "bird"])  # bird at ts 20

    def union() -> DataFrame:
        slow = fronts(spark, tmp_path / "a", stream=True, limit=1)
        fast = (
            spark.readStream.format("flamestream")
            .option("front", "files")
            .option("path", str(tmp_path / "b"))
            .option("clock", "logical")
            .option("frontIdBase", 100)
            .load()
        )
        return slow.unionByName(fast)

    to_files(union(), tmp_path / "fronts", tmp_path / "ck-fronts")
    flow = word_count()
    to_files(
        apply_graph(flow, union(), checkpoint_location=str(tmp_path / "ck")),
        tmp_path / "out",
        tmp_path / "ck",
    )
    released = read_rows(tmp_path / "out")
    want = expected(flow, read_rows(tmp_path / "fronts"))
    got = sorted((r.sink, r.ts, r.front, bytes.fromhex(r.trace), r.value) for r in released)
    assert got == want  # traces too: released as lineages, the in-order run's
    assert all(r.flags == 0 for r in released)  # released versions are valid: no flag
    markers = (tmp_path / "ck" / "flamestream-sink" / "commits").glob("*.json")
    dropped = sum(json.loads(marker.read_text())["dropped"] for marker in markers)
    assert dropped > 0, "no version was invalidated at the sink: no late item"
    # a replayed version keeps the determinant of the record it ends at (an earlier batch's)
    assert all(r.source == "a.txt" or r.source == "b.txt" for r in released)
    assert all(r.position is not None for r in released)


def word_count_latest(*, commutative: bool, declared: bool = False) -> Dataflow:
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    if declared:  # flamestream.count: the same map_reduce, its mapper recognizable
        counts = count(flow, "count", words)
    else:
        counts = map_reduce(
            flow,
            "count",
            words,
            mapper=lambda w: (w, 1),
            reducer=int.__add__,
            commutative=commutative,
        )
    show = Template("{key}={value}") if declared else (lambda r: f"{r.key}={r.value}")
    flow.sink("out", flow.map("show", counts, show))
    return flow


def test_latest_release_gives_each_batchs_final_count_per_word(spark: SparkSession, tmp_path: Path):
    folder = tmp_path / "in"
    for name, lines in TEXT.items():
        write_lines(folder / name, lines * 3)
    # clock=wall: every front reports the batch's horizon, so each batch releases all it read
    # (with per-front logical clocks rows wait for the shortest front, and a later batch then
    # releases a key's held older value next to its newer one)
    df = fronts(spark, folder, stream=True, limit=4, clock="wall")
    to_files(df, tmp_path / "fronts", tmp_path / "ck-f")
    want: dict[str, set[str]] = {}  # batch -> "word=count" after it, for its words
    totals: dict[str, int] = {}
    for part in sorted((tmp_path / "fronts").glob("part-*.jsonl")):
        seen = set()
        for line in part.read_text().splitlines():
            for word in json.loads(line)["value"].split():
                totals[word] = totals.get(word, 0) + 1
                seen.add(word)
        want[part.name.split("-")[1].split(".")[0]] = {f"{w}={totals[w]}" for w in seen}
    assert len(want) > 3
    for commutative in (True, False):
        graph = SparkGraph(word_count_latest(commutative=commutative), release="latest")
        assert ("into: count.merge" in graph.describe()) == commutative
        out, ck = tmp_path / f"out-{commutative}", tmp_path / f"ck-{commutative}"
        df = fronts(spark, folder, stream=True, limit=4, clock="wall").repartition(2)
        to_files(graph.apply(df, checkpoint_location=str(ck)), out, ck)
        got = {
            part.name.split("-")[1].split(".")[0]: [
                json.loads(line)["value"] for line in part.read_text().splitlines()
            ]
            for part in sorted(out.glob("part-*.jsonl"))
        }
        assert {batch: set(values) for batch, values in got.items()} == want
        assert all(len(values) == len(set(values)) for values in got.values())
    # the fronts' readers: split and counted in the reads, sent in blocks, counted in the sink
    graph = SparkGraph(word_count_latest(commutative=True, declared=True), release="latest")
    assert "in blocks, one per key partition" in graph.describe()
    reader = front_reader(spark, folder, stream=True, limit=4, clock="wall")
    run_writer(
        graph.write_stream(reader, checkpoint_location=str(tmp_path / "ck-r")), tmp_path / "r"
    )
    by_batch: dict[int, list[str]] = {}
    for part in sorted((tmp_path / "r").glob("part-*.jsonl")):
        values = [json.loads(line)["value"] for line in part.read_text().splitlines()]
        by_batch.setdefault(int(part.name.split("-")[1].split(".")[0]), []).extend(values)
    assert {b: sorted(v) for b, v in by_batch.items()} == {
        int(b): sorted(v) for b, v in want.items()
    }


def test_a_declared_count_releases_what_the_written_out_count_releases(
    spark: SparkSession, tmp_path: Path
):
    """``count`` and a ``Template`` render (split and counted in Arrow in the front's reads,
    summed and rendered in Arrow in the sink's tasks) against the same count as map_reduce with
    lambdas and ``int.__add__`` (Python per word, folded in Python): the same rows, metas and
    all, released, releasing the latest count or every one."""
    folder = tmp_path / "in"
    for name, lines in TEXT.items():  # repeated words, and some lines twice over
        write_lines(folder / name, [*lines, *lines[::2], "  the  the\tfox  "])
    flows = {
        "declared": word_count_latest(commutative=True, declared=True),
        "written out": word_count_latest(commutative=True),
    }
    for release in ("latest", "every"):
        outs = {}
        for way, flow in flows.items():
            graph = SparkGraph(flow, release=release)
            described = graph.describe()
            combined = "split and counted" if release == "latest" else "split and keyed"
            assert (f"{combined} in Arrow" in described) == (way == "declared")
            assert ("summed in Arrow" in described) == (way == "declared")  # int.__add__
            assert ("a sum's items rendered in Arrow" in described) == (way == "declared")
            reader = front_reader(spark, folder, stream=True, limit=5)
            where = tmp_path / release / way
            writer = graph.write_stream(reader, checkpoint_location=str(where / "ck"))
            run_writer(writer, where)
            outs[way] = sorted((r.ts, r.front, r.trace, r.value) for r in read_rows(where))
        assert outs["declared"] == outs["written out"]
        top = max(int(v.split("=")[1]) for *_, v in outs["declared"])
        assert len(outs["declared"]) > 20 and top > 5


def word_lengths(kind: str, *, declared: bool) -> Dataflow:
    """Per word, the sum or the greatest of its lengths so far, declared or written out."""
    flow = Dataflow(f"lengths-{kind}")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    if declared:
        aggregate = sum_by if kind == "sum" else max_by
        folded = aggregate(flow, "agg", words, key=str.lower, value=len)
    else:
        reducer = int.__add__ if kind == "sum" else max
        mapper = lambda w: (w.lower(), len(w))  # noqa: E731
        folded = map_reduce(flow, "agg", words, mapper=mapper, reducer=reducer)
    flow.sink("out", flow.map("show", folded, lambda r: f"{r.key}={r.value}"))
    return flow


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_a_declared_aggregation_releases_what_its_map_reduce_releases(
    spark: SparkSession, tmp_path: Path, kind: str
):
    """``sum_by`` (summed in Arrow in the keyed stage: it adds ints up) and ``max_by`` against
    the same map_reduce written out with lambdas: the same rows, metas and all."""
    folder = tmp_path / "in"
    for name, lines in TEXT.items():
        write_lines(folder / name, [*lines, *[line.upper() for line in lines[::2]]])
    outs = {}
    for declared in (True, False):
        graph = SparkGraph(word_lengths(kind, declared=declared))
        assert ("summed in Arrow" in graph.describe()) == (declared and kind == "sum")
        where = tmp_path / str(declared)
        reader = front_reader(spark, folder, stream=True, limit=5)
        run_writer(graph.write_stream(reader, checkpoint_location=str(where / "ck")), where)
        outs[declared] = sorted((r.ts, r.front, r.trace, r.value) for r in read_rows(where))
    assert outs[True] == outs[False]
    assert len(outs[True]) > 20


def test_latest_release_needs_map_reduce():
    with pytest.raises(GraphError, match=r"by-letter.*release='latest'"):
        SparkGraph(window3(), release="latest")
