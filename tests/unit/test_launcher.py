"""flamestream-python connects back before it imports pyspark, and is plain Python otherwise.

The server here speaks the JVM's side of ``PythonWorkerFactory.createSimpleWorker``: accept,
read the secret (length-prefixed), answer ``ok``, read the worker's pid; then the probe module
sends when it was imported.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyspark.util
import pyspark.worker_util

from flamestream import launcher, python_env, warm_start

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = python_env.worker_python()


def read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        assert chunk, "the worker closed the connection"
        data += chunk
    return data


def read_with_length(conn: socket.socket) -> bytes:
    (length,) = struct.unpack("!i", read_exactly(conn, 4))
    return read_exactly(conn, length)


def serve_one(secret: str, env: dict[str, str] | None = None) -> dict[str, float]:
    """Start the probe through the launcher; return when it connected and when it was imported."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(60)
    port = server.getsockname()[1]
    started = time.time()
    child = subprocess.Popen(
        [LAUNCHER, "-m", "tests.unit.connect_probe"],
        cwd=ROOT,
        env=dict(
            os.environ,
            **(env or {}),
            PYTHON_WORKER_FACTORY_PORT=str(port),
            PYTHON_WORKER_FACTORY_SECRET=secret,
        ),
    )
    try:
        conn, _ = server.accept()
        accepted = time.time()
        with conn:
            conn.settimeout(60)
            if read_with_length(conn).decode() != secret:
                conn.sendall(struct.pack("!i", 3) + b"err")
                return {"refused": 1.0}
            conn.sendall(struct.pack("!i", 2) + b"ok")
            (pid,) = struct.unpack("!i", read_exactly(conn, 4))
            imported = float(read_with_length(conn))
        assert child.wait(60) == 0
        return {"started": started, "accepted": accepted, "imported": imported, "pid": pid}
    finally:
        server.close()
        if child.poll() is None:
            child.kill()


def test_the_worker_connects_back_before_its_module_is_imported():
    # Spark puts its pyspark.zip first on the path; the order must hold with it too
    got = serve_one("s3cret")
    assert got["accepted"] < got["imported"], got
    assert got["pid"] > 0


def test_the_launcher_is_installed_with_the_project():
    """make setup installs it (setup.cfg's console script); the suite runs Spark through it."""
    assert sys.executable != LAUNCHER
    assert os.access(LAUNCHER, os.X_OK)


def test_without_connect_back_it_is_the_plain_interpreter():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON_WORKER_FACTORY")}
    env.pop(python_env.LAUNCHED, None)
    code = "import os, sys; print(sys.executable, sys.argv[1:2], os.environ.get(sys.argv[2]))"
    done = subprocess.run(
        [LAUNCHER, "-c", code, "x", python_env.LAUNCHED],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    # not marked as launched: a driver started so may start Spark's runners without us
    assert done.stdout.split() == [sys.executable, "['x']", "None"]
    # the daemon forks workers and never connects back itself: it is handed over untouched
    daemon = [LAUNCHER, "-m", "pyspark.daemon"]
    assert launcher._module_of(daemon[1:]) == ("pyspark.daemon", [])


def test_the_launcher_module_imports_neither_pyspark_nor_pyarrow():
    code = (
        "import sys, flamestream.launcher; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'py4j', 'pyarrow', 'pandas')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


def test_hand_over_serves_its_address_once_and_other_connections_as_before(monkeypatch):
    monkeypatch.setattr(pyspark.util, "local_connect_and_auth", pyspark.util.local_connect_and_auth)
    monkeypatch.setattr(
        pyspark.worker_util, "local_connect_and_auth", pyspark.worker_util.local_connect_and_auth
    )
    calls: list[tuple[object, object]] = []

    def original(conn_info: object, auth_secret: object) -> tuple[str, str]:
        calls.append((conn_info, auth_secret))
        return ("file", "sock")

    monkeypatch.setattr(pyspark.util, "local_connect_and_auth", original)
    connection = ("made", "early")
    warm_start.hand_over(4040, connection)  # type: ignore[arg-type]
    patched = pyspark.worker_util.local_connect_and_auth
    assert patched(5050, "s") == ("file", "sock")  # another address: a broadcast server, say
    assert patched(4040, "s") == connection
    assert patched(4040, "s") == ("file", "sock")  # once only
    assert calls == [(5050, "s"), (4040, "s")]
    assert pyspark.util.local_connect_and_auth is patched


def jemalloc_probe(*, env: dict[str, str] | None = None, as_module: bool = True) -> Any:
    """What ``tests.unit.jemalloc_probe`` reports, started through the launcher."""
    probe = ["-m", "tests.unit.jemalloc_probe"] if as_module else ["tests/unit/jemalloc_probe.py"]
    environ = {k: v for k, v in os.environ.items() if k != python_env.ARROW_JEMALLOC_CONF[0]}
    done = subprocess.run(
        [LAUNCHER, *probe], cwd=ROOT, env={**environ, **(env or {})},
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_spark_processes_keep_arrow_pages_freed_in_jemalloc():
    """Started for a module (as Spark starts its Python processes), jemalloc keeps what is
    freed: a second buffer of the same size reuses the first one's pages instead of faulting
    them in again. A user's own options are kept; a script is left as it is."""
    name, value = python_env.ARROW_JEMALLOC_CONF
    ours = jemalloc_probe()
    assert ours["conf"] == value
    first, second = ours["faults"]
    assert first > 10_000 and second < first / 10, ours  # 64 MiB is 16,384 pages of 4 KiB
    assert jemalloc_probe(env={name: "narenas:2"})["conf"] == "narenas:2"
    assert jemalloc_probe(as_module=False)["conf"] is None


def test_a_session_without_the_recommended_conf_is_warned_about_once(caplog, monkeypatch):
    from types import SimpleNamespace

    from flamestream.spark import apply

    def session(conf: dict[str, str]) -> Any:
        return SimpleNamespace(sparkContext=SimpleNamespace(getConf=lambda: conf))

    monkeypatch.setattr(apply, "_warned", set())
    apply._check_recommended_conf(session(dict(python_env.RECOMMENDED_CONF)))
    assert not caplog.records  # all set: nothing to say
    apply._check_recommended_conf(session({}))
    apply._check_recommended_conf(session({}))
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "spark.python.unix.domain.socket.enabled is not true" in warned[0]


def test_every_recommended_setting_is_a_line_of_the_conf_file_users_add():
    """``RECOMMENDED_CONF`` (the sessions the project starts) and ``conf/spark-defaults.conf``
    (the lines users add, the tests' Spark conf) say the same: neither drifts alone."""
    conf_file = Path(__file__).resolve().parents[2] / "conf" / "spark-defaults.conf"
    lines = conf_file.read_text().splitlines()
    settings = dict(
        line.split(None, 1) for line in lines if line.strip() and not line.startswith("#")
    )
    for name, value in python_env.RECOMMENDED_CONF.items():
        assert settings.get(name, "").strip() == value, f"{name} {value} not in {conf_file.name}"
