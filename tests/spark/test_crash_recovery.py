"""Kill a running query with SIGKILL at named points, restart it, compare with an unbroken run.

Each case runs the query of :mod:`tests.spark.crash_job` in a child process (its own process
group: the driver, the JVM and the Python workers). ``FLAMESTREAM_CRASH_AT`` makes whichever
process reaches the point kill that whole group. The test checks the child really died by
SIGKILL, restarts it from the same checkpoint, and requires the released files to be
byte-identical to those of the same query never interrupted (run on the test session):
nothing lost, nothing twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream.spark.faults import POINTS

from ..crash import run_chain, run_unbroken
from . import crash_job
from .conftest import write_lines

JOB = "tests.spark.crash_job"
BATCHES = 3


def make_input(folder: Path) -> None:
    write_lines(folder / "a.txt", [f"a{i:02d}" for i in range(12)])
    write_lines(folder / "b.txt", [f"b{i:02d}" for i in range(9)])
    write_lines(folder / "c.txt", [f"c{i:02d}" for i in range(6)], tail="no-newline-yet")


def job_args(work: Path, master: str = "local[2]", release: str = "commit") -> list[str]:
    return [str(work / d) for d in ("in", "out", "ck")] + [master, release]


def outputs(work: Path) -> dict[str, bytes]:
    """Released files by name; the work directory (in each row's source) made neutral."""
    here = str(work).encode()
    return {
        p.name: p.read_bytes().replace(here, b"<work>")
        for p in sorted((work / "out").glob("part-*"))
    }


def unbroken_outputs(spark: SparkSession, work: Path, release: str = "commit") -> dict[str, bytes]:
    """The job's query on ``work``'s copy of the input, run on the test session, uninterrupted."""
    make_input(work / "in")
    source, out, checkpoint = (str(work / d) for d in ("in", "out", "ck"))
    run_unbroken(lambda s: crash_job.start(s, source, out, checkpoint, release), spark)
    return outputs(work)


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    files = unbroken_outputs(spark, tmp_path_factory.mktemp("unbroken"))
    assert len(files) == BATCHES
    lines = b"".join(files.values()).splitlines()
    assert len(lines) == 27 == len(set(lines))
    return files


# Every (point, batch) pair once: chain i crashes batch 0 at point i, then, restarted, batch 1
# at point i + 1, then batch 2 at point i + 2 (three crashes in a row, each restart
# recovering from the previous one). Plus one batch that crashes twice.
CASES = [
    [f"{POINTS[(i + batch) % len(POINTS)]}:{batch}" for batch in range(BATCHES)]
    for i in range(len(POINTS))
] + [["front.read:1", "sink.commit.start:1"]]


def test_the_cases_cover_every_point_at_every_batch():
    pairs = {crash for chain in CASES for crash in chain}
    assert pairs == {f"{p}:{b}" for p in POINTS for b in range(BATCHES)}
    assert len([c for chain in CASES for c in chain]) >= 20


@pytest.mark.parametrize("crashes", CASES, ids=["+".join(c) for c in CASES])
def test_killed_query_recovers_to_exactly_the_unbroken_output(
    crashes: list[str], unbroken: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    run_chain(JOB, job_args(tmp_path), crashes)
    assert outputs(tmp_path) == unbroken


# release=tasks: write tasks release their rows and the commit publishes them; the crashes hit a
# task after writing its part, the commit after publishing, and a replay of a batch whose
# commit was already marked (its tasks' new parts must be discarded).
TASK_RELEASE_CASES = [
    ["sink.write:0", "sink.commit.released:1"],
    ["sink.commit.marked:0", "sink.commit.start:2"],
]


@pytest.fixture(scope="module")
def unbroken_task_release(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, bytes]:
    return unbroken_outputs(spark, tmp_path_factory.mktemp("unbroken-tasks"), "tasks")


def rows_in_time_order(files: dict[str, bytes]) -> list[dict[str, object]]:
    rows = [json.loads(line) for data in files.values() for line in data.splitlines()]
    return sorted(rows, key=lambda r: (r["ts"], r["front"]))


def test_task_release_releases_the_same_rows_each_part_sorted(
    unbroken: dict[str, bytes], unbroken_task_release: dict[str, bytes]
):
    assert rows_in_time_order(unbroken_task_release) == rows_in_time_order(unbroken)
    assert all(name.count("-") == 2 for name in unbroken_task_release)  # part-<batch>-<task>
    for data in unbroken_task_release.values():
        rows = [json.loads(line) for line in data.splitlines()]
        assert rows == sorted(rows, key=lambda r: (r["ts"], r["front"]))


@pytest.mark.parametrize(
    "crashes", TASK_RELEASE_CASES, ids=["+".join(c) for c in TASK_RELEASE_CASES]
)
def test_killed_task_release_query_recovers_to_exactly_the_unbroken_output(
    crashes: list[str], unbroken_task_release: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    run_chain(JOB, job_args(tmp_path, release="tasks"), crashes)
    assert outputs(tmp_path) == unbroken_task_release
    assert not list((tmp_path / "out").glob(".*")), "unpublished parts left behind"
