"""What the crash tests share: child jobs a crash point may SIGKILL, chains of crashes, references.

A job module (``tests.spark.crash_job`` …) defines ``start(spark, …) -> StreamingQuery`` and
ends with ``job_main(start)``: the one place that reads a child's command line, arms the crash
points and builds its session (:func:`tests.sessions.local_session`). A test gives a child its
input, output and checkpoint folders (:func:`work_args`), runs it at a crash point
(:func:`crash_at`, which fails unless the point SIGKILLed it), crashes it at several points in
a row and then lets it finish (:func:`run_chain`), compares the files it released
(:func:`released_files`), and gets the reference output from the same query, never
interrupted, on the test session (:func:`run_unbroken`): no JVM to start, same session
settings.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.python_env import worker_python
from flamestream.spark.connector import faults

from .sessions import local_session

ROOT = Path(__file__).resolve().parents[1]

#: Every crash point, in the order a batch reaches them (``front.plan`` computes the batch's
#: end offset; the kafka sink's transaction and the files sink's publishing of its parts run
#: inside the release).
PIPELINE = (
    "front.plan",
    "control.plan",
    "front.read",
    "graph.loop.received",
    "graph.loop.sent",
    "graph.keyed.saved",
    "sink.write",
    "sink.commit.start",
    "sink.kafka.in_transaction",
    "sink.delta.writing",
    "sink.commit.published",
    "sink.commit.released",
    "sink.commit.marked",
)
assert set(faults.POINTS) <= set(PIPELINE)

#: A query of a child job, started on the given session.
Start = Callable[[SparkSession], StreamingQuery]


def job_arguments(argv: Sequence[str]) -> tuple[list[str], dict[str, str | bool]]:
    """A child job's command line: positional arguments, and options by keyword.

    ``--name=value`` is the keyword argument ``name`` (dashes become underscores), a bare
    ``--name`` is ``name=True``; everything else is positional, in order.

    >>> job_arguments(["in", "out", "--read-tasks=1,2", "--elastic"])
    (['in', 'out'], {'read_tasks': '1,2', 'elastic': True})
    """
    positional: list[str] = []
    options: dict[str, str | bool] = {}
    for arg in argv:
        if not arg.startswith("--"):
            positional.append(arg)
            continue
        name, is_set, value = arg[2:].partition("=")
        options[name.replace("-", "_")] = value if is_set else True
    return positional, options


def job_main(
    start: Callable[..., StreamingQuery],
    argv: Sequence[str] | None = None,
    conf: Mapping[str, str] | None = None,
) -> None:
    """A child job's main: arm the crash points, run ``start``'s query to its end, stop Spark.

    ``start(spark, *positional, **options)`` gets the command line (``argv``, default
    ``sys.argv[1:]``) as :func:`job_arguments` reads it, but ``--master=<master>``, the
    session's master (default ``local[2]``). ``conf``: more settings for the session.
    """
    args, options = job_arguments(sys.argv[1:] if argv is None else argv)
    master = str(options.pop("master", "local[2]"))
    faults.arm()  # a crash point anywhere kills this driver's whole process group
    names = (faults.ENV, faults.SCOPE_ENV, faults.ONCE_ENV)
    # executors in cluster modes are separate JVMs: they get the crash settings as environment
    crash = {f"spark.executorEnv.{n}": os.environ[n] for n in names if n in os.environ}
    spark = local_session(master, {**(conf or {}), **crash})
    query = start(spark, *args, **options)
    query.awaitTermination()
    spark.stop()


def work_args(work: Path, *more: str) -> list[str]:
    """A child's input, output and checkpoint folders in ``work`` (``in``, ``out``, ``ck``)."""
    return [str(work / name) for name in ("in", "out", "ck")] + list(more)


def released_files(out: Path, neutral: Path | None = None) -> dict[str, bytes]:
    """The files a sink released in ``out`` (``part-*``) by name, in name order.

    ``neutral``: a folder whose path (a row's source names its input file) becomes
    ``<work>`` in them, so that runs in two folders compare equal.
    """
    parts = sorted(out.glob("part-*"))
    if neutral is None:
        return {p.name: p.read_bytes() for p in parts}
    here = str(neutral).encode()
    return {p.name: p.read_bytes().replace(here, b"<work>") for p in parts}


def run_unbroken(start: Start, spark: SparkSession) -> None:
    """Run ``start``'s query on the test session to its end, never interrupted."""
    query = start(spark)
    finished = query.awaitTermination(300)
    if query.exception():
        raise query.exception()  # type: ignore[misc]
    if not finished:
        query.stop()
        raise AssertionError("the unbroken run did not finish in 300 s")


class ClassArchive:
    """The classes a child's driver JVM loads, archived once for the children after it (AppCDS).

    The first child run that ends normally writes the archive as its JVM exits; later driver
    JVMs map it instead of loading and verifying those classes again, which saves about a fifth
    of a child run's CPU time. It is used only after a JVM started with it: a truncated archive
    would crash every JVM that maps it. A JVM on another class path ignores it.
    """

    def __init__(self) -> None:
        self.path: Path | None = None  #: set when a child is asked to write the archive
        self.ready = False

    def option(self, clean_exit: bool) -> str:
        """The driver JVM option for a child: map the archive, write it (once), or nothing."""
        if self.ready:
            return f" -XX:SharedArchiveFile={self.path}"
        if not clean_exit or self.path is not None:
            return ""  # a JVM killed by a crash point writes nothing; one attempt only
        folder = tempfile.mkdtemp(prefix="flamestream-classes-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        self.path = Path(folder) / "driver.jsa"
        if any(c.isspace() or c in "'\"" for c in str(self.path)):
            return ""  # not quotable inside --driver-java-options
        return f" -XX:ArchiveClassesAtExit={self.path}"

    def written(self, done: subprocess.CompletedProcess[bytes]) -> None:
        """After the child asked to write it; its output is closed, so its JVM has exited."""
        if self.path is None or done.returncode != 0 or not self.path.exists():
            return
        home = os.environ.get("JAVA_HOME")  # the java spark-submit runs
        java = str(Path(home, "bin", "java")) if home else shutil.which("java")
        if java is not None:
            probe = [java, f"-XX:SharedArchiveFile={self.path}", "-version"]
            ran = subprocess.run(probe, capture_output=True, timeout=60, check=False)
            self.ready = ran.returncode == 0


#: The class archive of this test run's children.
CLASSES = ClassArchive()


def spawn(
    module: str, args: Sequence[str], env: Mapping[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m module *args`` from the project root with ``env`` added, to its end.

    The child gets its own process group (a crash kills that group, never the test runner),
    none of this process's ``FLAMESTREAM_CRASH_*`` variables, a driver JVM tuned to start
    fast, and Spark's scratch folders (``SPARK_LOCAL_DIRS``) in a folder removed when it
    ends; its output is captured.
    """
    full = {k: v for k, v in os.environ.items() if not k.startswith("FLAMESTREAM_CRASH")}
    full["PYSPARK_PYTHON"] = worker_python()
    # a SIGKILLed driver never runs the shutdown hooks that delete its scratch folders (with a
    # copy of every jar in spark.jars) and temporary files: left in /tmp, a day of crash tests
    # fills the disk
    scratch = tempfile.mkdtemp(prefix="flamestream-child-")
    full["SPARK_LOCAL_DIRS"] = scratch
    # short-lived driver JVMs: C1 only and the serial collector start about 20% faster, and
    # the class archive spares most of the class loading
    classes = CLASSES.option(clean_exit=faults.ENV not in env)
    options = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.io.tmpdir={scratch}" + classes
    full["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options '{options}' pyspark-shell"
    full.update(env)
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=full,
            start_new_session=True,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if "ArchiveClassesAtExit" in classes:
        CLASSES.written(done)
    return done


def run_child(module: str, args: Sequence[str], crash_at: str | None = None) -> int:
    """Run the job ``module``; return 0, or -SIGKILL if the crash point ``crash_at`` killed it.

    Any other exit fails the calling test with the child's stderr.
    """
    done = spawn(module, args, {faults.ENV: crash_at} if crash_at else {})
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(done.stderr.decode()[-3000:])
    return done.returncode


def crash_at(module: str, args: Sequence[str], crash: str) -> None:
    """Run the job ``module`` with the crash point ``crash``, which must SIGKILL it."""
    assert run_child(module, args, crash) == -signal.SIGKILL, f"{crash} was never reached"


def run_chain(
    module: str,
    args: Sequence[str],
    crashes: Sequence[str],
    after_crash: Callable[[str], None] | None = None,
) -> None:
    """Kill the child at each crash in turn, each run restarting from the last, then finish it.

    ``after_crash(crash)`` checks what is visible after each crash (before the restart).
    """
    for crash in crashes:
        crash_at(module, args, crash)
        if after_crash is not None:
            after_crash(crash)
    assert run_child(module, args) == 0


def released_so_far_is(
    unbroken: Mapping[str, bytes], released: Callable[[], Mapping[str, bytes]]
) -> Callable[[str], None]:
    """An ``after_crash`` check: every output ``released()`` shows is the unbroken run's."""

    def check(crash: str) -> None:
        so_far = released()
        assert so_far == {name: unbroken.get(name) for name in so_far}, f"after {crash}"

    return check


def reachable_in_turn(chain: Sequence[str]) -> bool:
    """Whether each crash of ``chain`` comes later in the run than the one before it.

    Later: a later batch, or the same batch at a later point of :data:`PIPELINE`. The restart
    after a crash redoes the crashed batch from its logged offsets (or plans it again after
    ``front.plan``) and reaches every later point, so each crash of such a chain happens.
    """
    order = []
    for crash in chain:
        point, batch = crash.rsplit(":", 1)
        order.append((int(batch), PIPELINE.index(point)))
    return all(a < b for a, b in pairwise(order))
