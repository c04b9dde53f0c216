"""A driver that records its application's executors as the shim's listener sees them.

    python -m tests.cluster.executors_job <master> <work dir> [static|dynamic]

Starts a session with flamestream's plugin (``flamestream.configure``) on ``master``
(``local[N]`` or ``spark://``; ``dynamic``: Spark's dynamic allocation on a standalone
cluster, executors asked for when tasks wait and removed after 2 s idle). Then, until
``<work>/stop`` exists, every 50 ms: asks the shim's endpoint for the executors the way the
driver host's source processes do (``cluster_executors``: the rendezvous file, no session) and
appends each change to ``<work>/seen.jsonl``; and when ``<work>/job`` exists, removes it and
starts a job of four tasks that wait until ``<work>/release`` exists (no shuffle: dynamic
allocation may remove an idle executor at once), and writes ``<work>/job-done`` when it ends.
``<work>/ready`` is written once the session runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from flamestream.jvm import Shim, cluster_executors
from flamestream.testing.standalone import app_conf

from ..sessions import local_session

POLL_S = 0.05
#: A task waits this long at most for the release file.
TASK_WAIT_S = 120.0
#: Without a stop file for this long the driver ends anyway (a test that died).
LIFETIME_S = 600.0


def conf(master: str, mode: str) -> dict[str, str]:
    """The session's settings besides configure's: the cluster's or dynamic allocation's."""
    settings: dict[str, str] = {}
    if master.startswith("spark://"):
        settings |= app_conf(executor_memory="512m", executors=8)
        settings["spark.scheduler.minRegisteredResourcesRatio"] = "0"  # start with any executor
    if mode == "dynamic":
        settings |= {
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true",
            "spark.dynamicAllocation.minExecutors": "0",
            "spark.dynamicAllocation.initialExecutors": "0",
            "spark.dynamicAllocation.maxExecutors": "2",
            "spark.dynamicAllocation.executorIdleTimeout": "2s",
            "spark.dynamicAllocation.schedulerBacklogTimeout": "1s",
        }
    return settings


def gated(release: str) -> Callable[[int], int]:
    """One task's work: wait until ``release`` exists (at most ``TASK_WAIT_S``)."""

    def task(index: int) -> int:
        deadline = time.monotonic() + TASK_WAIT_S
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
        return index

    return task


def main(master: str, work: str, mode: str = "static") -> None:
    """Record the executors until told to stop (see the module doc)."""
    folder = Path(work)
    spark: SparkSession = local_session(master, conf(master, mode))
    shim = Shim.of_session(spark)
    assert shim is not None, "the plugin did not start"
    seen = folder / "seen.jsonl"
    (folder / "ready").write_text(spark.sparkContext.applicationId)
    last: dict[str, object] | None = None
    deadline = time.monotonic() + LIFETIME_S
    while not (folder / "stop").exists() and time.monotonic() < deadline:
        now = cluster_executors(Shim.find(",".join(shim_dirs(spark))))
        view = None if now is None else {**now.as_dict(), "hosts": [list(h) for h in now.hosts]}
        if view != last:
            with seen.open("a") as out:
                out.write(json.dumps({"t": time.time(), **(view or {"none": True})}) + "\n")
            last = view
        if (folder / "job").exists():
            (folder / "job").unlink()
            threading.Thread(target=run_job, args=(spark, folder), daemon=True).start()
        time.sleep(POLL_S)
    spark.stop()


def run_job(spark: SparkSession, folder: Path) -> None:
    """Four tasks held until ``<work>/release`` (in a thread: executors are recorded meanwhile)."""
    task = gated(str(folder / "release"))
    spark.sparkContext.parallelize(range(4), 4).map(task).collect()
    (folder / "job-done").write_text("")


def shim_dirs(spark: SparkSession) -> list[str]:
    """Where the plugin wrote its rendezvous file (a source process's ``SPARK_LOCAL_DIRS``)."""
    dirs = spark.sparkContext._jvm.io.flamestream.shim.FlameStreamPlugin.rendezvousDirs()  # type: ignore[union-attr]
    return str(dirs).split(",")


if __name__ == "__main__":
    main(*sys.argv[1:])
