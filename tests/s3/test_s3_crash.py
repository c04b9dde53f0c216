"""SIGKILL a query whose checkpoint and output live on S3, restart it: exactly the same output.

The children of :mod:`tests.s3.s3_job` run the crash tests' queries with Spark's checkpoint on
``s3a://`` and flamestream's stores and output on ``s3://`` (SeaweedFS), killed at one crash
point after another (:mod:`flamestream.spark.connector.faults`), each run restarting from the
checkpoint the last one left, then run to its end. Every file released by then must be
byte-identical to an unbroken run's (nothing lost, nothing twice), and no temporary object
may be left in the output or the checkpoint.

On S3 ``fs.mv`` is a copy and a delete, not an atomic rename: a crash between the two, or
during the copy, is what these chains put to the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ..crash import reachable_in_turn, released_so_far_is, run_chain, spawn
from ..spark.test_crash_recovery import unbroken_outputs
from .helpers import JOB, BucketRun, make_files_input, make_graph_input, upload

# A keyed stage's snapshot written, a write task's staging, the release done but not marked.
GRAPH = ["graph.keyed.saved:0", "sink.write:1", "sink.commit.released:2"]
# release=tasks: hidden parts written by a task, then renamed by the commit (copied on S3).
FILES = ["sink.write:0", "sink.commit.published:1", "sink.commit.released:2"]


def test_each_crash_comes_later_in_the_run_than_the_one_before():
    assert reachable_in_turn(GRAPH)
    assert reachable_in_turn(FILES)


def test_killed_word_count_on_s3_recovers_to_exactly_the_unbroken_output(
    graph_on_s3: BucketRun, run: BucketRun, tmp_path: Path
):
    make_graph_input(tmp_path)
    upload(run.fs, tmp_path, run.bucket)
    unbroken = graph_on_s3.outputs()
    run_chain(JOB, ["graph", *run.urls()], GRAPH, released_so_far_is(unbroken, run.outputs))
    assert run.outputs() == unbroken
    assert run.leftovers() == []


@pytest.fixture(scope="module")
def unbroken_tasks(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, bytes]:
    """The passthrough with ``release=tasks`` on local disk, never interrupted."""
    files = unbroken_outputs(spark, tmp_path_factory.mktemp("unbroken-tasks"), "tasks")
    assert len(b"".join(files.values()).splitlines()) == 27
    return files


def test_killed_task_release_on_s3_recovers_to_exactly_the_unbroken_output(
    unbroken_tasks: dict[str, bytes], run: BucketRun, tmp_path: Path
):
    """Each write task writes its own part under a hidden name, the commit renames it."""
    make_files_input(tmp_path)
    upload(run.fs, tmp_path, run.bucket)
    args = ["files", *run.urls(), "tasks"]
    released = released_so_far_is(unbroken_tasks, run.outputs)

    def after_crash(crash: str) -> None:
        released(crash)
        # the log names whole committed batches only: none of the batch the crash cut
        batch = int(crash.rsplit(":", 1)[1])
        assert all(int(uri.rsplit("/part-", 1)[1][:12]) < batch for uri in run.logged()), crash

    run_chain(JOB, args, FILES, after_crash)
    assert run.outputs() == unbroken_tasks
    assert run.leftovers() == []
    # the log names every released file by its s3a:// URI, and Spark reads exactly them
    out = run.urls()[1]
    assert run.logged() == sorted(f"{out}/{name}" for name in run.outputs())
    done = spawn(JOB, ["read", out], {})
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    (result,) = [line for line in done.stdout.decode().splitlines() if line.startswith("RESULT ")]
    lines = sorted(line for data in run.outputs().values() for line in data.decode().splitlines())
    read = [line.replace(f"{run.bucket}/in", "<work>/in") for line in json.loads(result[7:])]
    assert sorted(read) == lines
