"""The suite's queries start their Python source runners through flamestream-python.

That is the process Spark gives 10 s to connect back (docs/connectors.md, "Running on a
loaded machine"); flamestream-python connects before importing pyspark.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import SparkSession

from .conftest import files_front, write_lines

RUNNER = b"pyspark.sql.streaming.python_streaming_source_runner"


def source_runners() -> list[list[bytes]]:
    """The command lines of the streaming source runner processes on this machine."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone, or not a process
            continue
        if RUNNER in cmdline:
            found.append(cmdline)
    return found


def test_a_query_s_source_runner_is_started_through_the_launcher(
    spark: SparkSession, tmp_path: Path
):
    write_lines(tmp_path / "in" / "a.txt", ["a", "b"])
    query = (
        files_front(spark, tmp_path / "in")
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while query.lastProgress is None and time.monotonic() < deadline:
            assert query.exception() is None
            time.sleep(0.2)
        assert query.lastProgress is not None, "the query made no progress"
        runners = source_runners()
    finally:
        query.stop()
    assert runners, "no streaming source runner process while the query ran"
    for cmdline in runners:
        assert any(part.endswith(b"/flamestream-python") for part in cmdline), cmdline


def _freeze_count(_: object) -> list[int]:
    import gc

    from flamestream.spark.exec.gc_pause import freeze_worker

    before = gc.get_freeze_count()
    freeze_worker()
    freeze_worker()  # once per worker: the second call changes nothing
    return [before, gc.get_freeze_count()]


def test_a_worker_freezes_what_it_holds_at_its_first_task_and_a_driver_never(
    spark: SparkSession,
):
    """In a Spark task, ``freeze_worker`` moves the worker's objects (modules, pyspark) out
    of the collector's way; outside a task (here: the test's own process) it does nothing."""
    import gc

    from flamestream.spark.exec.gc_pause import freeze_worker

    counts = spark.sparkContext.parallelize([0], 1).mapPartitions(_freeze_count).collect()
    before, after = counts
    assert after > max(before, 10_000)  # pyspark and flamestream alone are ~100,000 objects
    here = gc.get_freeze_count()
    freeze_worker()
    assert gc.get_freeze_count() == here
