"""Warm starts: flamestream-python hands Spark's processes to a warm server that forks them.

Each test gets its own server (``TMPDIR`` is the test's directory; the server is keyed by the
launcher's parent, this test process) and removes its socket at the end, which stops it. A
stand-in JVM (``tests.unit.test_launcher``'s protocol) accepts the probe's connection.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flamestream import warm_start

from .test_launcher import LAUNCHER, ROOT, read_exactly, read_with_length

PROBE = "tests.unit.warm_probe"


class Started:
    """A probe started through the launcher, its connection accepted as the JVM would."""

    def __init__(
        self, env: dict[str, str], *args: str, cwd: Path = ROOT, reply: bytes = b""
    ) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(60)
        self.launcher = subprocess.Popen(
            [LAUNCHER, "-m", PROBE, *args],
            cwd=cwd,
            env=dict(
                env,
                PYTHON_WORKER_FACTORY_PORT=str(self.listener.getsockname()[1]),
                PYTHON_WORKER_FACTORY_SECRET="s3cret",  # noqa: S106  (a test secret)
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(60)
            assert read_with_length(conn) == b"s3cret"
            conn.sendall(struct.pack("!i", 2) + b"ok")
            (self.pid,) = struct.unpack("!i", read_exactly(conn, 4))
            self.seen = json.loads(read_with_length(conn))
            if reply:  # late, as a JVM answering after some work
                time.sleep(0.5)
                conn.sendall(reply)

    def finish(self) -> tuple[int, str, str]:
        out, err = self.launcher.communicate(timeout=60)
        self.listener.close()
        return self.launcher.returncode, out.decode(), err.decode()

    @property
    def warm(self) -> bool:
        """Whether the probe ran in another process than the launcher (a warm child)."""
        return self.pid != self.launcher.pid


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    """The launcher's environment, with a warm server private to the test.

    Its directory is short, not pytest's ``tmp_path``: a Unix socket's path has 107 bytes.
    """
    private = Path(tempfile.mkdtemp(prefix="fsw"))
    made = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON_WORKER_FACTORY")}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    made.update(TMPDIR=str(private), PROBE_VALUE="v1", PYTHONPATH=path)  # the probe from anywhere
    made.pop(warm_start.SWITCH, None)
    yield made
    for sock in private.glob("flamestream-warm-*/*.sock"):
        sock.unlink()  # the server stops when it sees its socket gone
    shutil.rmtree(private, ignore_errors=True)


def server_socket(env: dict[str, str]) -> Path:
    base = warm_start.server_base(env, os.getpid())
    assert base is not None
    return Path(base + ".sock")


def warmed(env: dict[str, str]) -> None:
    """Start the server (the first launch does, then starts cold) and wait until it serves."""
    first = Started(env, "0")
    assert not first.warm  # no server yet: this one ran in the launcher itself
    assert first.finish()[0] == 0
    deadline = time.monotonic() + 60
    while not server_socket(env).exists():
        assert time.monotonic() < deadline, "the warm server never listened"
        time.sleep(0.05)


def test_a_warm_child_runs_the_module_as_python_m_would(env: dict[str, str], tmp_path: Path):
    warmed(env)
    probe = Started(dict(env, PROBE_VALUE="v2"), "3", "x y", cwd=tmp_path)
    code, out, err = probe.finish()
    assert probe.warm
    assert probe.seen["ppid"] != probe.launcher.pid  # forked by the server, not the launcher
    assert probe.seen["name"] == "__main__"
    assert probe.seen["argv"][1:] == ["3", "x y"]
    assert probe.seen["cwd"] == str(tmp_path)
    assert probe.seen["value"] == "v2"  # this request's environment, not the server's
    assert (code, out, err.strip().splitlines()[-1]) == (3, "probe out\n", "probe err")


def test_a_warm_childs_connection_waits_for_the_jvm_as_pyspark_s_own_does(env: dict[str, str]):
    """A worker that keeps pyspark's default timeout and reads before the JVM has written
    (transformWithStateInPandas's driver worker does) gets the bytes, not an end of stream:
    the handed socket is blocking with pyspark's timeout, as ``local_connect_and_auth``
    returns it, though the descriptor came from a launcher's socket with a timeout."""
    warmed(env)
    probe = Started(env, "0", "reply", reply=b"pong")
    code, _, err = probe.finish()
    assert probe.warm
    assert code == 0, err
    assert "reply pong" in err


def test_a_start_while_the_server_starts_waits_for_it_instead_of_starting_cold(
    env: dict[str, str],
):
    first = Started(env, "0")  # launches the server, starts cold
    assert first.finish()[0] == 0 and not first.warm
    second = Started(env, "0")  # at once: the server is still importing
    assert second.finish()[0] == 0
    assert second.warm


def test_a_warm_child_ends_as_an_interpreter_does(env: dict[str, str]):
    warmed(env)
    probe = Started(env, "0", "hooks")
    code, out, _ = probe.finish()
    assert probe.warm
    assert (code, out.splitlines()) == (0, ["probe out", "thread done", "atexit ran"])


def test_a_signal_to_the_launcher_reaches_the_child_and_its_end_is_the_launcher_s(
    env: dict[str, str],
):
    warmed(env)
    probe = Started(env, "0", "sleep")
    assert probe.warm
    probe.launcher.send_signal(signal.SIGTERM)
    code, _, _ = probe.finish()
    assert code == -signal.SIGTERM
    assert not Path(f"/proc/{probe.pid}").exists()


def test_a_child_whose_launcher_is_killed_ends_too(env: dict[str, str]):
    warmed(env)
    probe = Started(env, "0", "sleep")
    assert probe.warm
    probe.launcher.kill()
    probe.finish()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{probe.pid}").exists() and not _zombie(probe.pid):
        assert time.monotonic() < deadline, "the warm child outlived its launcher"
        time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False


def test_off_every_process_starts_cold_and_no_server_is_made(env: dict[str, str]):
    off = dict(env, **{warm_start.SWITCH: "0"})
    for _ in range(2):
        probe = Started(off, "0")
        assert not probe.warm
        assert probe.finish()[0] == 0
    time.sleep(0.5)
    assert not server_socket(env).exists()
    assert warm_start.enabled({}) and not warm_start.enabled({warm_start.SWITCH: "off"})


def test_the_server_is_per_python_path(env: dict[str, str], tmp_path: Path):
    other = dict(env, PYTHONPATH=env.get("PYTHONPATH", "") + os.pathsep + "elsewhere")
    assert server_socket(env) != server_socket(other)
    assert server_socket(env) == server_socket(dict(env, PROBE_VALUE="any"))
    assert server_socket(env) != server_socket(dict(env, TZ="Asia/Kolkata"))
    assert server_socket(env) != server_socket(dict(env, PYTHONHASHSEED="7"))
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    assert warm_start.server_base({"TMPDIR": str(deep)}, 1) is None  # no socket fits: cold


def test_what_servers_of_ended_jvms_left_is_swept(tmp_path: Path):
    directory = tmp_path / "warm"
    directory.mkdir(mode=0o700)
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no such process
    left = [directory / f"{dead}-k.{suffix}" for suffix in ("lock", "sock", "log")]
    left.append(directory / f"{dead}-logonly.log")  # a server that ended, keeping its log
    for path in left:
        path.touch()
    alive = directory / f"{os.getpid()}-k.lock"
    alive.touch()
    warm_start._sweep(str(directory))
    assert not any(path.exists() for path in left)
    assert alive.exists()


def test_the_warm_server_owns_the_hand_over_and_never_imports_the_launcher():
    code = "import sys, flamestream.warm_start; print('flamestream.launcher' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"  # the launcher imports warm_start, not the converse
