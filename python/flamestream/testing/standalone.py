"""A real Spark standalone cluster (a Master and Workers) for tests and benchmarks, on loopback.

:class:`StandaloneCluster` starts ``org.apache.spark.deploy.master.Master`` and one
``org.apache.spark.deploy.worker.Worker`` per worker through ``spark-class`` of the installed
pyspark, each a child process on free loopback ports with its log, work and conf directories in
one temporary directory, and returns once the Master's JSON endpoint lists every Worker ALIVE::

    with StandaloneCluster(workers=2) as cluster:
        spark = (
            SparkSession.builder.master(cluster.master_url)
            .config(map=cluster.app_conf())
            .getOrCreate()
        )

``app_conf()`` holds what an application needs on this cluster: the driver on loopback, one
core and a modest heap per executor, the executors' Python (``flamestream-python`` of this
virtualenv: it imports the flamestream installed here) and a wait for every executor before the
first task. The shim jar reaches the executors as it reaches the driver: from ``pyspark/jars``
(``make setup`` installs it there), the class path of every JVM ``spark-class`` starts.

Each process runs in its own session, so ``stop()`` also ends what it started (executors, their
Python daemons and workers), even after its Worker was killed. Needs ``java`` (17 or newer;
``JAVA_HOME`` is honoured).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

from flamestream.errors import FlameStreamError
from flamestream.python_env import worker_python
from flamestream.testing.services import LiveServices, free_ports

__all__ = ["StandaloneCluster", "StandaloneClusterError", "app_conf", "spark_class"]

logger = logging.getLogger(__name__)

_MASTER_MAIN = "org.apache.spark.deploy.master.Master"
_WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
_TAIL_LINES = 40
_POLL_S = 0.2
_START_ATTEMPTS = 3  # a free port can be taken by someone else before a daemon binds it

# The daemons' own JVMs: a small heap, C1 and the serial collector (they start faster and hold
# little; the executors they start get the application's settings instead).
_DAEMON_MEMORY = "256m"
_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class StandaloneClusterError(FlameStreamError):
    """The cluster did not start, a daemon exited early, or it did not serve before its deadline."""


def spark_class() -> Path:
    """``bin/spark-class`` of the pyspark this interpreter imports.

    Raises:
        StandaloneClusterError: the script is missing (a pyspark without its launcher).

    """
    script = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
    if not os.access(script, os.X_OK):
        msg = (
            f"cannot start a standalone cluster: {script} is missing or not executable. "
            "Hint: install pyspark from PyPI (`pip install pyspark`), which ships bin/spark-class"
        )
        raise StandaloneClusterError(msg)
    return script


def app_conf(executor_memory: str = "512m", executors: int = 2) -> dict[str, str]:
    """Spark settings for an application on a :class:`StandaloneCluster` of ``executors`` Workers.

    The driver binds and advertises loopback; each executor gets one core and
    ``executor_memory``; the executors run ``flamestream-python`` of this virtualenv (see
    :func:`flamestream.python_env.worker_python`); the first task waits until every executor
    registered, so a run's tasks spread over every Worker as they would on a warm cluster.
    """
    return {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.cores": "1",
        "spark.executor.memory": executor_memory,
        "spark.cores.max": str(executors),
        "spark.pyspark.python": worker_python(),
        "spark.executorEnv.PYSPARK_PYTHON": worker_python(),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    }


_LIVE: LiveServices[StandaloneCluster] = LiveServices()


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _session_members(sessions: set[int]) -> list[int]:
    """Pids of every live process whose session id is in ``sessions`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # after ")": state, ppid, pgrp, session; a zombie is dead already, only not reaped
        if int(fields[3]) in sessions and fields[0] != "Z":
            found.append(int(entry.name))
    return found


class _Daemon:
    """One Master or Worker process: its ports, log file and ``Popen``."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.name = name
        self.process = process
        self.port = port
        self.log = log
        self.killed = False  #: killed on purpose (kill_worker): not expected to run

    def exited(self) -> int | None:
        return self.process.poll()


class StandaloneCluster:
    """A Spark standalone Master and ``workers`` Workers, child processes on loopback ports.

    ``start()`` (or ``with StandaloneCluster() as cluster:``) starts them and returns once the
    Master lists every Worker ALIVE; ``stop()`` ends every process they started and removes the
    temporary directory. A test kills a Worker with :meth:`kill_worker` and starts it again with
    :meth:`restart_worker`, or starts one more with :meth:`add_worker`.

    Args:
        workers: how many Workers (each offers ``worker_cores`` cores and ``worker_memory``).
        worker_cores: cores each Worker offers.
        worker_memory: memory each Worker offers its executors (e.g. ``"1g"``).
        start_timeout: seconds ``start()`` waits for every Worker to be ALIVE.

    """

    def __init__(
        self,
        workers: int = 2,
        *,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        start_timeout: float = 120.0,
    ) -> None:
        self._count = workers
        self._cores = worker_cores
        self._memory = worker_memory
        self._start_timeout = start_timeout
        self._workdir: Path | None = None
        self._master: _Daemon | None = None
        self._webui_port: int | None = None
        self._workers: list[_Daemon] = []
        self._sessions: set[int] = set()  # every session a daemon of ours ever led

    # -- state ---------------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, the master URL applications connect to."""
        return f"spark://127.0.0.1:{self._started_master().port}"

    @property
    def webui_url(self) -> str:
        """The Master's web UI (``/json`` is its state as JSON)."""
        self._started_master()
        return f"http://127.0.0.1:{self._webui_port}"

    @property
    def workdir(self) -> Path:
        """The temporary directory: logs, the Workers' work directories (executor logs)."""
        if self._workdir is None:
            raise StandaloneClusterError(_NOT_STARTED)
        return self._workdir

    def workers(self) -> list[int]:
        """The Worker processes' pids, by index (a killed Worker's pid until it is restarted)."""
        return [worker.process.pid for worker in self._workers]

    def worker_alive(self, index: int) -> bool:
        """Whether Worker ``index``'s process is running."""
        return self._workers[index].exited() is None

    def app_conf(self, executor_memory: str = "512m") -> dict[str, str]:
        """Settings for an application on this cluster (see :func:`app_conf`)."""
        return app_conf(executor_memory, executors=self._count * self._cores)

    def state(self) -> dict[str, Any]:
        """The Master's state, as its ``/json`` endpoint serves it."""
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=5) as response:  # noqa: S310 - our own loopback URL
            state: dict[str, Any] = json.load(response)
        return state

    def worker_state(self, index: int) -> str | None:
        """Worker ``index``'s state as the Master sees it (``ALIVE``, ``DEAD`` …), or None."""
        port = self._workers[index].port
        for worker in self.state().get("workers", []):
            if worker.get("port") == port:
                return str(worker.get("state"))
        return None

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` lines of every daemon's log."""
        daemons = [d for d in [self._master, *self._workers] if d is not None]
        return "\n".join(f"--- {d.name} ({d.log.name}):\n{_tail(d.log, lines)}" for d in daemons)

    def _started_master(self) -> _Daemon:
        if self._master is None:
            raise StandaloneClusterError(_NOT_STARTED)
        return self._master

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> StandaloneCluster:
        """Start the Master and the Workers; wait until every Worker is ALIVE.

        Raises:
            StandaloneClusterError: ``spark-class`` is missing, a daemon exited, or the Workers
                were not ALIVE within ``start_timeout`` s; the message carries the logs' tails.

        """
        if self._master is not None:
            msg = f"the standalone cluster is already started at {self.master_url}"
            raise StandaloneClusterError(msg)
        started = time.monotonic()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._launch_all()
                self._wait_until_alive(started + self._start_timeout)
            except StandaloneClusterError:
                port_taken = "Address already in use" in self.log_tail(400)
                self.stop()
                if port_taken and attempt < _START_ATTEMPTS:
                    logger.warning("a port was taken before a Spark daemon bound it; retrying")
                    continue
                raise
            except BaseException:  # e.g. KeyboardInterrupt: leave no process or directory behind
                self.stop()
                raise
            break
        logger.info(
            "standalone cluster %s with %d Workers ALIVE after %.1f s (web UI %s, logs in %s)",
            self.master_url,
            self._count,
            time.monotonic() - started,
            self.webui_url,
            self.workdir,
        )
        return self

    def _launch_all(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="flamestream-standalone-"))
        (self._workdir / "conf").mkdir()
        _LIVE.add(self)
        port, self._webui_port = free_ports(2)
        args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(self._webui_port)]
        self._master = self._launch("master", _MASTER_MAIN, args, port)
        self._workers = [self._launch_worker(i) for i in range(self._count)]

    def _launch_worker(self, index: int, cores: int | None = None) -> _Daemon:
        port, webui = free_ports(2)
        work = self.workdir / f"work-{index}"
        work.mkdir(exist_ok=True)
        offered = str(cores if cores is not None else self._cores)
        args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)]
        args += ["--cores", offered, "--memory", self._memory, "--work-dir", str(work)]
        return self._launch(f"worker-{index}", _WORKER_MAIN, [*args, self.master_url], port)

    def _launch(self, name: str, main: str, args: list[str], port: int) -> _Daemon:
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_CONF_DIR=str(self.workdir / "conf"),  # none of a user's spark-env.sh
            SPARK_DAEMON_MEMORY=_DAEMON_MEMORY,
            SPARK_DAEMON_JAVA_OPTS=_DAEMON_JAVA_OPTS,
        )
        command = [str(spark_class()), main, *args]
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # the kernel kills the daemon when this process dies, even without atexit handlers
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,  # spark-class execs java: its pid leads the session
            )
        self._sessions.add(process.pid)
        logger.debug("started Spark %s pid %d: %s", name, process.pid, command)
        return _Daemon(name, process, port, log)

    def _wait_until_alive(self, deadline: float) -> None:
        """Poll the Master's ``/json`` until each running Worker of ours is listed ALIVE."""
        last_error: BaseException | None = None
        while True:
            for daemon in [self._started_master(), *self._workers]:
                if daemon.exited() is None or not self._expected_alive(daemon):
                    continue
                msg = (
                    f"Spark {daemon.name} (pid {daemon.process.pid}) exited with code "
                    f"{daemon.exited()} before the cluster was up. Logs:\n{self.log_tail()}"
                )
                raise StandaloneClusterError(msg)
            try:
                if self._all_alive():
                    return
            except (OSError, ValueError) as exc:  # not serving yet, or half a response
                last_error = exc
            if time.monotonic() > deadline:
                msg = (
                    f"the standalone cluster at {self.master_url} did not list every Worker "
                    f"ALIVE within {self._start_timeout:.0f} s (last error reading "
                    f"{self.webui_url}/json: {last_error!r}). Logs:\n{self.log_tail()}"
                )
                raise StandaloneClusterError(msg)
            time.sleep(_POLL_S)

    def _expected_alive(self, daemon: _Daemon) -> bool:
        """Whether ``daemon`` should be running: not a Worker this cluster was told to kill."""
        return not daemon.killed

    def _all_alive(self) -> bool:
        state = self.state()
        alive = {w.get("port") for w in state.get("workers", []) if w.get("state") == "ALIVE"}
        wanted = {w.port for w in self._workers if self._expected_alive(w)}
        return state.get("status") == "ALIVE" and wanted <= alive

    def kill_worker(self, index: int) -> int:
        """SIGKILL Worker ``index``'s process (only it: its executors then find it gone).

        Returns:
            the killed pid.

        """
        worker = self._workers[index]
        worker.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=30)
        logger.info("killed Spark %s (pid %d)", worker.name, worker.process.pid)
        return worker.process.pid

    def add_worker(self, timeout: float = 120.0, *, cores: int | None = None) -> int:
        """Start one more Worker on the running cluster and wait until the Master lists it ALIVE.

        An application whose ``spark.cores.max`` allows it gets an executor there at once (the
        Master schedules free cores when a Worker registers). ``cores``: what the new Worker
        offers (default: ``worker_cores``).

        Returns:
            the new Worker's index (for :meth:`kill_worker`, :meth:`worker_state` …).

        Raises:
            StandaloneClusterError: the cluster is not started, the Worker exited, or it was not
                ALIVE within ``timeout`` s (the message carries the logs' tails).

        """
        self._started_master()
        index = len(self._workers)
        self._workers.append(self._launch_worker(index, cores))
        self._wait_until_alive(time.monotonic() + timeout)
        logger.info("added Spark worker-%d (pid %d)", index, self._workers[index].process.pid)
        return index

    def restart_worker(self, index: int, timeout: float = 120.0) -> int:
        """Start Worker ``index`` again (after :meth:`kill_worker`) and wait until it is ALIVE.

        Returns:
            the new Worker's pid.

        """
        old = self._workers[index]
        if old.exited() is None:
            msg = f"Spark {old.name} (pid {old.process.pid}) is still running; kill it first"
            raise StandaloneClusterError(msg)
        old.log.replace(old.log.with_name(f"{old.name}.{old.process.pid}.log"))
        self._workers[index] = self._launch_worker(index)
        self._wait_until_alive(time.monotonic() + timeout)
        return self._workers[index].process.pid

    def stop(self, timeout: float = 30.0) -> None:
        """End every process of the cluster and remove its temporary directory.

        SIGTERM to the Workers and the Master (a Worker ends its executors), then, after at
        most ``timeout`` s, SIGKILL to every process still in one of their sessions (executors
        and Python workers a killed Worker left behind). Safe to call more than once, and on a
        cluster that never started.
        """
        daemons = [d for d in [*self._workers, self._master] if d is not None]
        for daemon in daemons:
            if daemon.exited() is None:
                with contextlib.suppress(ProcessLookupError):
                    daemon.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for daemon in daemons:
            try:
                daemon.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("Spark %s ignored SIGTERM; killing it", daemon.name)
        for pid in _session_members(self._sessions):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for daemon in daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(timeout=10)
        _LIVE.discard(self)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = self._master = self._webui_port = None
        self._workers = []
        self._sessions = set()

    # -- context manager -----------------------------------------------------------------

    def __enter__(self) -> StandaloneCluster:
        if self._master is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.master_url if self._master is not None else "not started"
        return f"StandaloneCluster({where}, {self._count} Workers)"


_NOT_STARTED = "the standalone cluster is not started; call start() or use it as a context manager"
