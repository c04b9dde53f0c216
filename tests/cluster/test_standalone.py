"""A graph query on a real ``spark://`` standalone cluster: the reference runtime's rows, even
when a Worker is SIGKILLed mid-run.

The word count of :mod:`tests.cluster.wordcount_job` (a grouping, the barrier sink, three files
fronts read at one shared limit, so each grouping sees the fronts' lines out of global-time
order) runs in a child driver on the session's cluster (:mod:`tests.cluster.conftest`: a Master
and two Workers started through ``spark-class``, one executor on each), twice in one
application. The first run's released files must be byte-identical to those of the same query
on ``local[2]``, whose rows are the reference runtime's on the global times the fronts stamped.
In the second run a task stops at a gate line, the test SIGKILLs the Worker hosting it (its
executor goes with it, the task runs again on the other Worker) and the released files are
still the same bytes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order
from flamestream.testing.standalone import StandaloneCluster, StandaloneClusterError

from ..crash import released_files, run_unbroken, spawn, work_args
from ..spark.conftest import released, write_lines
from . import wordcount_job

JOB = "tests.cluster.wordcount_job"
#: Seconds a child run may take, and to reach the gate line: generous, for a loaded machine.
RUN_TIMEOUT_S = 600
GATE_DEADLINE_S = 480


def make_input(folder: Path) -> None:
    """Three fronts; the gate line is in the middle of the run."""
    write_lines(folder / "a.txt", ["the cat", "the dog", "a cat and a dog", "the end", "cat"])
    write_lines(folder / "b.txt", ["dog dog", "the bird", "a bird", wordcount_job.GATE_LINE])
    write_lines(folder / "b.txt", ["bird and cat", "the gate"])
    write_lines(folder / "c.txt", ["a dog", "the the", "cat bird", "end of it", "dog"])


def outputs(work: Path) -> dict[str, bytes]:
    """Released files by name; the work directory (in each line's source) made neutral."""
    return released_files(work / "out", work)


def reference_rows(work: Path) -> list[tuple[int, int, str]]:
    """Sink ``out``'s (ts, front, value) by the reference runtime, on the stamped lines."""
    rows = released(work / "out")
    per_front: dict[int, list[tuple[int, str]]] = {}
    for row in sorted(
        (r for r in rows if r["sink"] == "lines"), key=lambda r: (r["front"], r["ts"])
    ):
        per_front.setdefault(row["front"], []).append((row["ts"], row["value"]))
    assert len(per_front) == 3 and sum(map(len, per_front.values())) == 16
    result = run_in_order(wordcount_job.word_count(), per_front)
    return [(t.ts, t.front, render_default(payload)) for t, payload in result.timed("out")]


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The query on the test session (local[2]), never interrupted; its rows the reference's."""
    work = tmp_path_factory.mktemp("local")
    make_input(work / "in")
    source, out, checkpoint = work_args(work)
    run_unbroken(lambda s: wordcount_job.start(s, source, out, checkpoint), spark)
    rows = released(work / "out")
    got = [(r["ts"], r["front"], r["value"]) for r in rows if r["sink"] == "out"]
    assert got == reference_rows(work)
    assert len(outputs(work)) >= 4  # several batches, so the gate line is mid-run
    return outputs(work)


def executors_run(cluster: StandaloneCluster, app_since: float) -> list[int]:
    """Per Worker, how many executors it started for applications begun after ``app_since``."""
    counts = []
    for index in range(len(cluster.workers())):
        apps = [
            a
            for a in (cluster.workdir / f"work-{index}").glob("app-*")
            if a.stat().st_mtime >= app_since
        ]
        counts.append(sum(1 for app in apps for e in app.iterdir() if e.is_dir()))
    return counts


@dataclass
class ClusterRuns:
    """One child application on the cluster: an unbroken run, then one losing a Worker."""

    done: subprocess.CompletedProcess[bytes]
    unbroken: Path  #: the first run's work directory
    killed: Path  #: the second run's
    executors: list[int]  #: per Worker, the executors it started for the application
    worker_gone: bool  #: the killed Worker's process had ended when the kill returned
    seen_by_master: str | None  #: the killed Worker's state at the Master after the run
    gate_task_gone: bool  #: the task stopped at the gate line had ended after the run


def run_job(works: list[Path], master: str) -> subprocess.CompletedProcess[bytes]:
    """The child application, one query per work directory (``tests.crash.spawn``'s setup)."""
    return spawn(JOB, [master, *map(str, works)], {}, timeout=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def runs(cluster: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory) -> ClusterRuns:
    """Run the application; SIGKILL the Worker of the task at the gate line in its second run."""
    unbroken, killed = tmp_path_factory.mktemp("cluster"), tmp_path_factory.mktemp("killed")
    for work in (unbroken, killed):
        make_input(work / "in")
    (killed / "gate").mkdir()
    since = time.time()
    with ThreadPoolExecutor(1) as pool:
        child = pool.submit(run_job, [unbroken, killed], cluster.master_url)
        waiting = wait_for_gate(killed / "gate", child)
        began = started_at(waiting)
        index = worker_of(cluster, waiting)
        try:
            cluster.kill_worker(index)
            worker_gone = not cluster.worker_alive(index)
            done = child.result()
            seen_by_master = cluster.worker_state(index)
            executors = executors_run(cluster, since)
        finally:
            cluster.restart_worker(index)
    gate_task_gone = began is not None and started_at(waiting) != began
    return ClusterRuns(
        done, unbroken, killed, executors, worker_gone, seen_by_master, gate_task_gone
    )


def wait_for_gate(gate: Path, child: Future[subprocess.CompletedProcess[bytes]]) -> int:
    """The pid of the Python worker waiting at the gate line."""
    deadline = time.monotonic() + GATE_DEADLINE_S
    while not (gate / "reached").exists():
        if child.done():
            done = child.result()
            raise AssertionError("the job ended before the gate:\n" + done.stderr.decode()[-3000:])
        assert time.monotonic() < deadline, f"no task reached the gate in {GATE_DEADLINE_S} s"
        time.sleep(0.05)
    return int((gate / "reached").read_text())


def started_at(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime


def worker_of(cluster: StandaloneCluster, pid: int) -> int:
    """The index of the Worker whose session (it, its executors and their Python) holds ``pid``."""
    return cluster.workers().index(os.getsid(pid))


def test_word_count_on_the_cluster_releases_the_reference_runtimes_rows(
    runs: ClusterRuns, unbroken: dict[str, bytes]
):
    assert runs.done.returncode == 0, runs.done.stderr.decode()[-3000:]
    assert runs.executors == [1, 1]  # it ran on the cluster, an executor per Worker
    assert outputs(runs.unbroken) == unbroken


def test_a_worker_killed_mid_run_changes_nothing(runs: ClusterRuns, unbroken: dict[str, bytes]):
    log = runs.done.stderr.decode()
    assert runs.done.returncode == 0, log[-3000:]
    assert runs.worker_gone and runs.seen_by_master == "DEAD"
    assert "Lost executor" in log  # the killed Worker's executor, seen by the driver
    assert runs.gate_task_gone  # the task stopped at the gate went with its Worker
    assert outputs(runs.killed) == unbroken


def test_a_worker_that_cannot_start_fails_the_start_with_its_log_and_leaves_nothing():
    before = set(Path(tempfile.gettempdir()).glob("flamestream-standalone-*"))
    cluster = StandaloneCluster(workers=1, worker_memory="0m")  # below Spark's minimum
    with pytest.raises(StandaloneClusterError, match=r"worker-0 \(pid (\d+)\) exited") as failed:
        cluster.start()
    message = str(failed.value)
    assert "--- worker-0 (worker-0.log):" in message and "Memory" in message  # the Worker's log
    assert set(Path(tempfile.gettempdir()).glob("flamestream-standalone-*")) == before
    assert cluster.workers() == []
    with pytest.raises(StandaloneClusterError, match="not started"):
        cluster.master_url  # noqa: B018 - the property raises
