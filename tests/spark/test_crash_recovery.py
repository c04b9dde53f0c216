"""Kill a running query with SIGKILL at named points, restart it, compare with an unbroken run.

Each case runs the query of :mod:`tests.spark.crash_job` in a child process (its own process
group: the driver, the JVM and the Python workers). ``FLAMESTREAM_CRASH_AT`` makes whichever
process reaches the point kill that whole group. The test checks the child really died by
SIGKILL, restarts it from the same checkpoint, and requires the released files to be
byte-identical to those of a run that was never interrupted: nothing lost, nothing twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flamestream.spark.faults import ENV, POINTS

from .conftest import write_lines

ROOT = Path(__file__).resolve().parents[2]
BATCHES = 3


def make_input(folder: Path) -> None:
    write_lines(folder / "a.txt", [f"a{i:02d}" for i in range(12)])
    write_lines(folder / "b.txt", [f"b{i:02d}" for i in range(9)])
    write_lines(folder / "c.txt", [f"c{i:02d}" for i in range(6)], tail="no-newline-yet")


def run_job(work: Path, crash_at: str | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYSPARK_PYTHON"] = sys.executable
    if crash_at:
        env[ENV] = crash_at
    args = [str(work / d) for d in ("in", "out", "ck")]
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.crash_job", *args],
        cwd=ROOT,
        env=env,
        start_new_session=True,  # the crash kills this group, never the test runner
        capture_output=True,
        timeout=300,
        check=False,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(done.stderr.decode()[-3000:])
    return done.returncode


def outputs(work: Path) -> dict[str, bytes]:
    """Released files by name; the work directory (in each row's source) made neutral."""
    here = str(work).encode()
    return {
        p.name: p.read_bytes().replace(here, b"<work>")
        for p in sorted((work / "out").glob("part-*"))
    }


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    work = tmp_path_factory.mktemp("unbroken")
    make_input(work / "in")
    assert run_job(work) == 0
    files = outputs(work)
    assert len(files) == BATCHES
    lines = b"".join(files.values()).splitlines()
    assert len(lines) == 27 == len(set(lines))
    return files


CASES = [[f"{point}:{batch}"] for point in POINTS for batch in range(BATCHES)] + [
    ["sink.commit.released:0", "sink.commit.marked:1"],  # two crashes in a row
    ["front.read:1", "sink.commit.start:1"],  # the same batch crashes twice
]


@pytest.mark.parametrize("crashes", CASES, ids=["+".join(c) for c in CASES])
def test_killed_query_recovers_to_exactly_the_unbroken_output(
    crashes: list[str], unbroken: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    for crash in crashes:
        assert run_job(tmp_path, crash) == -signal.SIGKILL, f"{crash} was never reached"
    assert run_job(tmp_path) == 0
    assert outputs(tmp_path) == unbroken
