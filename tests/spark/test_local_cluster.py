"""On local-cluster (separate executor JVMs): kill an executor mid-batch, lose nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flamestream.spark import faults

from ..crash import ROOT
from .test_crash_recovery import make_input, outputs, run_job


def test_an_executor_killed_mid_batch_costs_nothing(tmp_path: Path):
    make_input(tmp_path / "local" / "in")
    assert run_job(tmp_path / "local") == 0  # the same job on local[2], never interrupted
    work = tmp_path / "cluster"
    make_input(work / "in")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMESTREAM_CRASH")}
    env.update(
        {
            "PYSPARK_PYTHON": sys.executable,
            faults.ENV: "sink.write:1",
            faults.SCOPE_ENV: "executor",
            faults.ONCE_ENV: str(tmp_path / "killed-once"),
        }
    )
    args = [str(work / d) for d in ("in", "out", "ck")] + ["local-cluster[2,1,1024]"]
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.crash_job", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    log = done.stderr.decode()
    assert done.returncode == 0, log[-3000:]
    assert (tmp_path / "killed-once").exists()  # the crash point was reached
    assert "Lost executor" in log and "exited with code 137" in log  # by SIGKILL
    assert outputs(work) == outputs(tmp_path / "local")
