"""``flamestream-python``: a Python for Spark's workers that connects back before it imports.

Spark 4.x starts some Python processes as fresh interpreters (``python -m <module>``) and
gives each a fixed 10 s to connect back to the JVM (``PythonWorkerFactory.createSimpleWorker``:
``select(10000)``, no conf): the driver-side runner of every streaming Python data source
(``pyspark.sql.streaming.python_streaming_source_runner``), and every Python worker when
``spark.python.use.daemon`` is off. Each of those modules imports pyspark first and connects
after, so on a loaded machine (load 15+ on 2 cores) the import alone outlasts the 10 s and the
query fails at start with ``Python worker failed to connect back``.

This launcher turns the order around. Started as ``flamestream-python -m <module>`` by Spark
(``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` naming it in the environment the Spark JVM
starts with, as ``flamestream.configure`` sets them; Spark confs do not reach the data source
runners), it

1. sees from the environment Spark sets whether the process must connect back
   (``PYTHON_WORKER_FACTORY_PORT`` with ``PYTHON_WORKER_FACTORY_SECRET``, or
   ``PYTHON_WORKER_FACTORY_SOCK_PATH``); anything else (the daemon, ``-c``, a script,
   ``--version``) is handed to the real interpreter unchanged with ``exec``;
2. connects and authenticates with the standard library alone (``socket``, ``struct``): the
   protocol of ``pyspark.util.local_connect_and_auth``, whose reply the JVM waits for with
   its own timeout only after the connection is accepted;
3. imports pyspark and makes ``pyspark.util.local_connect_and_auth`` return that connection
   for the first call with the same address (``get_sock_file_to_executor`` then writes the pid
   and the module runs exactly as it would; other connections, e.g. a broadcast server's, go
   to the original function);
4. runs ``<module>`` as ``__main__`` (``runpy``, like ``python -m``).

Before any of that, a process started for a module (a worker, the daemon, a source runner)
gets ``python_env.ARROW_JEMALLOC_CONF`` in its environment unless the user set that variable:
jemalloc reads it once, when pyarrow loads, so a worker cannot set it for itself
(``flamestream.spark.exec.worker.worker_setup`` explains why workers keep freed pages). A process
the launcher runs for Spark (one that connects back, or the daemon and the workers it forks)
also gets ``python_env.LAUNCHED`` = the module, so that a query's source runner can tell it was
started the fast way (``flamestream.session.slow_runner_warning``).

What the process does after connecting is unchanged; the JVM waits for it without the 10 s
limit. Before step 2 the launcher imports only the standard library and two modules of
flamestream that do too (``warm_start``, ``python_env``); no pyspark (a test checks).
"""

from __future__ import annotations

import os
import socket
import struct
import sys

from flamestream import warm_start
from flamestream.python_env import ARROW_JEMALLOC_CONF, LAUNCHED

TYPE_CHECKING = False  # ``typing`` takes 16 ms to import, in every process Spark starts
if TYPE_CHECKING:
    from typing import Any

#: The module Spark starts as a daemon that forks workers: it does not connect back itself.
DAEMON = "pyspark.daemon"


def _module_of(argv: list[str]) -> tuple[str, list[str]] | None:
    """``(module, its arguments)`` for ``-m module args...``, else None."""
    if len(argv) >= 2 and argv[0] == "-m":
        return argv[1], argv[2:]
    return None


def connect_back_address(environ: dict[str, str]) -> str | int | None:
    """Where a fresh Spark worker process must connect back to, or None if it must not.

    >>> connect_back_address({"PYTHON_WORKER_FACTORY_PORT": "4040",
    ...                       "PYTHON_WORKER_FACTORY_SECRET": "s"})
    4040
    >>> connect_back_address({"PYTHON_WORKER_FACTORY_SOCK_PATH": "/tmp/w.sock"})
    '/tmp/w.sock'
    >>> connect_back_address({"PYTHON_WORKER_FACTORY_SECRET": "s"}) is None  # the daemon's
    True
    """
    path = environ.get("PYTHON_WORKER_FACTORY_SOCK_PATH")
    if path:
        return path
    port = environ.get("PYTHON_WORKER_FACTORY_PORT")
    if port and environ.get("PYTHON_WORKER_FACTORY_SECRET") is not None:
        return int(port)
    return None


def _write_with_length(data: bytes, out: Any) -> None:
    out.write(struct.pack("!i", len(data)))
    out.write(data)


def _read_utf8(stream: Any) -> str:
    header = stream.read(4)
    if len(header) < 4:
        return ""
    (length,) = struct.unpack("!i", header)
    return bytes(stream.read(length)).decode("utf-8")


def connect(address: str | int, secret: str | None) -> tuple[Any, socket.socket]:
    """Connect and authenticate as ``pyspark.util.local_connect_and_auth`` does.

    Returns ``(sock_file, sock)``. Raises ``OSError`` (or ``ConnectionError`` for a refused
    secret); the caller then lets pyspark's own function try, and report, as usual.
    """
    buffer = int(os.environ.get("SPARK_BUFFER_SIZE", 65536))
    if isinstance(address, str):  # a Unix domain socket: no secret
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(warm_start.auth_timeout())
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        return sock.makefile("rwb", buffer), sock
    host = "::1" if os.environ.get("SPARK_PREFER_IPV6", "false").lower() == "true" else "127.0.0.1"
    errors: list[OSError] = []
    for family, kind, proto, _, where in socket.getaddrinfo(
        host, address, socket.AF_UNSPEC, socket.SOCK_STREAM
    ):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(warm_start.auth_timeout())
            sock.connect(where)
            sock_file = sock.makefile("rwb", buffer)
            _write_with_length((secret or "").encode("utf-8"), sock_file)
            sock_file.flush()
            if _read_utf8(sock_file) != "ok":
                sock_file.close()
                msg = "the JVM refused the worker secret"
                raise ConnectionError(msg)
            return sock_file, sock
        except OSError as exc:
            sock.close()
            errors.append(exc)
    raise errors[-1] if errors else OSError(f"no address for {host}:{address}")


def _run_module(module: str, args: list[str]) -> None:
    """Run ``module`` as ``python -m module args`` would (``sys.path[0]`` is the directory)."""
    import runpy

    sys.argv = [module, *args]
    sys.path[0] = os.getcwd()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main(argv: list[str] | None = None) -> None:
    """The ``flamestream-python`` command: see the module docstring."""
    args = sys.argv[1:] if argv is None else argv
    target = _module_of(args)
    if target is not None:
        os.environ.setdefault(*ARROW_JEMALLOC_CONF)  # before pyarrow loads, here or after exec
    address = connect_back_address(dict(os.environ))
    daemon = target is not None and target[0] == DAEMON
    if target is None or (address is None and not daemon):
        os.execv(sys.executable, [sys.executable, *args])  # noqa: S606  (exactly `python ARGS`)
    module, module_args = target
    os.environ[LAUNCHED] = module  # inherited by the daemon's workers and the warm child
    connection = None
    if address is not None and not daemon:
        try:
            connection = connect(address, os.environ.get("PYTHON_WORKER_FACTORY_SECRET"))
        except OSError:
            connection = None  # pyspark's own connect tries again and reports its own error
    if warm_start.enabled(os.environ):
        # returns only if no warm child was started: then start cold, below
        warm_start.run_warm(args, address, connection)
    if daemon:
        os.execv(sys.executable, [sys.executable, *args])  # noqa: S606  (exactly `python ARGS`)
    if connection is not None and address is not None:
        warm_start.hand_over(address, connection)
    _run_module(module, module_args)


if __name__ == "__main__":
    main()
