"""Spark started with exactly ``conf/spark-defaults.conf``: the shim's plugin, listeners,
metrics and ``spark.flamestream.*`` defaults work with no registration code.

One child driver (``shim_job.py``) runs every query, since the conf directory is read when a
driver JVM starts and the tests' shared session has started without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest

from flamestream.jvm import SHIM_VERSION, ShimError, check_jar, locate_jar
from flamestream.python_env import worker_python

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = dict(os.environ, SPARK_CONF_DIR=str(ROOT / "conf"), PYSPARK_PYTHON=worker_python())
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.shim_job", str(tmp_path_factory.mktemp("shim"))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def test_the_plugin_and_listeners_run_from_the_conf_file(result: dict[str, Any]) -> None:
    hello = result["hello"]
    assert hello["shim"] == SHIM_VERSION and hello["spark"] == pyspark.__version__
    assert hello["taskListener"] and hello["progressListener"]
    assert result["unixSockets"] == "true"  # and the queries ran their Python tasks so
    ids = [result[name]["id"] for name in ("set", "option", "fileDefault")]
    for query in ids:
        assert result["progress"][query] >= 1  # the progress listener saw its batches
    assert result["matched"] == {ids[2]: 1}  # the controller finds its own query's events
    batches = result["tasks"][ids[0]]
    assert len(batches) == 3
    rows = [task[2] for b in batches for stage in b["stages"] for task in stage["tasks"]]
    assert sum(rows) == 60  # every record read, counted per task (partition)


def test_sql_confs_are_option_defaults_and_options_win(result: dict[str, Any]) -> None:
    assert result["set"]["batches"] == 3  # SET spark.flamestream.maxRecordsPerTrigger=20
    assert result["option"]["batches"] == 2  # .option("maxRecordsPerTrigger", 30) wins
    assert result["fileDefault"]["last"]["controller"]["targetLatencyMs"] == 4000  # the file
    assert result["setOverFile"]["last"]["controller"]["targetLatencyMs"] == 9000  # SET
    assert result["optionOverSet"]["last"]["controller"]["targetLatencyMs"] == 7000  # option


def test_the_files_sink_log_compacts_at_sparks_own_interval(result: dict[str, Any]) -> None:
    """``SET spark.sql.streaming.fileSink.log.compactInterval=2``, as for Spark's own sink."""
    compacted = result["compacted"]
    assert compacted["batches"] == 6
    assert compacted["log"] == ["0", "1.compact", "2", "3.compact", "4", "5.compact"]
    assert compacted["read"] == 60  # every row, through the log (with the default interval)


def test_a_bad_sql_conf_is_reported_under_its_conf_name(result: dict[str, Any]) -> None:
    message = result["bad"]
    assert "option 'spark.flamestream.maxRecordsPerTrigger' = 'abc' is invalid" in message
    assert "an integer >= 1" in message


def test_gauges_reach_spark_metrics_and_the_prometheus_servlet(result: dict[str, Any]) -> None:
    gauges = result["gauges"]
    assert gauges["sink.files.set-ck.releasedRows"] == 20  # the last batch's release
    assert gauges["sink.files.set-ck.bufferedRows"] == 0
    assert gauges["sink.files.set-ck.minTimeTs"] == 30  # 60 rows over 2 fronts, logical clock
    controlled = [k for k in gauges if k.startswith("front.generator.") and "readLimit" in k]
    assert controlled, gauges
    controller = result["fileDefault"]["last"]["controller"]["id"]
    assert gauges[f"controller.{controller}.bufferedRows"] == 0  # the sink's, for its budgets
    assert f"controller.{controller}.stateBytes" in gauges
    lines = "\n".join(result["prometheus"])
    assert "FlameStreamPlugin_sink_files_set_ck_releasedRows" in lines
    assert "FlameStreamPlugin_listener_tasksStreaming" in lines
    assert "FlameStreamPlugin_tasks_succeeded_Count" in lines  # the executor part


def test_the_installed_jar_matches_this_package() -> None:
    manifest = check_jar(locate_jar())
    assert manifest["Spark-Version"] == pyspark.__version__


def test_a_missing_or_foreign_jar_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FLAMESTREAM_SHIM_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(ShimError, match=r"shim jar not found.*make setup"):
        locate_jar()
    foreign = tmp_path / "foreign.jar"
    import zipfile

    with zipfile.ZipFile(foreign, "w") as jar:
        jar.writestr(
            "META-INF/MANIFEST.MF", "Implementation-Version: 0.0.9\nSpark-Version: 3.5.1\n"
        )
    with pytest.raises(ShimError, match=r"shim version '0\.0\.9'"):
        check_jar(foreign)
    with zipfile.ZipFile(foreign, "w") as jar:
        jar.writestr(
            "META-INF/MANIFEST.MF",
            f"Implementation-Version: {SHIM_VERSION}\nSpark-Version: 3.5.1\n",
        )
    with pytest.raises(ShimError, match=r"built for Spark '3\.5\.1'"):
        check_jar(foreign)


def test_read_tasks_default_to_the_default_parallelism(result: dict[str, Any]) -> None:
    assert result["defaults"]["readTasks"] == "2"  # local[2]
    assert result["defaults"]["targetLatencyMs"] == "9000"  # confs still there
    batches = result["tasks"][result["packed"]["id"]]
    read = [stage["tasks"] for b in batches for stage in b["stages"] if stage["tasks"]]
    assert read and max(len(tasks) for tasks in read) == 2  # 4 sources, 2 tasks
    assert sum(task[2] for tasks in read for task in tasks) == 60  # every record, once


def test_the_shim_measures_the_applications_cpu(result: dict[str, Any]) -> None:
    """``cpu``: the driver's process tree from ``/proc`` (local: every Python worker too)."""
    before, after = result["cpuBudget"]["before"], result["cpuBudget"]["after"]
    assert before["measured"] and after["measured"]
    assert before["driverMs"] > 0 and after["totalMs"] > before["totalMs"]
    assert before["executorMs"] == {}  # local[2]: the driver is the executor, read directly


def test_an_unreachable_cpu_budget_is_reported_and_changes_nothing(
    result: dict[str, Any],
) -> None:
    runs = result["cpuBudget"]
    fixed, unreachable = runs["fixed"], runs["unreachable"]
    assert unreachable["rows"] == fixed["rows"] and len(fixed["rows"]) == 600
    board = unreachable["board"]
    measured = [entry["cpuMs"] for entry in board[1:]]
    assert measured and all(ms is not None and ms > 0 for ms in measured), board
    said = [r for entry in board for r in entry["reasons"] if r.startswith("cpu: not held")]
    assert said, board
    assert all(entry["cores"] == 2 for entry in board)  # the live executors' cores


def test_a_cpu_budget_makes_batches_larger_and_changes_nothing(result: dict[str, Any]) -> None:
    """Half the CPU per record the unmanaged run measured: the fronts wait for larger batches."""
    runs = result["cpuBudget"]
    free, held, fixed = runs["free"], runs["held"], runs["fixed"]["rows"]
    # stopped once as many rows were released as the 600-record run's: the same first ones
    assert free["rows"][: len(fixed)] == fixed == held["rows"][: len(fixed)]
    waits = [entry["waitRows"] for entry in held["board"]]
    assert max(waits) > 0, held["board"]
    assert all(entry["waitRows"] == 0 for entry in free["board"])

    def mean_rows(reads: list[dict[str, Any]]) -> float:
        rows = [r["rows"] for r in reads[2:] if r["rows"]]  # after the first decisions
        return sum(rows) / len(rows)

    assert mean_rows(held["reads"]) > 1.5 * mean_rows(free["reads"]), (held["reads"], free["reads"])
