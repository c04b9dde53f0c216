"""The suite's queries start their Python source runners through flamestream-python.

That is the process Spark gives 10 s to connect back (docs/connectors.md, "Running on a
loaded machine"); flamestream-python connects before importing pyspark.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from pyspark_flamestream import FlameStreamDataSource

from .conftest import files_front, write_lines

RUNNER = b"pyspark.sql.streaming.python_streaming_source_runner"


def source_runners(jvm: int) -> dict[int, tuple[list[bytes], str]]:
    """The streaming source runners the JVM ``jvm`` started: pid -> (command line, maps).

    Its children only: other Spark jobs on the machine start runners of their own, some with
    a plain Python on purpose.
    """
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if RUNNER in cmdline and _parent(proc) == jvm:
                found[int(proc.name)] = (cmdline, (proc / "maps").read_text())
        except OSError:  # gone, or not a process
            continue
    return found


def _parent(proc: Path) -> int:
    # the field after the command name, which may hold spaces: state, then the parent's pid
    return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])


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
        jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
        return source_runners(jvm)
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

    from flamestream.spark.exec.worker.worker_setup import setup_worker

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

    from flamestream.spark.exec.worker.worker_setup import setup_worker

    assert "ARROW_DEFAULT_MEMORY_POOL" not in os.environ  # else the user's pool is kept
    effects = spark.sparkContext.parallelize([0], 1).mapPartitions(_setup_effects).collect()
    frozen_before, _, frozen_after, pool_after = effects
    assert frozen_after > max(frozen_before, 10_000)  # pyspark and flamestream: ~100,000
    assert pool_after == "jemalloc"
    here = (gc.get_freeze_count(), pa.default_memory_pool().backend_name)
    setup_worker()
    assert (gc.get_freeze_count(), pa.default_memory_pool().backend_name) == here


@contextlib.contextmanager
def jvm_stderr(spark: SparkSession, path: Path) -> Iterator[None]:
    """The Spark JVM's ``System.err`` goes to ``path`` meanwhile: so does the stderr of every
    Python process Spark starts then (``PythonWorkerFactory`` copies a new process's output to
    the ``System.err`` of that moment)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    system = jvm.java.lang.System
    before = system.err
    stream = jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(str(path)), True)
    system.setErr(stream)
    try:
        yield
    finally:
        system.setErr(before)  # left open: processes started meanwhile may still write to it


def run_generator(spark: SparkSession, checkpoint: Path) -> int:
    """A generator -> noop query of four batches, to its end; how many batches it ran."""
    query = (
        spark.readStream.format("flamestream")
        .option("front", "generator")
        .option("rowsPerSecond", 0)
        .option("totalRows", 40)
        .option("maxRecordsPerTrigger", 10)
        .option("clock", "logical")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the generator query did not finish"
    assert query.exception() is None
    return sum(1 for progress in query.recentProgress if progress["numInputRows"])


def test_a_query_s_source_runner_warns_once_when_not_started_by_the_launcher(
    spark: SparkSession, tmp_path: Path
):
    """Users who set up Spark themselves hear about the slow start from each query.

    The suite's session starts runners through the launcher: no warning. A session whose
    ``format("flamestream")`` is registered while the SparkContext names a plain Python (a
    registered source's processes run with ``SparkContext.pythonExec``) gets one per query,
    however many batches it runs, on the JVM's stderr: where the driver's user sees it.
    """
    slow = spark.newSession()  # its own data source registry, the same JVM
    context = spark.sparkContext
    fast_python = context.pythonExec
    context.pythonExec = sys.executable
    try:
        slow.dataSource.register(FlameStreamDataSource)
    finally:
        context.pythonExec = fast_python
    log = tmp_path / "jvm-stderr.txt"
    marker = "this query's source runner runs in a plain Python"
    with jvm_stderr(spark, log):
        assert run_generator(spark, tmp_path / "fast") == 4
        assert run_generator(slow, tmp_path / "slow") == 4
        deadline = time.monotonic() + 60  # the JVM copies the runner's stderr in a thread
        while marker not in log.read_text():
            assert time.monotonic() < deadline, f"no warning on the JVM's stderr: {log.read_text()}"
            time.sleep(0.1)
    text = log.read_text()
    assert text.count(marker) == 1, text  # the slow query's, once; none for the fast one
    assert f"({sys.executable}), not flamestream-python" in text
    assert "flamestream.configure(SparkSession.builder)" in text
