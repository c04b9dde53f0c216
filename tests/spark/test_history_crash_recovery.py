"""Kill a history-then-live word count in the backfill, at the switch and after it: same output.

Every file released after a crash, and in the end every released file, must be byte-identical
to those of the same query never interrupted; and a restart after the switch never reads the
history again (it may even be gone).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ..crash import (
    reachable_in_turn,
    released_files,
    released_so_far_is,
    run_chain,
    run_unbroken,
)
from . import history_crash_job
from .test_history_then_live import offsets, position_case

JOB = "tests.spark.history_crash_job"
#: The batch that switches (two backfill batches of at most three records before it).
SWITCH = 2


def job_args(work: Path) -> list[str]:
    return [str(work / d) for d in ("history", "live", "out", "ck")]


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    work = tmp_path_factory.mktemp("unbroken-history")
    position_case(work, archived=5)
    run_unbroken(lambda s: history_crash_job.start(s, *job_args(work)), spark)
    phases = [o["history"]["phase"] for o in offsets(work / "ck")]
    assert phases.index("live") == SWITCH
    files = released_files(work / "out")
    lines = b"".join(files.values()).decode().splitlines()
    assert sum(1 for line in lines if '"value":"the=' in line) == 4  # every update released
    return files


# A backfill batch's keyed state, the switch's planning, a live batch's write; the history is
# deleted after the last crash: the run that finishes never reads it
CASES = [["graph.keyed.saved:1", f"front.plan:{SWITCH}", f"sink.write:{SWITCH + 1}"]]


def test_each_crash_comes_later_in_the_run_than_the_one_before():
    assert all(reachable_in_turn(chain) for chain in CASES)


@pytest.mark.parametrize("crashes", CASES, ids=["+".join(c) for c in CASES])
def test_killed_backfill_and_switch_recover_to_exactly_the_unbroken_output(
    crashes: list[str], unbroken: dict[str, bytes], tmp_path: Path
):
    position_case(tmp_path, archived=5)
    same = released_so_far_is(unbroken, lambda: released_files(tmp_path / "out"))

    def check(crash: str) -> None:
        same(crash)
        if crash == crashes[-1]:  # past the switch: the history is not read again
            shutil.rmtree(tmp_path / "history")

    run_chain(JOB, job_args(tmp_path), crashes, check)
    assert released_files(tmp_path / "out") == unbroken
    assert not (tmp_path / "history").exists()
