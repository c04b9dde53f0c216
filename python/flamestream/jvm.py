"""The one module that owns flamestream's link to the JVM: the shim jar and its endpoint.

The shim (``jvm-shim/``: a ``SparkPlugin``, a ``SparkListener``, a ``StreamingQueryListener``)
runs inside the driver JVM. Python code on the driver host reaches it through a loopback
endpoint the plugin opens; the plugin writes the endpoint's port and secret to a rendezvous
file in the driver's block manager directories, which Spark passes to every Python process it
starts on the driver host as ``SPARK_LOCAL_DIRS`` (the planner that parses options, the
fronts' reader process, sink commits). None of those processes has a Spark session, so this
is how they read ``SET spark.flamestream.*`` confs, the listeners' progress and task metrics,
and push gauges to Spark's metrics system.

The jar ships inside the wheel (``flamestream/jars/``, put there by the build backend:
``setup.py``). :func:`locate_jar` finds it there first, then at ``$FLAMESTREAM_SHIM_JAR``, then
in ``pyspark/jars``. :func:`flamestream.configure` puts the found jar on the session's class
paths; ``install`` copies it into ``pyspark/jars`` for those who configure Spark through
``spark-defaults.conf`` (``conf/``) instead.

Command line (the project's setup runs ``build``)::

    python -m flamestream.jvm build     # compile the shim with Maven, install it into pyspark/jars
    python -m flamestream.jvm install   # copy the found (bundled) jar into pyspark/jars
    python -m flamestream.jvm path      # where the jar is (checked)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flamestream.errors import FlameStreamError

#: The shim version this Python package speaks to (the jar's Implementation-Version).
SHIM_VERSION = "0.1.0"
#: Class names for ``spark.plugins``, ``spark.extraListeners`` and
#: ``spark.sql.streaming.streamingQueryListeners``.
PLUGIN_CLASS = "io.flamestream.shim.FlameStreamPlugin"
TASK_LISTENER_CLASS = "io.flamestream.shim.TaskSkewListener"
PROGRESS_LISTENER_CLASS = "io.flamestream.shim.ProgressListener"
#: The rendezvous file the plugin writes into each of the driver's block manager directories.
RENDEZVOUS = "flamestream-shim.json"

#: Spark SQL / Spark confs with this prefix are defaults for ``.option(...)``.
CONF_PREFIX = "spark.flamestream."

JAR_NAME = f"flamestream-shim-{SHIM_VERSION}.jar"
#: The environment variable naming a shim jar to use (checked like any other).
JAR_ENV = "FLAMESTREAM_SHIM_JAR"


class ShimError(FlameStreamError):
    """The shim jar is missing, does not match, or cannot be built."""


def spark_jars_dir() -> Path:
    """The jars directory of the installed PySpark (``$SPARK_HOME/jars`` of a pip install)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _source_dir() -> Path:
    """``jvm-shim/`` of a source checkout (absent in an installed wheel)."""
    return Path(__file__).resolve().parents[2] / "jvm-shim"


def bundled_jar() -> Path:
    """Where a wheel carries the shim jar (``flamestream/jars/``; absent in a checkout)."""
    return Path(__file__).resolve().parent / "jars" / JAR_NAME


def locate_jar() -> Path:
    """The shim jar, checked: the wheel's, else ``$FLAMESTREAM_SHIM_JAR``, else pyspark/jars'.

    A ``$FLAMESTREAM_SHIM_JAR`` naming no file is an error (pyspark/jars is not tried then). A
    checkout (an editable install) has no bundled jar: ``make setup`` builds one into
    pyspark/jars.
    """
    given = os.environ.get(JAR_ENV)
    candidates = [bundled_jar(), *([Path(given).expanduser()] if given else [])]
    if not given:  # a jar named but missing is an error, not a reason to take another
        candidates.append(spark_jars_dir() / JAR_NAME)
    for path in candidates:
        if path.is_file():
            check_jar(path)
            return path
    msg = (
        f"flamestream shim jar not found (looked at {', '.join(map(str, candidates))}). "
        "Hint: install flamestream from its wheel (it carries the jar), run `make setup` or "
        "`python -m flamestream.jvm build` in a source checkout (needs Java 17 and Maven), "
        f"or set {JAR_ENV} to the jar's path"
    )
    raise ShimError(msg)


def install_jar() -> Path:
    """Copy the found shim jar (the wheel's first) into pyspark/jars; the installed path.

    For sessions configured by ``spark-defaults.conf`` (``conf/``) instead of
    :func:`flamestream.configure`: pyspark/jars is on the class path of the driver and of
    every executor Spark starts from this installation, so the conf file needs no jar path.
    """
    source = locate_jar()
    target = spark_jars_dir() / JAR_NAME
    if source.resolve() != target.resolve():
        shutil.copyfile(source, target)
    return target


def check_jar(path: Path) -> dict[str, str]:
    """The jar's manifest entries, after checking its shim and Spark versions match ours."""
    import pyspark

    try:
        with zipfile.ZipFile(path) as jar:
            text = jar.read("META-INF/MANIFEST.MF").decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        msg = f"{path} is not a flamestream shim jar: {exc}"
        raise ShimError(msg) from exc
    manifest = dict(
        line.split(": ", 1) for line in text.replace("\r", "").splitlines() if ": " in line
    )
    shim, spark = manifest.get("Implementation-Version"), manifest.get("Spark-Version", "")
    if shim != SHIM_VERSION:
        msg = (
            f"{path}: shim version {shim!r}, this flamestream needs {SHIM_VERSION!r}. "
            "Hint: rebuild it with `python -m flamestream.jvm build`"
        )
        raise ShimError(msg)
    if spark.split(".")[:2] != pyspark.__version__.split(".")[:2]:
        msg = (
            f"{path}: built for Spark {spark!r}, running PySpark {pyspark.__version__}. "
            "Hint: rebuild it with `python -m flamestream.jvm build`"
        )
        raise ShimError(msg)
    return manifest


def build(install: bool = True) -> Path:
    """Compile the shim with Maven against the installed PySpark's jars; install the jar.

    Installing copies it into ``pyspark/jars`` (``$SPARK_HOME/jars``), so drivers and
    executors (also ``local-cluster``'s separate JVMs) have it on their class path and
    ``spark-defaults.conf`` needs no jar path.
    """
    import pyspark

    source = _source_dir()
    if not (source / "pom.xml").is_file():
        msg = f"no shim sources at {source}: build from a source checkout"
        raise ShimError(msg)
    for tool, hint in (("java", "install Java 17"), ("mvn", "install Maven 3.8+")):
        if shutil.which(tool) is None:
            msg = f"`{tool}` is not on PATH; the shim build needs it. Hint: {hint}"
            raise ShimError(msg)
    jars = sorted(str(p) for p in spark_jars_dir().glob("*.jar") if p.name != JAR_NAME)
    command = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(source / "pom.xml"),
        "package",
        f"-Dspark.version={pyspark.__version__}",
        f"-Dshim.classpath={os.pathsep.join(jars)}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        msg = f"the shim build failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
        raise ShimError(msg)
    built = source / "target" / JAR_NAME
    check_jar(built)
    if not install:
        return built
    target = spark_jars_dir() / JAR_NAME
    shutil.copyfile(built, target)
    return target


class Shim:
    """A client of the running shim's endpoint (driver host only).

    :meth:`find` returns None when no shim runs in this Spark application (the plugin is not
    configured); callers then do without what it offers.
    """

    def __init__(self, port: int, secret: str, card: Mapping[str, Any]) -> None:
        self.port = port
        self.secret = secret
        self.card = dict(card)

    @classmethod
    def find(cls, local_dirs: str | None = None) -> Shim | None:
        """The shim of the Spark application that started this process, if it runs one."""
        dirs = local_dirs if local_dirs is not None else os.environ.get("SPARK_LOCAL_DIRS", "")
        for folder in filter(None, dirs.split(",")):
            path = Path(folder) / RENDEZVOUS
            try:
                card = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            return cls(int(card["port"]), str(card["secret"]), card)
        return None

    @classmethod
    def of_session(cls, spark: Any) -> Shim | None:
        """The shim of ``spark``'s application, from the driver's Python process."""
        jvm = spark.sparkContext._jvm
        try:
            dirs = jvm.io.flamestream.shim.FlameStreamPlugin.rendezvousDirs()
        except Exception:  # the class is not on the driver's class path
            return None
        return cls.find(str(dirs)) if dirs else None

    def request(self, op: str, timeout: float = 5.0, **fields: Any) -> dict[str, Any]:
        """Send one request; the reply's fields. Raises ShimError if it fails."""
        message = json.dumps({"secret": self.secret, "op": op, **fields}) + "\n"
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as conn:
                conn.sendall(message.encode("utf-8"))
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as exc:
            msg = f"flamestream shim endpoint on port {self.port}: {exc}"
            raise ShimError(msg) from exc
        reply: dict[str, Any] = json.loads(data or b"{}")
        if "error" in reply:
            msg = f"flamestream shim: {reply['error']}"
            raise ShimError(msg)
        return reply

    def conf(self) -> tuple[dict[str, str], int | None]:
        """``spark.flamestream.*`` confs, and the context's default parallelism.

        The confs: the default session's (SET) over the Spark configuration. The parallelism
        is None before a session exists.
        """
        reply = self.request("conf")
        parallelism = reply.get("parallelism")
        return dict(reply["conf"]), int(parallelism) if parallelism else None

    def spark_conf(self, keys: list[str]) -> dict[str, str]:
        """The values of Spark confs ``keys``: the default session's SQL conf over Spark's.

        A SQL conf's default counts as a value; keys without one are left out.
        """
        return dict(self.request("sparkConf", keys=list(keys))["values"])

    def push_metrics(self, scope: str, values: Mapping[str, float]) -> None:
        """Set gauges ``<scope>.<name>`` in Spark's metrics system (best effort)."""
        with contextlib.suppress(ShimError):  # metrics must never fail a batch
            self.request("metrics", timeout=2.0, scope=scope, values=dict(values))

    def progress(self, match: str = "", last: int = 0) -> dict[str, list[dict[str, Any]]]:
        """Recent progress events per query id, oldest first (needs the progress listener).

        ``match``: only events whose JSON contains it; ``last``: only that many per query.
        """
        raw = self.request("progress", match=match, last=last)["progress"]
        return {query: [json.loads(e) for e in events] for query, events in raw.items()}

    def tasks(self) -> dict[str, list[dict[str, Any]]]:
        """Per query id, recent batches' tasks per stage: [partition, ms, rows in, rows out]."""
        return dict(self.request("tasks")["tasks"])

    def executors(self) -> Executors:
        """The application's live executors and their cores (the plugin's listener's view)."""
        reply = self.request("executors")
        return Executors(
            executors=int(reply["executors"]),
            cores=int(reply["cores"]),
            hosts=tuple(
                (str(e["id"]), str(e["host"]), int(e["cores"])) for e in reply.get("list", [])
            ),
            added=int(reply.get("added", 0)),
            removed=int(reply.get("removed", 0)),
            changed_at=int(reply["changedAt"]) / 1000 if "changedAt" in reply else None,
        )


@dataclass(frozen=True)
class Executors:
    """The live executors of a Spark application, as the scheduler announced them.

    On ``local[N]`` the driver is the one executor, with ``N`` cores; on a cluster each
    executor a Worker started (or dynamic allocation asked for) counts until it is removed.
    """

    executors: int  #: live executors
    cores: int  #: their cores in total: how many tasks the application runs at once
    hosts: tuple[tuple[str, str, int], ...] = ()  #: (executor id, host, cores) of each
    added: int = 0  #: executors ever added
    removed: int = 0  #: executors ever removed
    #: when the set last changed (epoch s): the scheduler's time of the last executor added
    #: (its registration) or removed; None from a shim that does not say
    changed_at: float | None = None

    def as_dict(self) -> dict[str, int]:
        """``{"executors": n, "cores": c}``."""
        return {"executors": self.executors, "cores": self.cores}


def cluster_executors(shim: Shim | None = None) -> Executors | None:
    """The live executors and cores of the application that started this process.

    For the driver host's Python processes Spark starts (the fronts' and the control
    channel's source process, sink commits), which have no Spark session: asked of the shim's
    endpoint. None without a running shim (the plugin is not configured) or when it does not
    answer; callers then keep what they decided last.
    """
    shim = shim if shim is not None else Shim.find()
    if shim is None:
        return None
    try:
        return shim.executors()
    except (ShimError, KeyError, ValueError):
        return None


def conf_defaults(shim: Shim | None = None) -> dict[str, str]:
    """Option defaults from ``spark.flamestream.*`` confs: ``{option name: value}``.

    Without such a conf, ``readTasks`` defaults to the Spark context's default parallelism
    (a front's batch then takes one wave of read tasks). Empty without a running shim
    (options then come from ``.option(...)`` alone).
    """
    shim = shim if shim is not None else Shim.find()
    if shim is None:
        return {}
    try:
        confs, parallelism = shim.conf()
    except ShimError:
        return {}
    defaults = {key[len(CONF_PREFIX) :]: value for key, value in confs.items()}
    if parallelism and not any(key.lower() == "readtasks" for key in defaults):
        defaults["readTasks"] = str(parallelism)
    return defaults


def spark_confs(keys: list[str], shim: Shim | None = None) -> dict[str, str]:
    """The values of Spark's own confs ``keys`` in this application (set, or defaults).

    Empty without a running shim: callers then take Spark's defaults. For the driver host's
    Python processes, which have no session: a sink that keeps a log Spark reads mirrors
    Spark's settings for it.
    """
    shim = shim if shim is not None else Shim.find()
    if shim is None:
        return {}
    try:
        return shim.spark_conf(keys)
    except (ShimError, KeyError):  # an older shim jar answers "unknown op"
        return {}


def main(argv: list[str]) -> int:
    """``python -m flamestream.jvm build | install | path``."""
    command = argv[0] if argv else "path"
    try:
        if command == "build":
            print(build())
        elif command == "install":
            print(install_jar())
        elif command == "path":
            print(locate_jar())
        else:
            print(__doc__)
            return 2
    except ShimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
