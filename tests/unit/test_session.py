"""``flamestream.configure``: the confs it sets and the Python it makes Spark start (no Spark)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark import SparkContext
from pyspark.sql import SparkSession

import flamestream
from flamestream import Dataflow, count, jvm, session
from flamestream.errors import ConfigError
from flamestream.python_env import LAUNCHED, RECOMMENDED_CONF
from flamestream.spark import key_partitions
from flamestream.spark.key_partitions import KeyPartitions

from ..examples import examples


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


MASTERS = st.sampled_from(
    [
        ("local", 1),
        ("local[1]", 1),
        ("local[2]", 2),
        ("local[7]", 7),
        ("local[3, 2]", 3),
        ("local[*]", 5),  # this machine's cores, 5 in the test
        ("local-cluster[2,1,1024]", 2),
        ("local-cluster[3, 2, 512]", 6),
        ("local-cluster[1,1,1024]", 2),  # a cluster's default parallelism is at least 2
    ]
)


@settings(max_examples=examples(200), deadline=None)
@given(
    master=MASTERS,
    where=st.sampled_from(["nowhere", "builder", "submitted"]),
    value=st.integers(1, 500),
    parallelism=st.none() | st.integers(1, 64),
)
def test_the_default_partitions_are_the_cores_unless_the_user_set_them(
    master: tuple[str, int], where: str, value: int, parallelism: int | None
) -> None:
    name, cores = master
    options: dict[str, str] = {"spark.master": name}
    submitted: dict[str, str] = {}
    if parallelism is not None:  # Spark's own default parallelism, where the user set it
        (options if value % 2 else submitted)["spark.default.parallelism"] = str(parallelism)
    if where != "nowhere":
        (options if where == "builder" else submitted)[session.SHUFFLE_PARTITIONS] = str(value)
    chosen = session.default_shuffle_partitions(options, submitted, cpus=5)
    if where != "nowhere":
        assert chosen is None  # the user's value wins, wherever it was set
    elif parallelism is not None:
        assert chosen == (parallelism, "spark.default.parallelism")
    else:
        assert chosen == (cores, f"the cores of {name}" + (" (5 here)" if "*" in name else ""))


def test_a_clusters_cores_come_from_its_confs_or_from_the_running_application() -> None:
    master = {"spark.master": "spark://host:7077"}
    assert session.default_shuffle_partitions(master, {}) is None  # known once it runs
    with_max = {**master, "spark.cores.max": "6"}
    assert session.default_shuffle_partitions(with_max, {}) == (6, "spark.cores.max")
    yarn = {"spark.master": "yarn", "spark.executor.instances": "3", "spark.executor.cores": "4"}
    assert session.default_shuffle_partitions(yarn, {})[0] == 12  # type: ignore[index]
    assert session.default_shuffle_partitions({"spark.master": "local[x]"}, {}) is None
    bad = {**master, "spark.cores.max": "many"}  # Spark says what is wrong when it starts
    assert session.default_shuffle_partitions(bad, {}) is None
    # the builder's master wins over spark-defaults.conf's, as in Spark
    assert session.default_shuffle_partitions({"spark.master": "local[3]"}, master) == (
        3,
        "the cores of local[3]",
    )


def test_spark_defaults_and_submit_args_are_read_as_spark_submit_reads_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.master   local[4]\nspark.sql.shuffle.partitions=16\n"
        "spark.executor.memory: 2g\n"
    )
    found = session.submitted_conf({"SPARK_CONF_DIR": str(tmp_path)})
    assert found == {
        "spark.master": "local[4]",
        "spark.sql.shuffle.partitions": "16",
        "spark.executor.memory": "2g",
    }
    other = tmp_path / "other.conf"
    other.write_text("spark.cores.max 3\n")
    args = f"--master local[2] --conf spark.default.parallelism=9 --properties-file {other} x"
    found = session.submitted_conf({"SPARK_CONF_DIR": str(tmp_path), "PYSPARK_SUBMIT_ARGS": args})
    assert found == {
        "spark.cores.max": "3",  # --properties-file instead of spark-defaults.conf
        "spark.master": "local[2]",
        "spark.default.parallelism": "9",
    }
    assert session.submitted_conf({"SPARK_CONF_DIR": str(tmp_path / "none")}) == {}


def test_configure_sets_the_cores_and_keeps_a_value_the_user_set(
    clean_python_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # an empty conf folder
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    # as in a fresh process: the whole suite's Spark tests may have left a context running
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    options = flamestream.configure(SparkSession.Builder().master("local[2]"))._options  # type: ignore[attr-defined]
    assert options[session.SHUFFLE_PARTITIONS] == "2"
    assert options[session.CHOSEN_PARTITIONS] == "2 the cores of local[2]"
    builder = SparkSession.Builder().master("local[2]").config(session.SHUFFLE_PARTITIONS, "64")
    options = flamestream.configure(builder)._options  # type: ignore[attr-defined]
    assert options[session.SHUFFLE_PARTITIONS] == "64" and session.CHOSEN_PARTITIONS not in options
    (tmp_path / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 12\n")
    options = flamestream.configure(SparkSession.Builder().master("local[2]"))._options  # type: ignore[attr-defined]
    assert session.SHUFFLE_PARTITIONS not in options  # the file's 12 applies when Spark starts
    assert session.CHOSEN_PARTITIONS not in options
    (tmp_path / "spark-defaults.conf").unlink()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # spark-submit's JVM: its confs unknown
    options = flamestream.configure(SparkSession.Builder().master("local[2]"))._options  # type: ignore[attr-defined]
    assert session.SHUFFLE_PARTITIONS not in options


def test_a_default_gives_way_to_the_checkpoints_p_and_the_users_value_is_refused() -> None:
    default = KeyPartitions(2, "flamestream.configure's spark.sql.shuffle.partitions, ...")
    assert default.for_checkpoint(None, "graph wc") is default  # a new checkpoint
    assert default.for_checkpoint(2, "graph wc") is default
    kept = default.for_checkpoint(200, "graph wc")  # first run under Spark's 200
    assert kept.count == 200 and kept.option is None
    assert kept.source.startswith("recorded by the checkpoint when it first ran (else 2: ")
    for users in (key_partitions.given(8), KeyPartitions(8, "...", session.SHUFFLE_PARTITIONS)):
        assert users.for_checkpoint(8, "graph wc") is users
        with pytest.raises(ConfigError) as error:
            users.for_checkpoint(200, "graph wc")
        message = str(error.value)
        assert message.startswith(f"graph wc: option '{users.option}' = 8 is invalid")
        assert "200 key partitions, as when this checkpoint's state was written" in message
        assert f"keep {users.option} at 200 for this checkpoint" in message


def test_a_cycle_handing_items_to_other_keys_runs_in_one_key_partition_by_default() -> None:
    """Without partitions=, whatever the session says; partitions= and a checkpoint win."""
    from flamestream.examples.components import components
    from flamestream.spark import SparkGraph

    graph = SparkGraph(components())
    assert graph._cross_key_cycle()
    assert "key partitions P = 1 " in graph.describe()
    assert "one key partition by default" in graph.describe()
    assert "fronts given as readers admit no record while it holds items" in graph.describe()
    assert "key partitions P = 3 " in SparkGraph(components(), partitions=3).describe()
    default = key_partitions.for_cross_key_cycle()
    assert default.count == 1 and default.option is None
    assert default.for_checkpoint(4, "graph components").count == 4  # recorded: kept
    # map_reduce's cycle comes back to its own key: the session decides, as for any graph
    flow = Dataflow("wc")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", count(flow, "count", words))
    assert not SparkGraph(flow)._cross_key_cycle()
