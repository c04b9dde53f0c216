"""The suite's queries start their Python source runners through flamestream-python.

That is the process Spark gives 10 s to connect back (docs/connectors.md, "Running on a
loaded machine"); flamestream-python connects before importing pyspark.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pyspark.sql import SparkSession

from .conftest import files_front, write_lines

RUNNER = b"pyspark.sql.streaming.python_streaming_source_runner"


def source_runners() -> dict[int, tuple[list[bytes], str]]:
    """The streaming source runner processes on this machine: pid -> (command line, maps)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if RUNNER in cmdline:
                found[int(proc.name)] = (cmdline, (proc / "maps").read_text())
        except OSError:  # gone, or not a process
            continue
    return found


def run_until_progress(
    spark: SparkSession, tmp_path: Path, name: str
) -> dict[int, tuple[list[bytes], str]]:
    """Run a files -> files query until its first progress; the source runners seen then."""
    write_lines(tmp_path / name / "in" / "a.txt", ["a", "b"])
    query = (
        files_front(spark, tmp_path / name / "in")
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(tmp_path / name / "out"))
        .option("checkpointLocation", str(tmp_path / name / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while query.lastProgress is None and time.monotonic() < deadline:
            assert query.exception() is None
            time.sleep(0.2)
        assert query.lastProgress is not None, "the query made no progress"
        return source_runners()
    finally:
        query.stop()


def test_a_query_s_source_runner_is_started_through_the_launcher(
    spark: SparkSession, tmp_path: Path
):
    runners = run_until_progress(spark, tmp_path, "q")
    assert runners, "no streaming source runner process while the query ran"
    for cmdline, _ in runners.values():
        assert any(part.endswith(b"/flamestream-python") for part in cmdline), cmdline


def test_a_query_s_source_runner_runs_in_a_warm_child(spark: SparkSession, tmp_path: Path):
    """Once this JVM's warm server listens, the runner is forked from it: the process Spark
    started (the launcher) never loads pyspark's or the connector's libraries itself."""
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    root = Path(os.environ.get("TMPDIR") or "/tmp") / f"flamestream-warm-{os.getuid()}"  # noqa: S108
    earlier = set(run_until_progress(spark, tmp_path, "first"))  # its processes start the server
    deadline = time.monotonic() + 120
    while not list(root.glob(f"{jvm}-*.sock")):
        assert time.monotonic() < deadline, f"no warm server for JVM {jvm} in {root}"
        time.sleep(0.2)
    runners = run_until_progress(spark, tmp_path, "second")
    new = {pid: maps for pid, (_, maps) in runners.items() if pid not in earlier}
    assert new, "no new streaming source runner process while the query ran"
    for pid, maps in new.items():
        assert "libarrow" not in maps, f"runner {pid} loaded pyarrow itself: it started cold"


def _setup_effects(_: object) -> list[object]:
    import gc

    import pyarrow as pa

    from flamestream.spark.exec.worker_setup import setup_worker

    before = (gc.get_freeze_count(), pa.default_memory_pool().backend_name)
    setup_worker()
    setup_worker()  # once per worker: the second call changes nothing
    return [*before, gc.get_freeze_count(), pa.default_memory_pool().backend_name]


def test_a_worker_sets_up_at_its_first_task_and_a_driver_never(spark: SparkSession):
    """In a Spark task, ``setup_worker`` moves the worker's objects (modules, pyspark) out of
    the collector's way and makes jemalloc Arrow's pool; outside a task (here: the test's
    own process) it does nothing."""
    import gc

    import pyarrow as pa

    from flamestream.spark.exec.worker_setup import setup_worker

    assert "ARROW_DEFAULT_MEMORY_POOL" not in os.environ  # else the user's pool is kept
    effects = spark.sparkContext.parallelize([0], 1).mapPartitions(_setup_effects).collect()
    frozen_before, _, frozen_after, pool_after = effects
    assert frozen_after > max(frozen_before, 10_000)  # pyspark and flamestream: ~100,000
    assert pool_after == "jemalloc"
    here = (gc.get_freeze_count(), pa.default_memory_pool().backend_name)
    setup_worker()
    assert (gc.get_freeze_count(), pa.default_memory_pool().backend_name) == here
