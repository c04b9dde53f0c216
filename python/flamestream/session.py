"""``flamestream.configure(SparkSession.builder)``: a session set up for flamestream in one call.

What a user would otherwise copy by hand (``conf/spark-defaults.conf``, ``PYSPARK_PYTHON``):

- the JVM shim (:func:`flamestream.jvm.locate_jar`: the wheel's jar first) in ``spark.jars``
  and in ``spark.driver.extraClassPath`` / ``spark.executor.extraClassPath``, so the plugin is
  on the class path when Spark loads it at start; not when the jar is already in pyspark/jars
  (a checkout after ``make setup``, or ``python -m flamestream.jvm install``);
- the plugin and both listeners (``spark.plugins``, ``spark.extraListeners``,
  ``spark.sql.streaming.streamingQueryListeners``), added to any the builder already has;
- :data:`flamestream.python_env.RECOMMENDED_CONF`;
- ``spark.sql.shuffle.partitions`` = the application's cores (:func:`default_shuffle_partitions`:
  ``local[N]`` -> N, a cluster's cores where its confs tell them), unless the user set it (on
  the builder, in ``spark-defaults.conf`` or ``PYSPARK_SUBMIT_ARGS``): Spark's 200 made every
  micro-batch of a graph with groupings run 200 keyed tasks of a few rows each (on 2 cores the
  first word count batches took 29-80 s). It is a graph's key partitions ``P`` by default
  (:mod:`flamestream.spark.key_partitions`); what was chosen and why is kept in
  :data:`CHOSEN_PARTITIONS` for ``SparkGraph.describe()``;
- ``flamestream-python`` as Spark's Python, in this process's environment, which the Spark
  JVM inherits when the session starts it: ``PYSPARK_PYTHON`` (the SparkContext starts every
  worker with it) and ``PYSPARK_DRIVER_PYTHON``. The JVM starts a Python data source's
  planner and a streaming source's runner with ``PYSPARK_DRIVER_PYTHON``, else
  ``PYSPARK_PYTHON``, from its own environment (``PythonUtils.pythonExec``; Spark confs such
  as ``spark.pyspark.driver.python`` do not reach it). Started with a plain ``python`` there,
  each query takes 1.3-1.7 s from start to its first trigger instead of 0.1-0.2 s.

A variable already naming another interpreter is replaced by the ``flamestream-python``
beside it when there is one (the same interpreter, started the fast way); otherwise it is
kept, with a warning naming it and the fix. So is a Spark JVM that started before this call.

A session set up otherwise (``spark-submit``, ``spark-defaults.conf``, a builder of one's own)
gets its warning from the query: a ``format("flamestream")`` front's source runner that was not
started by ``flamestream-python`` says so once per query start (:func:`warn_if_slow_runner`),
on its stderr, which the Spark JVM copies to its own (the driver's console or log).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from flamestream import jvm
from flamestream.python_env import LAUNCHED, LAUNCHER, RECOMMENDED_CONF, worker_python

_log = logging.getLogger(__name__)

#: The environment variables naming Spark's Python: workers', then the data source runners'.
PYTHON_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
#: The module Spark runs a streaming Python source's runner as: one process per query start.
SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
#: Comma-separated confs that may hold other classes or jars too: ours are added to them.
_LISTS = (
    "spark.jars",
    "spark.plugins",
    "spark.extraListeners",
    "spark.sql.streaming.streamingQueryListeners",
)
_CLASS_PATHS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")

Builder = TypeVar("Builder")

#: Spark's conf for the partitions of a shuffle: a graph's key partitions ``P`` by default.
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
#: Set by :func:`configure` beside :data:`SHUFFLE_PARTITIONS`: ``"<count> <why>"``, so that
#: a graph tells flamestream's default from a value the user set (the user's is kept for a
#: checkpoint that recorded another ``P``; a default gives way to the recorded one).
CHOSEN_PARTITIONS = "spark.flamestream.chosenShufflePartitions"

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")
#: Between a key and its value in a properties file: ``=``, ``:`` or blanks.
_SEPARATOR = re.compile(r"\s*[=:\s]\s*")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]")


def _cpus() -> int:
    """The cores this process may run on (what ``local[*]`` gets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def application_cores(conf: Mapping[str, str], cpus: int | None = None) -> tuple[int, str] | None:
    """Spark's default parallelism for an application with ``conf``, told before it starts.

    ``(count, where it comes from)``, or None when only the running application knows (a
    cluster whose confs do not say how many cores it gets: executors register later). As
    ``SparkContext.defaultParallelism`` has it: ``spark.default.parallelism`` if set, else a
    local master's threads, else the cluster's cores (at least 2). ``cpus``: this machine's
    cores, for ``local[*]``.

    >>> application_cores({"spark.master": "local[2]"})
    (2, 'the cores of local[2]')
    >>> application_cores({"spark.master": "spark://h:7077"}) is None
    True
    """
    try:
        return _cores_of(conf, cpus)
    except ValueError:  # a conf that is no number: Spark itself says so when it starts
        return None


def _cores_of(conf: Mapping[str, str], cpus: int | None) -> tuple[int, str] | None:
    if conf.get("spark.default.parallelism"):
        return int(conf["spark.default.parallelism"]), "spark.default.parallelism"
    master = str(conf.get("spark.master") or "local[*]").strip()
    local = _LOCAL.fullmatch(master)
    if local is not None:
        threads = local.group(1) or "1"
        if threads == "*":
            found = cpus or _cpus()
            return found, f"the cores of {master} ({found} here)"
        return int(threads), f"the cores of {master}"
    cluster = _LOCAL_CLUSTER.fullmatch(master)
    if cluster is not None:
        return max(2, int(cluster.group(1)) * int(cluster.group(2))), f"the cores of {master}"
    if conf.get("spark.cores.max"):
        return max(2, int(conf["spark.cores.max"])), "spark.cores.max"
    if conf.get("spark.executor.instances"):
        cores = int(conf.get("spark.executor.cores") or 1)
        total = int(conf["spark.executor.instances"]) * cores
        return max(2, total), "spark.executor.instances x spark.executor.cores"
    return None


def _properties(path: Path) -> dict[str, str]:
    """A ``spark-defaults.conf`` (Java properties: ``key value`` or ``key=value``); {} if none."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            key, value = (*_SEPARATOR.split(line, maxsplit=1), "")[:2]
            found[key] = value.strip()
    return found


def submitted_conf(environ: Mapping[str, str]) -> dict[str, str]:
    """The confs a Spark JVM started from this process gets besides the builder's.

    PySpark starts it with ``spark-submit $PYSPARK_SUBMIT_ARGS``, which reads
    ``--properties-file`` or else ``spark-defaults.conf`` (in ``$SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``), then ``--conf key=value`` and ``--master``.
    """
    args = shlex.split(environ.get("PYSPARK_SUBMIT_ARGS", ""))
    given: dict[str, str] = {}
    properties: str | None = None
    for i, arg in enumerate(args):
        value = args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith("--conf=") or arg.startswith("--master="):
            arg, value = arg.split("=", 1)
        if arg == "--conf" and "=" in value:
            key, conf = value.split("=", 1)
            given[key] = conf
        elif arg == "--master":
            given["spark.master"] = value
        elif arg == "--properties-file":
            properties = value
    if properties is None:
        folder = environ.get("SPARK_CONF_DIR") or os.path.join(_spark_home(environ), "conf")
        properties = os.path.join(folder, "spark-defaults.conf")
    return {**_properties(Path(properties)), **given}


def _spark_home(environ: Mapping[str, str]) -> str:
    """``$SPARK_HOME``, else where PySpark finds it (the pip package's own folder)."""
    if environ.get("SPARK_HOME"):
        return environ["SPARK_HOME"]
    from pyspark.find_spark_home import _find_spark_home

    return str(_find_spark_home())


def default_shuffle_partitions(
    options: Mapping[str, Any], submitted: Mapping[str, str], cpus: int | None = None
) -> tuple[int, str] | None:
    """What :func:`configure` sets ``spark.sql.shuffle.partitions`` to, and why; None: nothing.

    ``options``: the builder's; ``submitted``: :func:`submitted_conf`. Nothing when the user
    set it in either (theirs wins), or when the application's cores are not known before it
    starts (:func:`application_cores`; a graph then takes the running application's default
    parallelism, :mod:`flamestream.spark.key_partitions`). The builder's confs win over the
    submitted ones, as in Spark.

    >>> default_shuffle_partitions({"spark.master": "local[2]"}, {})
    (2, 'the cores of local[2]')
    >>> default_shuffle_partitions({"spark.sql.shuffle.partitions": "8"}, {}) is None
    True
    """
    if SHUFFLE_PARTITIONS in options or SHUFFLE_PARTITIONS in submitted:
        return None
    conf = {**submitted, **{key: str(value) for key, value in options.items()}}
    return application_cores(conf, cpus)


def session_conf(jar: Path | None = None) -> dict[str, str]:
    """The Spark confs :func:`configure` sets, before merging with the builder's own.

    ``jar``: the shim jar to put on the class paths (None: it is in pyspark/jars already).
    """
    conf = {
        "spark.plugins": jvm.PLUGIN_CLASS,
        "spark.extraListeners": jvm.TASK_LISTENER_CLASS,
        "spark.sql.streaming.streamingQueryListeners": jvm.PROGRESS_LISTENER_CLASS,
        **{key: str(value) for key, value in RECOMMENDED_CONF.items()},
    }
    if jar is not None:
        conf["spark.jars"] = str(jar)
        conf.update(dict.fromkeys(_CLASS_PATHS, str(jar)))
    return conf


def merge_conf(existing: Mapping[str, Any], ours: Mapping[str, str]) -> dict[str, str]:
    """``ours`` merged into the builder's ``existing`` options: what to set.

    List confs keep the builder's entries and gain ours; a recommended setting the builder
    already has with another value is kept, with a warning.

    >>> merge_conf({"spark.plugins": "a.B"}, {"spark.plugins": "c.D"})
    {'spark.plugins': 'a.B,c.D'}
    """
    merged: dict[str, str] = {}
    for key, value in ours.items():
        before = str(existing.get(key, "") or "")
        if key in _LISTS:
            items = [item for item in before.split(",") if item.strip()]
            merged[key] = ",".join([*items, value] if value not in items else items)
        elif key in _CLASS_PATHS:
            items = [item for item in before.split(os.pathsep) if item]
            merged[key] = os.pathsep.join([value, *(i for i in items if i != value)])
        elif before and before.lower() != value.lower():
            _log.warning(
                "flamestream: the session sets %s=%s, flamestream recommends %s "
                "(flamestream.python_env.RECOMMENDED_CONF): keeping the session's",
                key,
                before,
                value,
            )
        else:
            merged[key] = value
    return merged


def _is_launcher(command: str) -> bool:
    return os.path.basename(command) == LAUNCHER


def _launcher_beside(command: str) -> str | None:
    """The ``flamestream-python`` installed beside the interpreter ``command`` names, if any."""
    found = shutil.which(command)
    if found is None:
        return None
    beside = os.path.join(os.path.dirname(found), LAUNCHER)
    return beside if os.access(beside, os.X_OK) else None


def choose_python(name: str, current: str | None, wanted: str) -> str:
    """What environment variable ``name`` should hold, given its ``current`` value.

    Unset: ``wanted``. An interpreter with ``flamestream-python`` beside it: that launcher.
    Anything else is kept, with a warning: Spark would start its Python processes slowly.
    """
    if not current:
        return wanted
    if _is_launcher(current):
        return current
    beside = _launcher_beside(current)
    if beside is not None:
        _log.info("flamestream: %s=%s becomes %s (the same interpreter)", name, current, beside)
        return beside
    _warn_slow_python(name, current, wanted)
    return current


def _warn_slow_python(name: str, current: str, wanted: str) -> None:
    _log.warning(
        "flamestream: %s=%s is not %s, so Spark starts its Python processes with it: "
        "each streaming query then takes 1.3-1.7 s from start to its first trigger instead "
        "of 0.1-0.2 s, and on a busy machine may fail with 'Python worker failed to connect "
        "back'. Fix: unset %s or set it to %s before the session starts",
        name,
        current,
        LAUNCHER,
        name,
        wanted,
    )


def slow_runner_warning(
    environ: Mapping[str, str],
    main: str,
    executable: str,
    launcher: str | None,
    age: float | None,
) -> str | None:
    """What a query's source runner should warn, or None when there is nothing to say.

    ``environ``: this process's environment (the Spark JVM's, plus what Spark and the
    launcher add); ``main``: the module it runs as ``__main__``; ``executable``: its
    interpreter; ``launcher``: the ``flamestream-python`` beside it, if any; ``age``: seconds
    from its start to now, if known. Only the source runner (:data:`SOURCE_RUNNER`, one per
    query start) warns: the query's read planning calls the front's ``streamReader`` too, in
    a worker forked by Spark's daemon.

    >>> slow_runner_warning({LAUNCHED: "m"}, SOURCE_RUNNER, "/v/python", None, 0.1) is None
    True
    """
    if environ.get(LAUNCHED) or main != SOURCE_RUNNER:
        return None
    values = ", ".join(f"{name}={environ.get(name) or '(unset)'}" for name in reversed(PYTHON_ENV))
    took = f"it took {age:.2f} s from its start to planning the query, " if age else ""
    fix = launcher or f"the {LAUNCHER} of a flamestream installed into {executable}'s environment"
    return (
        f"flamestream: this query's source runner runs in a plain Python ({executable}), not "
        f"{LAUNCHER}: {took}every query start pays for a fresh interpreter importing pyspark "
        f"(measured: 1.3-1.7 s instead of 0.1-0.2 s; word count at 0.60x plain PySpark "
        f"instead of 1.33x), and on a busy machine the runner may miss Spark's fixed 10 s to "
        f"connect back. Spark starts it with PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON, else "
        f"python3, from the Spark JVM's environment (a source registered with "
        f"spark.dataSource.register: the driver's PYSPARK_PYTHON); here {values}. Fix: build "
        f"the session with flamestream.configure(SparkSession.builder), or export "
        f"PYSPARK_DRIVER_PYTHON and PYSPARK_PYTHON={fix} where Spark starts (e.g. before "
        f"spark-submit)"
    )


def _process_age() -> float | None:
    """Seconds since this process started (Linux's ``/proc``), or None where unknown."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            # field 22 (the 20th after the command name, which may hold spaces): clock ticks
            started = int(stat.read().rsplit(")", 1)[1].split()[19])
            now = float(uptime.read().split()[0])
        return max(0.0, now - started / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def warn_if_slow_runner() -> None:
    """Log :func:`slow_runner_warning` for this process, if any (a front's ``streamReader``).

    Spark copies a runner's stderr to the JVM's stderr (the driver's console, or its log):
    logged with no handler configured (a fresh runner has none), the warning goes there
    through ``logging.lastResort``.
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    beside = os.path.join(os.path.dirname(sys.executable), LAUNCHER)
    launcher = beside if os.access(beside, os.X_OK) else None
    message = slow_runner_warning(
        os.environ, getattr(spec, "name", ""), sys.executable, launcher, _process_age()
    )
    if message is not None:
        _log.warning("%s", message)


def _check_running_jvm() -> None:
    """Warn when a Spark JVM already runs: it keeps the environment it started with."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    system = gateway.jvm.java.lang.System
    name = "PYSPARK_DRIVER_PYTHON" if system.getenv("PYSPARK_DRIVER_PYTHON") else "PYSPARK_PYTHON"
    runner = system.getenv(name) or "python3"
    if not _is_launcher(runner):
        _warn_slow_python(f"{name} (of the Spark JVM already running)", runner, LAUNCHER)
    if SparkContext._active_spark_context is not None:
        _log.warning(
            "flamestream: a SparkContext is running already: getOrCreate() returns it, and "
            "the plugin, listener and class path confs apply only to a new one. Fix: call "
            "flamestream.configure before the first session starts, or stop it first"
        )


def _partitions_conf(existing: Mapping[str, Any]) -> dict[str, str]:
    """:data:`SHUFFLE_PARTITIONS` and :data:`CHOSEN_PARTITIONS`, if :func:`configure` sets them.

    Not with a SparkContext running: ``getOrCreate`` would set them on the session it returns,
    over whatever that session has. Not under ``spark-submit`` either (its JVM, started
    before this process, names itself in ``PYSPARK_GATEWAY_PORT``): its ``--master`` and
    ``--conf`` are the JVM's, unknown here, and the builder's confs would override them; a
    graph then takes the application's default parallelism (:mod:`flamestream.spark.
    key_partitions`).
    """
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return {}
    chosen = default_shuffle_partitions(existing, submitted_conf(os.environ))
    if chosen is None:
        return {}
    count, why = chosen
    _log.info("flamestream: %s=%d (%s)", SHUFFLE_PARTITIONS, count, why)
    return {SHUFFLE_PARTITIONS: str(count), CHOSEN_PARTITIONS: f"{count} {why}"}


def configure(builder: Builder, *, python: str | None = None) -> Builder:
    """Set up ``builder`` (a ``SparkSession.Builder``) for flamestream; returns it.

    ``python``: the launcher for Spark's Python processes, set whatever the environment
    says (default: the ``flamestream-python`` beside this interpreter, unless the environment
    names another launcher or an interpreter without one). See the module docstring for what
    is set. Call it before the session's JVM starts (the first ``getOrCreate`` of the process)::

        spark = flamestream.configure(SparkSession.builder.master("local[2]")).getOrCreate()

    Raises :class:`flamestream.jvm.ShimError` when no shim jar is found.
    """
    jar = jvm.locate_jar()
    on_class_path = jar.resolve().parent == jvm.spark_jars_dir().resolve()
    existing: Mapping[str, Any] = getattr(builder, "_options", {})
    for key, value in merge_conf(existing, session_conf(None if on_class_path else jar)).items():
        builder = builder.config(key, value)  # type: ignore[attr-defined]
    for key, value in _partitions_conf(existing).items():
        builder = builder.config(key, value)  # type: ignore[attr-defined]
    wanted = python or worker_python()
    if not _is_launcher(wanted):
        _log.warning(
            "flamestream: no %s beside %s, Spark's Python processes start slowly (%s). "
            "Fix: install flamestream into this interpreter's environment, or pass python=",
            LAUNCHER,
            sys.executable,
            wanted,
        )
    for name in PYTHON_ENV:  # an explicit ``python`` wins over the environment
        current = None if python else os.environ.get(name)
        os.environ[name] = choose_python(name, current, wanted)
    _check_running_jvm()
    return builder
