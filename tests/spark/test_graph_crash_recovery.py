"""Kill a word count running on Spark (keyed state and all) and restart it: same output.

The child (:mod:`tests.spark.graph_crash_job`) is SIGKILLed at one crash point after another,
each run restarting from its checkpoint, then run to its end; every file released after a
crash, and in the end every released file, must be byte-identical to those of the same query
never interrupted: the grouping's state snapshots, the barrier sink's buffer and Spark's logs
must agree after any of these crashes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ..crash import reachable_in_turn, released_so_far_is, run_chain, run_unbroken
from . import graph_crash_job
from .conftest import write_lines

JOB = "tests.spark.graph_crash_job"


def make_input(folder: Path) -> None:
    write_lines(folder / "a.txt", ["the cat", "the dog", "a cat and a dog", "the end", "cat"])
    write_lines(folder / "b.txt", ["dog dog", "the bird", "a bird", "bird and cat"])


def job_args(work: Path) -> list[str]:
    return [str(work / d) for d in ("in", "out", "ck")]


def outputs(work: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((work / "out").glob("part-*"))}


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    work = tmp_path_factory.mktemp("unbroken-graph")
    make_input(work / "in")
    run_unbroken(lambda s: graph_crash_job.start(s, *job_args(work)), spark)
    files = outputs(work)
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
    check = released_so_far_is(unbroken, lambda: outputs(tmp_path))
    run_chain(JOB, job_args(tmp_path), crashes, check)
    assert outputs(tmp_path) == unbroken
