"""``flamestream.configure``: the confs it sets and the Python it makes Spark start (no Spark)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import flamestream
from flamestream import jvm, session
from flamestream.launcher import RECOMMENDED_CONF


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
