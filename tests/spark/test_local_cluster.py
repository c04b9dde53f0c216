"""On local-cluster (separate executor JVMs): kill an executor mid-batch, lose nothing."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from flamestream.spark.connector import faults

from ..crash import spawn
from .test_crash_recovery import JOB, job_args, make_input, outputs, unbroken_outputs


def test_an_executor_killed_mid_batch_costs_nothing(spark: SparkSession, tmp_path: Path):
    unbroken = unbroken_outputs(spark, tmp_path / "local")  # the same job on local[2]
    work = tmp_path / "cluster"
    make_input(work / "in")
    crash = {
        faults.ENV: "sink.write:1",
        faults.SCOPE_ENV: "executor",
        faults.ONCE_ENV: str(tmp_path / "killed-once"),
    }
    done = spawn(JOB, job_args(work, "local-cluster[2,1,1024]"), crash, timeout=600)
    log = done.stderr.decode()
    assert done.returncode == 0, log[-3000:]
    assert (tmp_path / "killed-once").exists()  # the crash point was reached
    assert "Lost executor" in log and "exited with code 137" in log  # by SIGKILL
    assert outputs(work) == unbroken
