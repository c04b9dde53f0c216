"""Kill a running query with SIGKILL at named points, restart it, compare with an unbroken run.

Each chain runs the query of :mod:`tests.spark.crash_job` in a child process (its own process
group: the driver, the JVM and the Python workers) with one checkpoint: killed at one crash
point after another, each run restarting from the last crash, then run to its end.
``FLAMESTREAM_CRASH_AT`` makes whichever process reaches the point kill that whole group. The
test checks each child really died by SIGKILL, that every file released by then is
byte-identical to the unbroken run's, and that the final released files are byte-identical to
those of the same query never interrupted: nothing lost, nothing twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream.spark.connector.faults import POINTS

from ..crash import (
    reachable_in_turn,
    released_files,
    released_so_far_is,
    run_chain,
    run_unbroken,
    work_args,
)
from . import crash_job
from .conftest import write_lines

JOB = "tests.spark.crash_job"
BATCHES = 3


def make_input(folder: Path) -> None:
    write_lines(folder / "a.txt", [f"a{i:02d}" for i in range(12)])
    write_lines(folder / "b.txt", [f"b{i:02d}" for i in range(9)])
    write_lines(folder / "c.txt", [f"c{i:02d}" for i in range(6)], tail="no-newline-yet")


def job_args(work: Path, master: str = "local[2]", release: str = "commit") -> list[str]:
    return work_args(work, release, f"--master={master}")


def outputs(work: Path) -> dict[str, bytes]:
    """Released files by name; the work directory (in each row's source) made neutral."""
    return released_files(work / "out", work)


def unbroken_outputs(spark: SparkSession, work: Path, release: str = "commit") -> dict[str, bytes]:
    """The job's query on ``work``'s copy of the input, run on the test session, uninterrupted."""
    make_input(work / "in")
    source, out, checkpoint = work_args(work)
    run_unbroken(lambda s: crash_job.start(s, source, out, checkpoint, release), spark)
    return outputs(work)


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    files = unbroken_outputs(spark, tmp_path_factory.mktemp("unbroken"))
    assert len(files) == BATCHES
    lines = b"".join(files.values()).splitlines()
    assert len(lines) == 27 == len(set(lines))
    return files


# Every (point, batch) pair once, in two chains of nine crashes, each in the order a run reaches
# them: one chain crashes batch 0 at the first three POINTS, batch 1 at the last three and
# batch 2 at the first three again; the other chain the other way round. Every batch crashes
# three times in a row, at a later point each time, each restart recovering from the previous
# crash.
FIRST, SECOND = POINTS[:3], POINTS[3:]
CASES = [
    [f"{point}:{batch}" for batch, points in enumerate(halves) for point in points]
    for halves in ((FIRST, SECOND, FIRST), (SECOND, FIRST, SECOND))
]


def test_the_chains_cover_every_point_at_every_batch_each_crash_reachable():
    crashes = [crash for chain in CASES for crash in chain]
    assert sorted(crashes) == sorted(f"{p}:{b}" for p in POINTS for b in range(BATCHES))
    assert all(reachable_in_turn(chain) for chain in CASES)
    assert all(reachable_in_turn(chain) for chain in TASK_RELEASE_CASES)
    assert not reachable_in_turn(["sink.commit.marked:0", "sink.commit.released:0"])


@pytest.mark.parametrize("crashes", CASES, ids=[f"chain{i}" for i in range(len(CASES))])
def test_killed_query_recovers_to_exactly_the_unbroken_output(
    crashes: list[str], unbroken: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    check = released_so_far_is(unbroken, lambda: outputs(tmp_path))
    run_chain(JOB, job_args(tmp_path), crashes, check)
    assert outputs(tmp_path) == unbroken


# release=tasks: write tasks release their rows and the commit publishes them; the crashes hit a
# task after writing its part, a replay of a batch whose commit was already marked (its tasks'
# new parts must be discarded), the commit after publishing, and the commit's start.
TASK_RELEASE_CASES = [
    ["sink.write:0", "sink.commit.marked:0", "sink.commit.released:1", "sink.commit.start:2"],
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
    # tasks release part-<batch>-<task>; with clock=logical each front reports its own next
    # ts, so rows above a shorter front's report wait for a later commit (part-<batch>)
    assert any(name.count("-") == 2 for name in unbroken_task_release)  # part-<batch>-<task>
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
    check = released_so_far_is(unbroken_task_release, lambda: outputs(tmp_path))
    run_chain(JOB, job_args(tmp_path, release="tasks"), crashes, check)
    assert outputs(tmp_path) == unbroken_task_release
    assert not list((tmp_path / "out").glob(".*")), "unpublished parts left behind"
