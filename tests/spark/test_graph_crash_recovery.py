"""Kill a word count running on Spark (keyed state and all) and restart it: same output.

The child (:mod:`tests.spark.graph_crash_job`) is SIGKILLed at one crash point after another,
each run restarting from its checkpoint, then run to its end; every file released after a
crash, and in the end every released file, must be byte-identical to those of the same query
never interrupted: the grouping's state snapshots, the barrier sink's buffer and Spark's logs
must agree after any of these crashes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from ..crash import (
    reachable_in_turn,
    released_files,
    released_so_far_is,
    run_chain,
    run_unbroken,
    work_args,
)
from . import graph_crash_job
from .conftest import write_lines

JOB = "tests.spark.graph_crash_job"


def make_input(folder: Path) -> None:
    write_lines(folder / "a.txt", ["the cat", "the dog", "a cat and a dog", "the end", "cat"])
    write_lines(folder / "b.txt", ["dog dog", "the bird", "a bird", "bird and cat"])


def narrowed(files: dict[str, bytes], columns: list[str]) -> dict[str, bytes]:
    """JSON-lines files with only ``columns`` of each line (as the sink writes them)."""
    picked = {}
    for name, data in files.items():
        rows = [json.loads(line) for line in data.decode().splitlines()]
        lines = [json.dumps({c: r[c] for c in columns}, separators=(",", ":")) for r in rows]
        picked[name] = ("\n".join(lines) + "\n").encode()
    return picked


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    work = tmp_path_factory.mktemp("unbroken-graph")
    make_input(work / "in")
    run_unbroken(lambda s: graph_crash_job.start(s, *work_args(work)), spark)
    files = released_files(work / "out")
    lines = b"".join(files.values()).decode().splitlines()
    assert len(files) >= 2
    assert sum(1 for line in lines if '"value":"the=' in line) == 4  # every update released
    return files


# Kill after a keyed stage saved its state, in a write task and after the release of the same
# batch, then after a later keyed stage saved its state.
CASES = [
    ["graph.keyed.saved:0", "sink.write:1", "sink.commit.released:1", "graph.keyed.saved:2"],
]


def test_each_crash_comes_later_in_the_run_than_the_one_before():
    assert all(reachable_in_turn(chain) for chain in CASES)


@pytest.mark.parametrize("crashes", CASES, ids=["+".join(c) for c in CASES])
def test_killed_word_count_recovers_to_exactly_the_unbroken_output(
    crashes: list[str], unbroken: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    check = released_so_far_is(unbroken, lambda: released_files(tmp_path / "out"))
    run_chain(JOB, work_args(tmp_path), crashes, check)
    assert released_files(tmp_path / "out") == unbroken


@pytest.fixture(scope="module")
def unbroken_elastic(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, bytes]:
    work = tmp_path_factory.mktemp("unbroken-elastic")
    make_input(work / "in")
    run_unbroken(lambda s: graph_crash_job.start(s, *work_args(work), elastic=True), spark)
    decisions = 0
    for path in (work / "ck" / "offsets").iterdir():
        if path.name.isdigit():
            for line in path.read_text().splitlines()[2:]:
                if '"flamestreamLayout"' in line:
                    decisions = max(decisions, json.loads(line)["decisions"])
    assert decisions >= 1, "the layout never moved: the test would not test moving state"
    return released_files(work / "out")


ELASTIC = ["graph.keyed.saved:1", "sink.commit.released:2"]


def test_killed_elastic_word_count_recovers_to_exactly_the_unbroken_output(
    unbroken: dict[str, bytes], unbroken_elastic: dict[str, bytes], tmp_path: Path
):
    """Key ranges moved between batches, the state per slot: the same bytes as unbroken, and
    the same as the fixed layout's."""
    assert reachable_in_turn(ELASTIC)
    make_input(tmp_path / "in")
    check = released_so_far_is(unbroken_elastic, lambda: released_files(tmp_path / "out"))
    run_chain(JOB, [*work_args(tmp_path), "--elastic"], ELASTIC, check)
    assert released_files(tmp_path / "out") == unbroken_elastic
    assert [json.loads(x)["value"] for x in b"".join(unbroken_elastic.values()).splitlines()] == [
        json.loads(x)["value"] for x in b"".join(unbroken.values()).splitlines()
    ]


def test_killed_word_count_writing_value_and_time_releases_the_same_rows(
    unbroken: dict[str, bytes], tmp_path: Path
):
    """The sink's ``columns=value,time``, killed after a release, before the batch is marked
    done: the restarted query releases the batch again, and its files hold the global time
    and value of every row the full-column run released, byte for byte, nothing else."""
    expected = narrowed(unbroken, ["ts", "front", "value"])
    first = json.loads(next(iter(unbroken.values())).splitlines()[0])
    assert list(first) == ["ts", "front", "trace", "flags", "source", "position", "sink", "value"]
    make_input(tmp_path / "in")
    check = released_so_far_is(expected, lambda: released_files(tmp_path / "out"))
    args = [*work_args(tmp_path), "--columns=value,time"]
    run_chain(JOB, args, ["sink.commit.released:1"], check)
    assert released_files(tmp_path / "out") == expected


def estimates(files: dict[str, bytes]) -> list[tuple[str, dict[str, Any]]]:
    """Every released row's sink and estimate (``render_json``'s object), in release order."""
    rows = [json.loads(line) for line in b"".join(files.values()).splitlines()]
    return [(r["sink"], json.loads(r["value"])) for r in rows]


def sketches_unbroken(spark: SparkSession, work: Path) -> dict[str, bytes]:
    """The approximate aggregations' files, never interrupted, on a fixed layout: each sketch
    left its exact mode (the ``unbroken_sketches`` fixture, shared with the rescale test)."""
    make_input(work / "in")
    run_unbroken(lambda s: graph_crash_job.start(s, *work_args(work), sketched=True), spark)
    files = released_files(work / "out")
    released = estimates(files)
    lines = [line for f in sorted((work / "in").iterdir()) for line in f.read_text().splitlines()]
    letters = sum(len(graph_crash_job.letters(line)) for line in lines)
    per_sink = {sink: [e for s, e in released if s == sink] for sink, _ in released}
    assert {sink: len(e) for sink, e in per_sink.items()} == {
        "hll_out": letters,
        "theta_out": letters,
        "quantiles_out": letters * graph_crash_job.READINGS,
        "hot_out": letters,
    }
    assert all(e["sketch"] for _, e in released)
    # KLL compacted (rank error > 0), frequent items purged (counts off), theta sampled
    assert any(e["approximate"] and e["rank_error"] > 0 for e in per_sink["quantiles_out"])
    assert any(e["max_error"] > 0 for e in per_sink["hot_out"])
    assert any(e["lower"] < e["estimate"] < e["upper"] for e in per_sink["theta_out"])
    assert len(files) >= 2
    return files


SKETCHED = ["graph.keyed.saved:1", "sink.commit.released:2"]


def test_killed_sketches_recover_to_exactly_the_unbroken_output(
    unbroken_sketches: dict[str, bytes], tmp_path: Path
):
    """HLL, theta, KLL (compacting) and frequent items (purging) sketches are keyed state:
    killed after a keyed stage saved them (the batch is folded again, in another process)
    and after a later release, the restarted query's estimates and sketch bytes are the
    unbroken run's, byte for byte."""
    assert reachable_in_turn(SKETCHED)
    make_input(tmp_path / "in")
    check = released_so_far_is(unbroken_sketches, lambda: released_files(tmp_path / "out"))
    run_chain(JOB, [*work_args(tmp_path), "--sketched"], SKETCHED, check)
    assert released_files(tmp_path / "out") == unbroken_sketches


PASSTHROUGH = ["sink.write:1", "sink.commit.released:2"]


def test_killed_passthrough_recovers_to_exactly_the_unbroken_output(
    spark: SparkSession, tmp_path: Path
):
    """The empty graph's blocks, each task releasing its own parts: killed in a write task and
    after a release, the restarted query's files are the unbroken run's, byte for byte, and
    hold every input line once."""
    assert reachable_in_turn(PASSTHROUGH)
    work = tmp_path / "unbroken"
    make_input(work / "in")
    start = graph_crash_job.start
    run_unbroken(lambda s: start(s, *work_args(work), empty=True), spark)
    unbroken = released_files(work / "out")
    rows = [json.loads(x) for x in b"".join(unbroken.values()).splitlines()]
    lines = [
        line
        for name in ("a.txt", "b.txt")
        for line in (work / "in" / name).read_text().splitlines()
    ]
    assert sorted(r["value"] for r in rows) == sorted(lines) and len(unbroken) >= 2
    make_input(tmp_path / "in")
    check = released_so_far_is(unbroken, lambda: released_files(tmp_path / "out"))
    run_chain(JOB, [*work_args(tmp_path), "--empty"], PASSTHROUGH, check)
    assert released_files(tmp_path / "out") == unbroken
