"""A real single-node Apache Kafka broker (KRaft mode) for tests and demos, no manual steps.

:func:`ensure_kafka_jars` resolves the broker's jars from Maven Central once (with the POM
``kafka-pom.xml`` beside this module, package data of the wheel) into a cache directory.
:class:`KafkaBroker` formats a fresh log directory in a temporary directory, starts
``java kafka.Kafka`` on free loopback ports as a child process and waits until the broker
answers metadata requests::

    with KafkaBroker() as broker:
        broker.create_topic("words", partitions=3)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)

Needs ``java`` (17 or newer; ``JAVA_HOME`` is honoured) and, for the first download only,
``mvn``. Environment variables:

``FLAMESTREAM_KAFKA_JARS``
    the jar directory (default ``~/.cache/flamestream/kafka-<version>``, or under
    ``$XDG_CACHE_HOME``).
``FLAMESTREAM_KAFKA_POM``
    the POM to resolve the jars with (default: ``kafka-pom.xml`` beside this module).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from flamestream.errors import FlameStreamError
from flamestream.testing.services import (
    LiveServices,
    free_ports,
    port_open,
    sha256_of,
    signal_group,
    tail,
)

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with importlib.resources' legacy API on
    # import: two DeprecationWarnings per schema that nobody using this module can act on.
    warnings.filterwarnings(
        "ignore", r"(read|open)_text is deprecated", category=DeprecationWarning
    )
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaBrokerError",
    "KafkaSetupError",
    "default_kafka_jars_dir",
    "ensure_kafka_jars",
]

logger = logging.getLogger(__name__)

#: The Apache Kafka release the broker runs; keep in step with ``kafka.version`` in the POM.
KAFKA_VERSION = "4.3.1"

JARS_ENV = "FLAMESTREAM_KAFKA_JARS"
POM_ENV = "FLAMESTREAM_KAFKA_POM"

_MARKER = ".flamestream-kafka-jars.json"
_SERVER_MAIN = "kafka.Kafka"
_STORAGE_MAIN = "kafka.tools.StorageTool"
_MAVEN_TIMEOUT_S = 15 * 60
_TAIL_LINES = 40
_START_ATTEMPTS = 3  # a free port can be taken by someone else before the broker binds it
_POLL_S = 0.1

_LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = info
logger.apache.name = org.apache.kafka
logger.apache.level = info
# the full configuration dump, repeated per component; server.properties is next to this log
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
"""


class KafkaSetupError(FlameStreamError):
    """The broker's jars could not be resolved, or ``java``/``mvn`` is missing."""


class KafkaBrokerError(FlameStreamError):
    """The broker did not start, exited early or did not serve before its deadline."""


# -- jars --------------------------------------------------------------------------------------


def default_kafka_jars_dir() -> Path:
    """Where :func:`ensure_kafka_jars` puts the jars when neither argument nor env var says."""
    if env := os.environ.get(JARS_ENV):
        return Path(env).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "flamestream" / f"kafka-{KAFKA_VERSION}"


#: The POM that resolves the broker's jars: package data, beside this module.
BUNDLED_POM = Path(__file__).resolve().parent / "kafka-pom.xml"


def _find_pom() -> Path | None:
    if env := os.environ.get(POM_ENV):
        return Path(env).expanduser()
    return BUNDLED_POM if BUNDLED_POM.is_file() else None


def _jars_ready(target: Path, pom: Path | None) -> bool:
    """Whether ``target`` holds a complete copy made for this Kafka version (and this POM)."""
    try:
        stamp = json.loads((target / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("kafka_version") != KAFKA_VERSION:
        return False
    if pom is not None and pom.is_file() and stamp.get("pom_sha256") != sha256_of(pom):
        return False
    return (target / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file()


def _excerpt(text: str, lines: int = _TAIL_LINES) -> str:
    """The last ``lines`` lines of a JVM's output, after its first error lines above them.

    A failing broker ends with pages of stack frames and shutdown chatter; the line that says
    what went wrong (``Caused by: ...: Address already in use``) is often further up.
    """
    all_lines = text.rstrip().splitlines()
    head, tail = all_lines[:-lines], all_lines[-lines:]
    markers = (" ERROR ", "Exception in thread", "Caused by:")
    errors = [line for line in head if any(marker in line for marker in markers)][:8]
    if not errors:
        return "\n".join(tail)
    return "\n".join(["first errors:", *errors, "last lines:", *tail])


def _find_java() -> str:
    if java_home := os.environ.get("JAVA_HOME"):
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        msg = (
            "cannot start a Kafka broker: `java` is not on PATH (and JAVA_HOME/bin/java does "
            f"not exist). Kafka {KAFKA_VERSION} needs a Java 17+ runtime, e.g. "
            "`apt-get install openjdk-17-jre-headless`"
        )
        raise KafkaSetupError(msg)
    return found


def _pom_kafka_version(pom: Path) -> str | None:
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", pom.read_text())
    return match.group(1) if match else None


def ensure_kafka_jars(cache_dir: Path | None = None) -> Path:
    """Resolve the Kafka broker's jars (once) and return the directory holding them.

    The directory is ``cache_dir``, else ``$FLAMESTREAM_KAFKA_JARS``, else
    ``~/.cache/flamestream/kafka-<version>``. The first call runs
    ``mvn -B -q -f <pom> dependency:copy-dependencies -DoutputDirectory=<dir>`` (Maven keeps
    its downloads in ``~/.m2``, so later resolutions work offline) and writes a marker file
    last; once the marker is there (for this Kafka version and POM) the call only reads it.
    Concurrent callers are serialised with a file lock.

    Raises:
        KafkaSetupError: ``mvn`` or ``java`` is missing, the POM cannot be found or names
            another Kafka version, or Maven fails (the message carries Maven's last lines).

    """
    target = (cache_dir if cache_dir is not None else default_kafka_jars_dir()).expanduser()
    pom = _find_pom()
    if _jars_ready(target, pom):
        return target

    if pom is None or not pom.is_file():
        looked = os.environ.get(POM_ENV) or str(BUNDLED_POM)
        msg = (
            f"Kafka {KAFKA_VERSION} jars are not in {target} and the POM to resolve them "
            f"({looked}) was not found. Hint: reinstall flamestream (the POM is package data), "
            f"set {POM_ENV} to its kafka-pom.xml, or point {JARS_ENV} at a directory it filled"
        )
        raise KafkaSetupError(msg)
    pom_version = _pom_kafka_version(pom)
    if pom_version != KAFKA_VERSION:
        msg = (
            f"{pom} resolves Kafka {pom_version}, but flamestream.testing.kafka expects "
            f"{KAFKA_VERSION}. Hint: keep <kafka.version> and KAFKA_VERSION in step"
        )
        raise KafkaSetupError(msg)
    mvn = shutil.which("mvn")
    command = [
        mvn or "mvn",
        "-B",
        "-q",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={target}",
    ]
    if mvn is None:
        msg = (
            f"cannot resolve the Kafka {KAFKA_VERSION} jars: `mvn` is not on PATH. Install "
            f"Maven 3.6+ (e.g. `apt-get install maven`) and re-run, or run `{shlex.join(command)}` "
            "yourself"
        )
        raise KafkaSetupError(msg)
    _find_java()  # fail before a download that could not be used

    target.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{target.name}.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _jars_ready(target, pom):  # another process finished while we waited
                return target
            if (target / _MARKER).exists():  # our own stale copy: drop jars the POM lost
                for old in target.glob("*.jar"):
                    old.unlink()
                (target / _MARKER).unlink()
            _run_maven(command, target)
            stamp = {"kafka_version": KAFKA_VERSION, "pom_sha256": sha256_of(pom)}
            (target / _MARKER).write_text(json.dumps(stamp) + "\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _run_maven(command: list[str], target: Path) -> None:
    logger.info("resolving Kafka %s jars into %s (one-time): %s", KAFKA_VERSION, target, command)
    started = time.monotonic()
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_MAVEN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output if isinstance(exc.output, str) else ""
        msg = (
            f"`{shlex.join(command)}` did not finish in {_MAVEN_TIMEOUT_S} s. "
            f"Maven's last output:\n{tail(output)}"
        )
        raise KafkaSetupError(msg) from exc
    if done.returncode != 0:
        msg = (
            f"`{shlex.join(command)}` failed with exit code {done.returncode}. Hint: Maven Central "
            f"must be reachable the first time (later runs use ~/.m2). "
            f"Maven's last output:\n{tail(done.stdout)}"
        )
        raise KafkaSetupError(msg)
    if not (target / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        msg = (
            f"`{shlex.join(command)}` succeeded but left no "
            f"kafka_2.13-{KAFKA_VERSION}.jar in {target}"
        )
        raise KafkaSetupError(msg)
    logger.info("Kafka jars resolved in %.1f s", time.monotonic() - started)


# -- broker ------------------------------------------------------------------------------------

_LIVE: LiveServices[KafkaBroker] = LiveServices()


def _cluster_id() -> str:
    """A random Kafka cluster id (a base64url UUID), never one an argument parser misreads."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


class KafkaBroker:
    """A single-node Kafka broker+controller (KRaft) in a child JVM, on free loopback ports.

    ``start()`` (or ``with KafkaBroker() as broker:``) resolves the jars, formats a fresh log
    directory in a temporary directory, starts ``java kafka.Kafka`` and returns once the broker
    answers metadata requests; ``stop()`` ends the JVM and removes the temporary directory.
    The JVM runs in its own process group and is stopped at interpreter exit; on Linux, when
    started from the main thread, it also gets SIGKILL if this process dies abruptly.

    Args:
        jars_dir: the jar directory (default: :func:`ensure_kafka_jars`'s).
        start_timeout: seconds ``start()`` waits for the broker to serve.
        heap: the JVM's maximum heap (``-Xmx``).
        properties: extra or overriding ``server.properties`` entries.

    """

    def __init__(
        self,
        *,
        jars_dir: Path | None = None,
        start_timeout: float = 60.0,
        heap: str = "512m",
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self._jars_dir = jars_dir
        self._start_timeout = start_timeout
        self._heap = heap
        self._extra = dict(properties or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._port: int | None = None
        self._controller_port: int | None = None

    # -- state ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the broker's JVM is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:<port>"`` of the PLAINTEXT listener, for Kafka clients."""
        return f"127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        """The broker (PLAINTEXT) listener's port."""
        if self._port is None:
            msg = "the Kafka broker is not started; call start() or use it as a context manager"
            raise KafkaBrokerError(msg)
        return self._port

    @property
    def controller_port(self) -> int:
        """The KRaft controller listener's port."""
        if self._controller_port is None:
            msg = "the Kafka broker is not started; call start() or use it as a context manager"
            raise KafkaBrokerError(msg)
        return self._controller_port

    @property
    def log_path(self) -> Path:
        """The broker's log file (stdout and stderr of the JVM); removed by ``stop()``."""
        if self._workdir is None:
            msg = "the Kafka broker is not started, so it has no log"
            raise KafkaBrokerError(msg)
        return self._workdir / "broker.log"

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` lines of the broker's log ("" when there is none)."""
        return tail(self._log_text(), lines)

    def _log_text(self) -> str:
        if self._workdir is None:
            return ""
        try:
            return (self._workdir / "broker.log").read_text(errors="replace")
        except OSError:
            return ""

    def _log_excerpt(self) -> str:
        return _excerpt(self._log_text())

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> KafkaBroker:
        """Start the broker and wait (up to ``start_timeout`` s) until it serves.

        Raises:
            KafkaSetupError: the jars cannot be resolved or ``java`` is missing.
            KafkaBrokerError: formatting failed, the JVM exited, or it did not serve in time;
                the message carries the tail of the broker's log.

        """
        if self._process is not None:
            msg = f"the Kafka broker is already started on {self.bootstrap_servers}"
            raise KafkaBrokerError(msg)
        jars = ensure_kafka_jars(self._jars_dir)
        java = _find_java()
        started = time.monotonic()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._launch(java, jars)
                self._wait_until_serving(started + self._start_timeout)
            except KafkaBrokerError:
                port_taken = "Address already in use" in self._log_text()
                self.stop()
                if port_taken and attempt < _START_ATTEMPTS:
                    logger.warning("a Kafka port was taken before the broker bound it; retrying")
                    continue
                raise
            except BaseException:  # e.g. KeyboardInterrupt: leave no JVM or directory behind
                self.stop()
                raise
            break
        logger.info(
            "Kafka %s broker serving on %s (controller port %d) after %.1f s, log %s",
            KAFKA_VERSION,
            self.bootstrap_servers,
            self.controller_port,
            time.monotonic() - started,
            self.log_path,
        )
        return self

    def _server_properties(self, workdir: Path) -> dict[str, str]:
        port, controller = self.port, self.controller_port
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(workdir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            # one node: every internal topic has one replica, and few partitions start faster
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "5",
        }
        properties.update(self._extra)
        return properties

    def _launch(self, java: str, jars: Path) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="flamestream-kafka-"))
        self._port, self._controller_port = free_ports(2)
        workdir = self._workdir
        properties = workdir / "server.properties"
        properties.write_text(
            "".join(f"{key}={value}\n" for key, value in self._server_properties(workdir).items())
        )
        log4j = workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2_PROPERTIES)
        common = [f"-Dlog4j2.configurationFile={log4j}", "-cp", str(jars / "*")]

        fmt = [java, "-Xmx256m", *common, _STORAGE_MAIN, "format"]
        fmt += ["-t", _cluster_id(), "-c", str(properties)]
        formatted = subprocess.run(  # noqa: S603 - fixed argv, no shell
            fmt,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
            check=False,
        )
        (workdir / "format.log").write_text(formatted.stdout)
        if formatted.returncode != 0:
            msg = (
                f"formatting the Kafka log directory failed (exit code {formatted.returncode}): "
                f"`{shlex.join(fmt)}`. Its output:\n{_excerpt(formatted.stdout)}"
            )
            raise KafkaBrokerError(msg)

        command = [java, f"-Xmx{self._heap}", "-Djava.awt.headless=true", *common]
        command += [_SERVER_MAIN, str(properties)]
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # the kernel kills the JVM when this process dies, even without atexit handlers
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
        with (workdir / "broker.log").open("wb") as log:
            self._process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                start_new_session=True,
            )
        _LIVE.add(self)
        logger.debug("started Kafka broker pid %d: %s", self._process.pid, command)

    def _wait_until_serving(self, deadline: float) -> None:
        assert self._process is not None  # noqa: S101 - set by _launch
        last_error: BaseException | None = None
        while True:
            code = self._process.poll()
            if code is not None:
                msg = (
                    f"the Kafka broker exited with code {code} before serving on "
                    f"{self.bootstrap_servers}. The broker log:\n"
                    f"{self._log_excerpt()}"
                )
                raise KafkaBrokerError(msg)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = (
                    f"the Kafka broker did not serve on {self.bootstrap_servers} within "
                    f"{self._start_timeout:.0f} s (last client error: {last_error!r}). "
                    f"The broker log:\n{self._log_excerpt()}"
                )
                raise KafkaBrokerError(msg)
            if port_open(self.port):
                try:
                    admin = KafkaAdminClient(
                        bootstrap_servers=self.bootstrap_servers,
                        client_id="flamestream-kafka-probe",
                        bootstrap_timeout_ms=max(100, int(min(remaining, 5.0) * 1000)),
                        request_timeout_ms=5000,
                    )
                    try:
                        admin.list_topics()
                    finally:
                        admin.close()
                    return
                except (KafkaError, OSError) as exc:
                    last_error = exc
            time.sleep(_POLL_S)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after ``timeout`` s) and remove its directory.

        Safe to call more than once, and on a broker that never started.
        """
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                signal_group(process, signal.SIGTERM)
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    logger.warning("Kafka broker pid %d ignored SIGTERM; killing it", process.pid)
                    signal_group(process, signal.SIGKILL)
                    process.wait()
            # the process group may hold stragglers (setpriv execs java, so normally none)
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
        _LIVE.discard(self)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = None
        self._port = self._controller_port = None

    # -- topics --------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        configs: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create topic ``name`` and return once every partition has a leader in metadata.

        Raises:
            kafka.errors.TopicAlreadyExistsError: the topic exists.
            kafka.errors.KafkaTimeoutError: its metadata did not show up within ``timeout`` s.

        """
        deadline = time.monotonic() + timeout
        admin = KafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers, client_id="flamestream-kafka-admin"
        )
        try:
            spec = {
                "num_partitions": partitions,
                "replication_factor": 1,
                "configs": dict(configs or {}),
            }
            admin.create_topics({name: spec}, timeout_ms=int(timeout * 1000))
            remaining_ms = max(100, int((deadline - time.monotonic()) * 1000))
            admin.wait_for_topics([name], timeout_ms=remaining_ms)
            described = admin.describe_topics([name])
        finally:
            admin.close()
        found = len(described[0]["partitions"]) if described else 0
        if found != partitions:
            msg = f"topic {name!r}: expected {partitions} partitions in metadata, found {found}"
            raise KafkaBrokerError(msg)
        logger.debug("created topic %r with %d partitions", name, partitions)

    # -- context manager -----------------------------------------------------------------

    def __enter__(self) -> KafkaBroker:
        if self._process is None:
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
        where = self.bootstrap_servers if self._port is not None else "not started"
        return f"KafkaBroker({where})"
