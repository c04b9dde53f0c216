"""A graph query on a real ``spark://`` standalone cluster: the reference runtime's rows, even
when a Worker is SIGKILLed mid-run.

The word count of :mod:`tests.cluster.wordcount_job` (a grouping, the barrier sink, three files
fronts read at one shared limit, so each grouping sees the fronts' lines out of global-time
order) runs as a child driver on the session's cluster (:mod:`tests.cluster.conftest`: a Master
and two Workers started through ``spark-class``, one executor on each). Its released files must
be byte-identical to those of the same query on ``local[2]``, whose rows are the reference
runtime's on the global times the fronts stamped. Then a task of the same query stops at a gate
line, the test SIGKILLs the Worker hosting it (its executor goes with it, the task runs again
on the other Worker) and the released files are still the same bytes.
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream.spark.exec.stateless import render_default
from flamestream.testing import run_in_order
from flamestream.testing.standalone import StandaloneCluster

from ..crash import run_unbroken, spawn
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


def job_args(work: Path, master: str) -> list[str]:
    return [master, *(str(work / d) for d in ("in", "out", "ck"))]


def outputs(work: Path) -> dict[str, bytes]:
    """Released files by name; the work directory (in each line's source) made neutral."""
    here = str(work).encode()
    return {
        p.name: p.read_bytes().replace(here, b"<work>")
        for p in sorted((work / "out").glob("part-*"))
    }


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
    source, out, checkpoint = (str(work / d) for d in ("in", "out", "ck"))
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


def test_word_count_on_the_cluster_releases_the_reference_runtimes_rows(
    cluster: StandaloneCluster, unbroken: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    since = time.time()
    done = spawn(JOB, job_args(tmp_path, cluster.master_url), {}, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert executors_run(cluster, since) == [1, 1]  # it ran on the cluster, an executor per Worker
    assert outputs(tmp_path) == unbroken


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


def test_a_worker_killed_mid_run_changes_nothing(
    cluster: StandaloneCluster, unbroken: dict[str, bytes], tmp_path: Path
):
    make_input(tmp_path / "in")
    gate = tmp_path / "gate"
    gate.mkdir()
    with ThreadPoolExecutor(1) as pool:
        child = pool.submit(
            spawn, JOB, [*job_args(tmp_path, cluster.master_url), str(gate)], {}, RUN_TIMEOUT_S
        )
        waiting = wait_for_gate(gate, child)
        began = started_at(waiting)
        index = worker_of(cluster, waiting)
        try:
            cluster.kill_worker(index)
            killed = not cluster.worker_alive(index)
            done = child.result()
            seen_by_master = cluster.worker_state(index)
        finally:
            cluster.restart_worker(index)
    log = done.stderr.decode()
    assert done.returncode == 0, log[-3000:]
    assert killed and seen_by_master == "DEAD"
    assert "Lost executor" in log  # the killed Worker's executor, seen by the driver
    assert started_at(waiting) != began  # the task stopped at the gate went with its Worker
    assert outputs(tmp_path) == unbroken
