"""Cycles that hand items to other keys run on Spark through the loop channel and the ack table.

Connected components over a stream of edges (``flamestream.examples.components``) and the
property tests' "hops" graph: Spark's released output must equal the reference runtime's for
the same global times, whatever the key partition count and read limit, across a restart with
items still in the loop; and the ack table must really hold the sink back while they are.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from flamestream import Dataflow
from flamestream.errors import GraphError
from flamestream.examples.components import components, labels
from flamestream.spark import SparkGraph, apply_graph
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.loop import AckTable

from ..crash import (
    reachable_in_turn,
    released_files,
    released_so_far_is,
    run_chain,
    run_unbroken,
    work_args,
)
from . import loop_crash_job
from .conftest import run_writer, write_lines
from .test_graph_on_spark import expected, fronts, read_rows, to_files


def edges(seed: int, count: int, nodes: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.randrange(nodes)} {rng.randrange(nodes)}" for _ in range(count)]


def union_find(lines: list[str]) -> dict[int, int]:
    """Each node's component: its least member (the oracle for the released labels)."""
    parent: dict[int, int] = {}

    def root(n: int) -> int:
        while parent.setdefault(n, n) != n:
            n = parent[n]
        return n

    for line in lines:
        a, b = (root(int(x)) for x in line.split())
        parent[max(a, b)] = min(a, b)
    return {n: root(n) for n in sorted(parent)}


def run_graph(
    spark: SparkSession,
    flow: Dataflow,
    folder: Path,
    work: Path,
    *,
    limit: int | None,
    partitions: int,
    fusion: bool = True,
) -> tuple[list[tuple], list[tuple]]:
    """(released, reference) rows ``(sink, ts, front, trace, value)`` of ``flow`` on ``folder``."""
    to_files(fronts(spark, folder, stream=True, limit=limit), work / "fronts", work / "ck-f")
    df = fronts(spark, folder, stream=True, limit=limit)
    checkpoint = str(work / "ck")
    out = apply_graph(
        flow, df, checkpoint_location=checkpoint, partitions=partitions, fusion=fusion
    )
    to_files(out, work / "out", work / "ck")
    rows = read_rows(work / "out")
    released = sorted((r.sink, r.ts, r.front, bytes.fromhex(r.trace), r.value) for r in rows)
    assert all(r.flags == 0 for r in rows)  # a released version is valid, whatever replayed
    return released, expected(flow, read_rows(work / "fronts"))


@pytest.fixture(scope="module")
def edge_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    folder = tmp_path_factory.mktemp("edges") / "in"
    a, b = edges(1, 5, 10), edges(2, 4, 10)
    write_lines(folder / "a.txt", a)
    write_lines(folder / "b.txt", b)
    return folder, a + b


def test_connected_components_release_what_the_reference_releases_and_the_loop_holds_back(
    spark: SparkSession, edge_files: tuple[Path, list[str]], tmp_path: Path
):
    """Spark equals the reference; the ack table held the sink back while the loop had items."""
    folder, lines = edge_files
    released, want = run_graph(spark, components(), folder, tmp_path, limit=3, partitions=3)
    assert released == want
    in_meta_order = [r.value for r in read_rows(tmp_path / "out")]  # the barrier's order
    assert labels(in_meta_order) == union_find(lines)
    state = QueryCheckpoint(str(tmp_path / "ck")).graph_url
    held = 0
    markers = sorted((tmp_path / "ck" / "flamestream-sink" / "commits").glob("*.json"))
    dropped = sum(json.loads(marker.read_text())["dropped"] for marker in markers)
    assert dropped, "no late item replayed: the sink dropped no invalidated version"
    for marker in markers:
        done = json.loads(marker.read_text())
        batch = done["batch"]
        offsets = (tmp_path / "ck" / "offsets" / str(batch)).read_text().splitlines()[2:]
        horizon = min(json.loads(o)["horizon"] for o in offsets if '"horizon"' in o)
        assert tuple(done["minTime"]) <= (horizon, 0)
        held += tuple(done["minTime"]) < (horizon, 0)  # the loop had items below the fronts
    assert held, "no item was in the loop across a batch: the test does not test the loop"
    assert AckTable(state).after(json.loads(markers[-1].read_text())["batch"]) == {}


@pytest.mark.parametrize(
    ("partitions", "limit", "fusion"), [(1, 2, False), (2, 5, True), (4, None, True)]
)
def test_hops_graph_releases_what_the_reference_releases(
    spark: SparkSession, tmp_path: Path, partitions: int, limit: int | None, fusion: bool
):
    """The property tests' cross-key cycle: each value hops to the next key twice."""
    folder = tmp_path / "in"
    write_lines(folder / "a.txt", [str(n) for n in range(0, 24, 3)])
    write_lines(folder / "b.txt", [str(n) for n in range(1, 20, 4)])
    flow = hops()
    released, want = run_graph(
        spark, flow, folder, tmp_path, limit=limit, partitions=partitions, fusion=fusion
    )
    assert released == want
    assert len(want) > 25


def hops() -> Dataflow:
    """tests/unit/test_properties.py's cross-key cycle, reading numbers from text lines."""
    wrapped = Dataflow("hops")
    numbers = wrapped.map("parse", wrapped.source("lines"), int)
    start = wrapped.map("tag", numbers, lambda n: (n % 3, 0, n))
    merged = wrapped.merge("loop", start)
    grouped = wrapped.grouping("g", merged, window=2, key=lambda p: p[0])
    fresh = wrapped.filter("bounded", grouped, lambda t: t[-1][1] < 2)
    hopped = wrapped.map(
        "hop", fresh, lambda t: ((t[-1][0] + 1) % 3, t[-1][1] + 1, sum(p[2] for p in t))
    )
    out, back = wrapped.broadcast("emit", hopped, 2)
    wrapped.add_merge_input(merged, back)
    wrapped.sink("out", out)
    return wrapped


def two_groupings() -> Dataflow:
    """A cycle through two groupings keyed differently: cut at its entry, run batch by batch."""
    flow = Dataflow("two_groupings")
    numbers = flow.map("parse", flow.source("lines"), lambda line: (int(line), 0, int(line)))
    merged = flow.merge("entry", numbers)
    by3 = flow.grouping("by3", merged, window=2, key=lambda p: p[0] % 3)
    fresh = flow.filter("fresh", by3, lambda t: t[-1][1] < 2)
    summed = flow.map("sum3", fresh, lambda t: (t[-1][0] + 1, t[-1][1], sum(p[2] for p in t)))
    by2 = flow.grouping("by2", summed, window=2, key=lambda p: p[0] % 2)
    hopped = flow.map("hop", by2, lambda t: (t[-1][0] * 7, t[-1][1] + 1, t[-1][2] - t[0][2]))
    out, back = flow.broadcast("emit", hopped, 2)
    flow.add_merge_input(merged, back)
    flow.sink("out", out)
    return flow


def test_a_cycle_through_two_groupings_runs_through_the_loop_front(
    spark: SparkSession, tmp_path: Path
):
    folder = tmp_path / "in"
    write_lines(folder / "a.txt", [str(n) for n in range(0, 20, 4)])
    write_lines(folder / "b.txt", [str(n) for n in range(1, 13, 3)])
    flow = two_groupings()
    graph = SparkGraph(flow)
    assert graph.cut == {("emit", "entry")}
    assert "loop" in graph.describe()
    released, want = run_graph(spark, flow, folder, tmp_path, limit=4, partitions=2)
    assert released == want
    assert len(want) > 12
    with pytest.raises(GraphError, match=r"streaming DataFrame.*emit -> entry"):
        apply_graph(flow, fronts(spark, folder, stream=False, limit=None))


def test_a_restart_with_items_in_the_loop_gives_the_same_output(
    spark: SparkSession, edge_files: tuple[Path, list[str]], tmp_path: Path
):
    """Stop the query between batches while the loop holds items, restart, finish."""
    folder, _ = edge_files
    to_files(fronts(spark, folder, stream=True, limit=3), tmp_path / "fronts", tmp_path / "ck-f")
    flow = components()
    checkpoint = str(tmp_path / "ck")

    def query(df: DataFrame, *, available_now: bool):
        writer = (
            apply_graph(flow, df, checkpoint_location=checkpoint, partitions=2)
            .writeStream.format("flamestream")
            .option("sink", "files")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", checkpoint)
        )
        if available_now:
            return writer.trigger(availableNow=True).start()
        return writer.trigger(processingTime="0 seconds").start()

    first = query(fronts(spark, folder, stream=True, limit=3), available_now=False)
    state = QueryCheckpoint(checkpoint).graph_url
    stopped_in_flight = False
    for _ in range(600):
        first.awaitTermination(0.5)
        progress = first.lastProgress
        if progress and progress["batchId"] >= 2:
            batch = int(progress["batchId"])
            first.stop()
            stopped_in_flight = bool(AckTable(state).after(batch))
            break
    assert first.exception() is None
    assert stopped_in_flight, "the first run did not stop with items in the loop"
    second = query(fronts(spark, folder, stream=True, limit=3), available_now=True)
    second.awaitTermination(300)
    assert second.exception() is None
    released = sorted((r.sink, r.ts, r.front, r.value) for r in read_rows(tmp_path / "out"))
    want = sorted(
        (s, ts, f, v) for s, ts, f, _, v in expected(flow, read_rows(tmp_path / "fronts"))
    )
    assert released == want


# Kill while items are in the loop: after a task sent some, then after a loop read task
# recorded their receipt (the sink's own points are crash-tested with word count; each child
# run here pays a fresh JVM and a cold first batch, so the chain is short).
LOOP_CRASHES = ["graph.loop.sent:0", "graph.loop.received:2"]


def test_killed_connected_components_recover_to_exactly_the_unbroken_output(
    spark: SparkSession, edge_files: tuple[Path, list[str]], tmp_path: Path
):
    folder, _ = edge_files
    assert reachable_in_turn(LOOP_CRASHES)
    unbroken_work, crashed_work = tmp_path / "unbroken", tmp_path / "crashed"
    for work in (unbroken_work, crashed_work):
        shutil.copytree(folder, work / "in")
    run_unbroken(lambda s: loop_crash_job.start(s, *work_args(unbroken_work)), spark)
    unbroken = released_files(unbroken_work / "out")
    assert len(unbroken) >= 3
    check = released_so_far_is(unbroken, lambda: released_files(crashed_work / "out"))
    run_chain("tests.spark.loop_crash_job", work_args(crashed_work), LOOP_CRASHES, check)
    assert released_files(crashed_work / "out") == unbroken


@pytest.mark.parametrize(
    ("a", "b", "nodes", "limit", "partitions"),
    [((7, 30), (8, 24), 16, 9, 1), ((3, 8), (4, 6), 8, 5, 2)],
)
def test_components_of_a_modest_graph_are_its_union_find(
    spark: SparkSession,
    tmp_path: Path,
    a: tuple[int, int],
    b: tuple[int, int],
    nodes: int,
    limit: int,
    partitions: int,
):
    """The labels Spark releases last per node are an independent union-find's components,
    and every released row is the reference's. The first graph (54 edges over 16 nodes) once
    kept a sink commit busy for minutes: its label waves put hundreds of rows in one global
    time, which the grouping's index and the barrier compared pair by pair."""
    folder = tmp_path / "in"
    first, second = edges(a[0], a[1], nodes), edges(b[0], b[1], nodes)
    write_lines(folder / "a.txt", first)
    write_lines(folder / "b.txt", second)
    released, want = run_graph(
        spark, components(), folder, tmp_path, limit=limit, partitions=partitions
    )
    assert released == want
    assert labels([r.value for r in read_rows(tmp_path / "out")]) == union_find(first + second)


def test_a_cross_key_cycle_finishes_in_one_partition_or_behind_its_loop_gate(
    spark: SparkSession, tmp_path: Path
):
    """54 edges over 16 nodes from the fronts' readers, 3 a batch. Over 2 key partitions the
    label waves cross between batches: new records once started waves while older ones went
    round, which replayed every later node state, again and again (1.7 M rows in one batch's
    loop, no end in 400 s). Now the fronts admit nothing while the loop is busy; by default
    such a cycle runs in one key partition, where the waves go round inside the task."""
    folder = tmp_path / "in"
    lines = edges(7, 27, 16) + edges(8, 27, 16)
    write_lines(folder / "a.txt", lines[:27])
    write_lines(folder / "b.txt", lines[27:])
    to_files(fronts(spark, folder, stream=True, limit=3), tmp_path / "fronts", tmp_path / "ck-f")
    admitted = read_rows(tmp_path / "fronts")
    for partitions in (None, 2):
        work = tmp_path / f"p{partitions}"
        graph = SparkGraph(components(), partitions=partitions)
        reader = (
            spark.readStream.format("flamestream")
            .option("front", "files")
            .option("path", str(folder))
            .option("clock", "logical")
            .option("maxRecordsPerTrigger", 3)
        )
        run_writer(graph.write_stream(reader, checkpoint_location=str(work / "ck")), work / "out")
        assert f"key partitions P = {partitions or 1} " in graph.describe()
        rows = read_rows(work / "out")
        assert labels([r.value for r in rows]) == union_find(lines)
        got = sorted((r.sink, r.ts, r.front, bytes.fromhex(r.trace), r.value) for r in rows)
        assert got == expected(components(), admitted)
        if partitions == 2:  # some batches only took the loop's items: the fronts waited
            assert gated_batches(work / "ck") > 0


def gated_batches(checkpoint: Path) -> int:
    """Batches in which the loop channel moved on and the fronts did not."""
    per_batch = []
    logged = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    for batch in sorted(logged, key=lambda p: int(p.name)):
        lines = [json.loads(x) for x in batch.read_text().splitlines()[2:]]
        front = next(x["fronts"] for x in lines if "front" in x)
        loop = next(x["through"] for x in lines if "flamestreamLoop" in x)
        per_batch.append(([f[2] for f in front], loop))
    return sum(
        1
        for before, now in itertools.pairwise(per_batch)
        if now[0] == before[0] and now[1] != before[1]
    )
