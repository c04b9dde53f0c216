"""What the project's real test services share: ports, process signals, logs, and cleanup.

The Kafka broker (:mod:`flamestream.testing.kafka`), the S3 server
(:mod:`flamestream.testing.seaweedfs`) and the Spark standalone cluster
(:mod:`flamestream.testing.standalone`) each run child processes on loopback ports: the pieces
below are the ones they do alike, so that a fix to one (a port race, a leaked process at exit)
reaches all three.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import socket
import subprocess
import threading
from pathlib import Path
from typing import Generic, Protocol, TypeVar

#: How much of a log (or of Maven's output) an error shows by default.
TAIL_LINES = 40


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports the OS considers free right now.

    All are held open until every one is chosen, so none is handed out twice; another process
    can still take one before the service binds it, which is why services retry their start.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_open(port: int) -> bool:
    """Whether something accepts connections on the loopback ``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of a file (a POM's, stamped beside the jars it resolved)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``, without terminal colours (Maven's, even with -B)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return "\n".join(text.rstrip().splitlines()[-lines:])


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to ``process`` and its children (its own session: pid = group id).

    A process that is gone already is not an error; one whose group cannot be signalled gets
    the signal alone.
    """
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass
    except OSError:
        process.send_signal(signum)


class Stoppable(Protocol):
    """A service that can be stopped within a timeout."""

    def stop(self, timeout: float = ...) -> None:
        """Stop every process of the service and remove its files."""


S = TypeVar("S", bound=Stoppable)


class LiveServices(Generic[S]):
    """The services of one kind still running, stopped at interpreter exit if nobody did.

    A test run that dies between a service's start and its ``stop`` must not leave a broker, an
    S3 server or a cluster behind on the machine.
    """

    def __init__(self) -> None:
        self._live: set[S] = set()
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def add(self, service: S) -> None:
        """Track a started service."""
        with self._lock:
            self._live.add(service)

    def discard(self, service: S) -> None:
        """Stop tracking a stopped service."""
        with self._lock:
            self._live.discard(service)

    def stop_all(self, timeout: float = 10.0) -> None:
        """Stop every tracked service."""
        with self._lock:
            services = list(self._live)
        for service in services:
            service.stop(timeout=timeout)
