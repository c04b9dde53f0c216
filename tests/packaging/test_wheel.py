"""The wheel a user installs: built from this checkout, installed into a fresh virtualenv
outside it, it runs a graph query (word count, a grouping) on local Spark with the plugin
loaded, importing nothing from the checkout.

The wheel is built as ``make wheel`` builds it (Maven compiles the shim into it); the
virtualenv gets it with ``constraints.txt`` (pip's cache makes that quick; this environment's
pip installs into it), then ``python -m flamestream.workers precompile`` as the install guide
says. The job
(``wheel_job.py``, copied out) runs from a directory outside the checkout, without
``PYTHONPATH``, ``SPARK_CONF_DIR`` or ``PYSPARK_PYTHON``, and with ``PYSPARK_DRIVER_PYTHON`` at
the virtualenv's plain ``python`` (a common setting, which ``flamestream.configure`` must turn
into ``flamestream-python``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from flamestream.jvm import JAR_NAME
from flamestream.testing import run_in_order

from .wheel_job import FILES, word_count

ROOT = Path(__file__).resolve().parents[2]
#: Variables that would let the job see the checkout or a configured Spark.
UNSET = ("PYTHONPATH", "PYSPARK_PYTHON", "SPARK_CONF_DIR", "SPARK_HOME", "FLAMESTREAM_SHIM_JAR")


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built as ``make wheel`` builds it (in this environment, which has PySpark)."""
    out = tmp_path_factory.mktemp("dist")
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # no stale files from another build
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), "."], ROOT)
    (built,) = out.glob("flamestream-*-py3-none-any.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the checkout with the wheel (and its dependencies) only."""
    home = tmp_path_factory.mktemp("venv")
    assert ROOT not in home.parents
    run([sys.executable, "-m", "venv", "--without-pip", str(home)], home)
    python = str(home / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    # no bytecode for pyspark's thousands of modules: a minute on a busy machine, unused here
    constraints = str(ROOT / "constraints.txt")
    run([*pip, "install", "-q", "--no-compile", "-c", constraints, str(wheel)], home)
    run([python, "-m", "flamestream.workers", "precompile"], home)  # as docs/install.md says
    return home


@pytest.fixture(scope="module")
def result(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("job")
    job = work / "wheel_job.py"
    shutil.copyfile(Path(__file__).with_name("wheel_job.py"), job)
    env = {k: v for k, v in os.environ.items() if k not in UNSET and k != "VIRTUAL_ENV"}
    env["PYSPARK_DRIVER_PYTHON"] = str(venv / "bin" / "python")
    lines = [
        x
        for x in run([str(venv / "bin" / "python"), str(job), str(work)], work, env).splitlines()
        if x.startswith("RESULT ")
    ]
    assert lines
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def test_the_wheel_carries_the_shim_jar_and_the_kafka_pom(wheel: Path) -> None:
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert f"flamestream/jars/{JAR_NAME}" in names
        assert "flamestream/testing/kafka-pom.xml" in names
        assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "jvm-shim/"))]


def test_flamestream_and_its_jar_come_from_the_virtualenv(venv: Path, result: dict[str, Any]):
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert Path(result["flamestream"]).parent == site / "flamestream"
    assert Path(result["jar"]) == site / "flamestream" / "jars" / JAR_NAME
    assert not (site / "pyspark" / "jars" / JAR_NAME).exists()  # the session's class path only


def test_word_count_releases_the_reference_runtimes_counts(result: dict[str, Any]) -> None:
    lines = [line for name in sorted(FILES) for line in FILES[name].splitlines()]
    assert result["lines"] == lines
    counts = Counter(word for line in lines for word in line.split())
    every_update = sorted(f"{w}={k}" for w, n in counts.items() for k in range(1, n + 1))
    reference = run_in_order(word_count(), lines).released("out")
    assert sorted(str(r.payload) for r in reference) == every_update
    assert sorted(result["released"]) == every_update


def test_the_plugin_runs_and_spark_starts_python_through_the_launcher(
    venv: Path, result: dict[str, Any]
) -> None:
    assert "io.flamestream.shim.FlameStreamPlugin" in result["plugins"]
    gauges = result["gauges"]
    assert gauges is not None, "no shim endpoint: the plugin did not load"
    assert gauges["sink.files.ck.releasedRows"] >= 1
    launcher = str(venv / "bin" / "flamestream-python")
    assert result["runnerPython"] == launcher  # was the plain python: configure replaced it
    assert result["workerPython"] == launcher
