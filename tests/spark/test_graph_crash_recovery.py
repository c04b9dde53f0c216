"""Kill a word count running on Spark (keyed state and all) and restart it: same output.

The child (:mod:`tests.spark.graph_crash_job`) is SIGKILLed at a crash point, restarted from
its checkpoint until it finishes, and its released files must be byte-identical to those of
an unbroken run: the grouping's state snapshots, the barrier sink's buffer and Spark's logs
must agree after any of these crashes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ..crash import run_chain, run_unbroken
from . import graph_crash_job
from .conftest import write_lines


def make_input(folder: Path) -> None:
    write_lines(folder / "a.txt", ["the cat", "the dog", "a cat and a dog", "the end", "cat"])
    write_lines(folder / "b.txt", ["dog dog", "the bird", "a bird", "bird and cat"])


JOB = "tests.spark.graph_crash_job"


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


CASES = [
    ["graph.keyed.saved:0", "sink.commit.released:1"],
    ["sink.write:1", "graph.keyed.saved:2"],
]


@pytest.mark.parametrize("crashes", CASES, ids=["+".join(c) for c in CASES])
def test_killed_word_count_recovers_to_exactly_the_unbroken_output(
    crashes: list[str], unbroken: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    run_chain(JOB, job_args(tmp_path), crashes)
    assert outputs(tmp_path) == unbroken
