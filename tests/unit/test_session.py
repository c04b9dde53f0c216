"""``flamestream.configure``: the confs it sets and the Python it makes Spark start (no Spark)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import flamestream
from flamestream import jvm, session
from flamestream.launcher import LAUNCHED, RECOMMENDED_CONF


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def clean_python_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in session.PYTHON_ENV:  # set first: undone at the end, whatever configure sets
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_configure_sets_the_plugin_listeners_recommended_conf_and_python(
    clean_python_env: None,
) -> None:
    builder = flamestream.configure(SparkSession.Builder().config("spark.plugins", "my.Plugin"))
    options = builder._options  # type: ignore[attr-defined]
    assert options["spark.plugins"] == f"my.Plugin,{jvm.PLUGIN_CLASS}"  # the user's kept
    assert options["spark.extraListeners"] == jvm.TASK_LISTENER_CLASS
    assert options["spark.sql.streaming.streamingQueryListeners"] == jvm.PROGRESS_LISTENER_CLASS
    for key, value in RECOMMENDED_CONF.items():
        assert options[key] == value
    # a checkout: `make setup` put the jar into pyspark/jars, on every class path already
    assert jvm.locate_jar().parent == jvm.spark_jars_dir()
    assert "spark.jars" not in options
    launcher = str(Path(sys.executable).with_name("flamestream-python"))
    assert os.environ["PYSPARK_PYTHON"] == os.environ["PYSPARK_DRIVER_PYTHON"] == launcher


def test_a_bundled_jar_goes_on_the_class_paths() -> None:
    jar = Path("/opt/site-packages/flamestream/jars") / jvm.JAR_NAME
    conf = session.merge_conf(
        {"spark.jars": "other.jar", "spark.driver.extraClassPath": "x.jar"},
        session.session_conf(jar),
    )
    assert conf["spark.jars"] == f"other.jar,{jar}"
    assert conf["spark.driver.extraClassPath"] == f"{jar}{os.pathsep}x.jar"
    assert conf["spark.executor.extraClassPath"] == str(jar)
    again = session.merge_conf(conf, session.session_conf(jar))  # configure twice: no doubles
    assert again["spark.jars"] == conf["spark.jars"]
    assert again["spark.plugins"] == jvm.PLUGIN_CLASS


def test_a_different_recommended_value_is_kept_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = next(iter(RECOMMENDED_CONF))
    with caplog.at_level(logging.WARNING, logger="flamestream.session"):
        conf = session.merge_conf({name: "false"}, session.session_conf())
    assert name not in conf
    assert f"{name}=false" in caplog.text


def test_a_plain_python_with_the_launcher_beside_it_becomes_the_launcher(tmp_path: Path) -> None:
    python = executable(tmp_path / "python")
    launcher = executable(tmp_path / "flamestream-python")
    chosen = session.choose_python("PYSPARK_DRIVER_PYTHON", str(python), "/else/flamestream-python")
    assert chosen == str(launcher)
    assert session.choose_python("PYSPARK_PYTHON", None, "/x/flamestream-python") == (
        "/x/flamestream-python"
    )
    assert session.choose_python("PYSPARK_PYTHON", str(launcher), "/x/y") == str(launcher)


def test_another_python_is_kept_with_a_warning_naming_the_setting_and_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    python = executable(tmp_path / "python3")  # no launcher beside it
    with caplog.at_level(logging.WARNING, logger="flamestream.session"):
        chosen = session.choose_python(
            "PYSPARK_DRIVER_PYTHON", str(python), "/v/flamestream-python"
        )
    assert chosen == str(python)
    assert f"PYSPARK_DRIVER_PYTHON={python} is not flamestream-python" in caplog.text
    assert "unset PYSPARK_DRIVER_PYTHON or set it to /v/flamestream-python" in caplog.text
    assert "1.3-1.7 s" in caplog.text


def test_configure_without_a_jar_fails_naming_where_it_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(jvm, "spark_jars_dir", lambda: tmp_path)
    monkeypatch.setenv(jvm.JAR_ENV, str(tmp_path / "missing.jar"))
    with pytest.raises(jvm.ShimError, match=r"missing\.jar.*FLAMESTREAM_SHIM_JAR"):
        flamestream.configure(SparkSession.Builder())


def test_the_bundled_jar_is_found_first_and_installed_into_pyspark_jars(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    installed = jvm.spark_jars_dir() / jvm.JAR_NAME
    bundled = tmp_path / "jars" / jvm.JAR_NAME
    bundled.parent.mkdir()
    bundled.write_bytes(installed.read_bytes())
    monkeypatch.setattr(jvm, "bundled_jar", lambda: bundled)
    monkeypatch.setenv(jvm.JAR_ENV, str(installed))
    assert jvm.locate_jar() == bundled
    target = tmp_path / "pyspark-jars"
    target.mkdir()
    monkeypatch.setattr(jvm, "spark_jars_dir", lambda: target)
    assert jvm.main(["install"]) == 0
    assert (target / jvm.JAR_NAME).read_bytes() == bundled.read_bytes()


def test_an_explicit_python_wins_over_the_environment(
    clean_python_env: None, tmp_path: Path
) -> None:
    os.environ["PYSPARK_PYTHON"] = str(executable(tmp_path / "python3"))
    (tmp_path / "bin").mkdir()
    launcher = str(executable(tmp_path / "bin" / "flamestream-python"))
    flamestream.configure(SparkSession.Builder(), python=launcher)
    assert os.environ["PYSPARK_PYTHON"] == os.environ["PYSPARK_DRIVER_PYTHON"] == launcher


def test_a_source_runner_started_by_a_plain_python_warns_naming_settings_cost_and_fix() -> None:
    environ = {"PYSPARK_DRIVER_PYTHON": "/v/bin/python", "PATH": "/usr/bin"}
    message = session.slow_runner_warning(
        environ, session.SOURCE_RUNNER, "/v/bin/python3.11", "/v/bin/flamestream-python", 1.4567
    )
    assert message is not None
    assert "source runner runs in a plain Python (/v/bin/python3.11), not flamestream-python" in (
        message
    )
    assert "here PYSPARK_DRIVER_PYTHON=/v/bin/python, PYSPARK_PYTHON=(unset)" in message
    assert "it took 1.46 s from its start" in message  # this process's own cost
    assert "1.3-1.7 s instead of 0.1-0.2 s" in message  # and the measured one
    assert "flamestream.configure(SparkSession.builder)" in message
    assert "PYSPARK_DRIVER_PYTHON and PYSPARK_PYTHON=/v/bin/flamestream-python" in message
    # no launcher beside that interpreter: the fix says where one would come from
    bare = session.slow_runner_warning({}, session.SOURCE_RUNNER, "/usr/bin/python3", None, None)
    assert bare is not None and "took" not in bare
    assert "PYSPARK_DRIVER_PYTHON=(unset), PYSPARK_PYTHON=(unset)" in bare
    assert "flamestream installed into /usr/bin/python3's environment" in bare


def test_only_a_source_runner_not_started_by_the_launcher_warns() -> None:
    plain = {"PYSPARK_PYTHON": "/v/bin/python"}
    launched = {**plain, LAUNCHED: session.SOURCE_RUNNER}
    args = ("/v/bin/python", "/v/bin/flamestream-python", 2.0)
    assert session.slow_runner_warning(launched, session.SOURCE_RUNNER, *args) is None
    # the read planning's streamReader call, in a worker forked by Spark's daemon: the same
    # query, so it stays silent (one warning per query start)
    assert session.slow_runner_warning(plain, "pyspark.daemon", *args) is None
    assert session.slow_runner_warning(plain, session.SOURCE_RUNNER, *args) is not None


def test_the_process_age_counts_from_the_process_start() -> None:
    code = (
        "import time; time.sleep(0.5); "
        "from flamestream.session import _process_age; print(_process_age())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0.5 <= float(done.stdout) < 120  # the sleep, plus the start and the import


def test_the_warning_in_the_install_docs_is_the_one_a_runner_logs() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    shown = doc.split("```text\nflamestream: this query's", 1)[1].split("```", 1)[0]
    message = session.slow_runner_warning(
        {"PYSPARK_DRIVER_PYTHON": "/venv/bin/python"},
        session.SOURCE_RUNNER,
        "/venv/bin/python3.11",
        "/venv/bin/flamestream-python",
        1.52,
    )
    assert message is not None
    assert " ".join(f"flamestream: this query's{shown}".split()) == message
