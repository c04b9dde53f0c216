"""Warm starts: Spark's fresh Python processes, forked from one that has imported pyspark.

Spark starts a fresh interpreter for every Python daemon it needs (one per worker module: the
tasks', data source lookup, creation, read planning, writes, sink commits) and for every
streaming query's source runner (``python_streaming_source_runner``, a new process at each
query start). Each imports pyspark, pyarrow and the connector before it does anything: about
0.5 s of CPU here, on the query's critical path. The source runner alone was most of the time
a query took to start.

``flamestream-python`` (:mod:`flamestream.launcher`) asks a *warm server* instead: one process
per JVM and Python path that imported all of that once and forks a child per request. The
child takes the launcher's standard streams, environment, working directory and arguments
(and the JVM connection the launcher made), then runs the module as ``python -m`` would. The
launcher stays the process Spark started: it forwards signals to the child and exits with the
child's status.

The protocol, one request per connection on a Unix socket in a private per-user directory:

1. launcher -> server: a 4-byte request length, sent with the file descriptors (stdin, stdout,
   stderr, the read end of the launcher's watchdog pipe, and the JVM connection if there is
   one) as ``SCM_RIGHTS``; then the request (argv, environment, cwd, process group,
   connect-back address) as a Python literal: ``repr`` writes it, ``ast.literal_eval`` reads
   it (``json`` took 5 ms to import in every launcher);
2. the server forks the child and answers ``pid <n>``;
3. when the child has exited, the server sends ``exit <code>`` (negative: killed by a signal).

What keeps it safe:

* A child shares nothing with the server but the imported modules (copy on write), and runs
  with the request's environment entire; the server's key includes everything an interpreter
  reads from the environment only at its start (:data:`KEYED_ENV`: ``PYTHONPATH``, the hash
  seed, stdio and warnings settings, locale, time zone) and the interpreter itself.
* A child dies with its launcher, ``SIGKILL`` included: it watches a pipe whose write end only
  the launcher holds, and terminates itself at end of file.
* The server lives as long as the JVM whose process started it (a pidfd), or until its socket
  file is removed. A lock held for its whole life makes it the only one for its key.
* Whatever goes wrong before the child exists (no server yet, a refused or broken request),
  the launcher starts the module cold, exactly as without warm starts. The first launcher for a
  JVM starts the server in the background and starts cold itself; the next ones wait for a
  server that is still starting (up to :data:`STARTING_FOR` seconds after its launch).
* ``FLAMESTREAM_WARM_START=0`` turns it off.

The launcher's side imports only the standard library (it runs before pyspark may be
imported); :func:`serve` is the server, started as ``python -m flamestream.warm_start``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import socket
import struct
import sys

# Every launcher imports this module before it can hand its work to a warm process: only
# what a launcher needs is imported at the top (``typing`` alone took 16 ms, ``json`` 5)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, NoReturn

#: Set to ``0`` to start every Python process of Spark cold.
SWITCH = "FLAMESTREAM_WARM_START"
#: What an interpreter reads from the environment once, at its start (the import path, the
#: hash seed, stdio, warnings, locale, time zone): a request differing in one of them is
#: another server's. The rest of a request's environment is simply the child's.
KEYED_ENV = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONHASHSEED",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "PYTHONPLATLIBDIR",
    "PYTHONUNBUFFERED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONWARNINGS",
    "PYTHONOPTIMIZE",
    "PYTHONDEVMODE",
    "PYTHONFAULTHANDLER",
    "PYTHONMALLOC",
    "PYTHONDONTWRITEBYTECODE",
    "LC_ALL",
    "LC_CTYPE",
    "LANG",
    "TZ",
)
#: What a server imports before it forks: pyspark's worker modules, pyarrow, the connector
#: (and every front and sink module ``pyspark_flamestream`` names, see :func:`_preloaded`).
#: Best effort: a module that fails to import is left to the child.
PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "pyspark.sql.worker.python_streaming_sink_runner",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyarrow.compute",
    "pyspark_flamestream",
    "flamestream.spark.exec.general.keyed",
    "flamestream.spark.exec.declared.summed",
    "flamestream.spark.exec.general.front_stage",
)
#: How long after a server's launch a start waits for it to listen (rather than start cold).
STARTING_FOR = 5.0
#: Signals a launcher passes on to its child.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_LENGTH = struct.Struct("!I")
#: The longest path a Unix socket may have on Linux (``sun_path``, with its final NUL).
_SOCKET_PATH_MAX = 108
#: How long the server waits for a request's bytes once connected.
_REQUEST_TIMEOUT = 5.0


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether warm starts are on (they are unless ``FLAMESTREAM_WARM_START=0``)."""
    return environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def server_base(environ: Mapping[str, str], jvm_pid: int) -> str | None:
    """The path (without suffix) of the server for this JVM and Python; None if unsafe.

    The directory is private to the user; a directory someone else owns (or others may
    write) turns warm starts off rather than trusting it.
    """
    root = environ.get("TMPDIR") or "/tmp"  # noqa: S108  (a private directory below it)
    directory = os.path.join(root, f"flamestream-warm-{os.getuid()}")
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    info = os.lstat(directory)
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not os.path.isdir(directory):
        return None
    keyed = [sys.executable, *(f"{name}={environ.get(name, '')}" for name in KEYED_ENV)]
    key = hashlib.sha256("\0".join(keyed).encode()).hexdigest()[:16]
    base = os.path.join(directory, f"{jvm_pid}-{key}")
    return base if len(os.fsencode(base + ".sock")) < _SOCKET_PATH_MAX else None


# -- the launcher's side ---------------------------------------------------------------------


def run_warm(argv: list[str], address: str | int | None, connection: Any) -> None:
    """Run ``python -m MODULE ARGS`` (``argv``) as a warm child; return only if none started.

    ``connection`` is the ``(sock_file, sock)`` the launcher made to the JVM (None for the
    daemon); the child gets the socket. Once the child exists this never returns: it exits
    with the child's status.
    """
    jvm_pid = os.getppid()
    base = server_base(os.environ, jvm_pid)
    if base is None:
        return
    server = _connect(base + ".sock") or _connect_when_started(base)
    if server is None:
        _start_server(base, jvm_pid)  # for the next process; this one starts cold
        return
    child = _request(server, argv, address, connection)
    if child is None:
        server.close()
        return
    pid, watchdog = child
    _let_go(connection)
    _follow(server, pid, watchdog)


def _connect_when_started(base: str) -> socket.socket | None:
    """The server that is starting for ``base`` once it listens; None if none is starting.

    A server's log file is made when it is launched, and it takes its lock once its
    interpreter runs. Waiting for it (it is already importing) is quicker than a cold start;
    one that has not listened :data:`STARTING_FOR` seconds after its launch, or that has
    ended without listening, is not waited for.
    """
    import time

    try:
        launched = os.stat(base + ".log").st_mtime
    except OSError:
        return None
    while time.time() < launched + STARTING_FOR:
        server = _connect(base + ".sock")
        if server is not None:
            return server
        # the lock is taken once the interpreter runs: give it a second to get there
        if time.time() > launched + 1 and not _server_alive(base):
            return None  # it ended without listening
        time.sleep(0.02)
    return None


def _let_go(connection: Any) -> None:
    """Close this process's copies of what the child now holds: the JVM sees one end."""
    if connection is not None:
        for part in connection:
            part.close()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def _connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _request(
    server: socket.socket, argv: list[str], address: str | int | None, connection: Any
) -> tuple[int, int] | None:
    """Send the request; the child's pid and the watchdog pipe's write end, or None."""
    request = {
        "argv": argv,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "pgid": os.getpgid(0),
        "address": address,
        "buffer": int(os.environ.get("SPARK_BUFFER_SIZE", 65536)),
    }
    body = repr(request).encode("utf-8", "surrogateescape")  # a literal: no json to import
    watch_read, watch_write = os.pipe()
    fds = [0, 1, 2, watch_read]
    if connection is not None:
        fds.append(connection[1].fileno())
    try:
        server.settimeout(_REQUEST_TIMEOUT)
        socket.send_fds(server, [_LENGTH.pack(len(body))], fds)
        server.sendall(body)
        reply = _line(server)
    except OSError:
        reply = None
    finally:
        os.close(watch_read)
    if reply is None or not reply.startswith("pid "):
        os.close(watch_write)  # a child that exists after all sees the end and stops
        return None
    server.settimeout(None)
    return int(reply[4:]), watch_write


def _line(sock: socket.socket) -> str | None:
    """One newline-ended line from ``sock``; None at end of stream."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            return None
        data += chunk
    return data.decode().strip()


def _follow(server: socket.socket, pid: int, watchdog: int) -> NoReturn:
    """Be the child for Spark: pass signals on, exit with its code. ``watchdog`` stays open."""

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    try:
        reply = _line(server)
    except OSError:
        reply = None
    if reply is not None and reply.startswith("exit "):
        code = int(reply[5:])
    else:  # the server is gone: wait for the child itself
        _wait_for(pid)
        code = 1
    _exit_as(code)


def _wait_for(pid: int) -> None:
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return  # already gone
    try:
        select.select([handle], [], [])
    finally:
        os.close(handle)


def _exit_as(code: int) -> NoReturn:
    """Exit with a child's exit code: a negative one is the signal that killed it."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def _start_server(base: str, jvm_pid: int) -> None:
    """Start the server in the background (a grandchild, so nobody here must reap it)."""
    if _server_alive(base):
        return
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return
    try:
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            log = os.open(base + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)
            os.dup2(log, 2)
            command = [sys.executable, "-m", "flamestream.warm_start", base, str(jvm_pid)]
            os.execv(sys.executable, command)  # noqa: S606
    finally:
        os._exit(0)


def _server_alive(base: str) -> bool:
    """Whether a server (starting or serving) holds the lock for ``base``."""
    import fcntl

    try:
        handle = os.open(base + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True  # cannot tell: do not start one
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(handle)  # releases the lock if taken
    return False


# -- the server ------------------------------------------------------------------------------


def serve(base: str, jvm_pid: int) -> None:
    """Serve warm starts for ``base`` until the JVM ``jvm_pid`` ends or the socket is removed."""
    import gc
    import importlib

    from flamestream.workers import share_zip_directories

    lock = os.open(base + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    if not _take(lock):
        return  # another server has the key
    try:
        jvm = os.pidfd_open(jvm_pid)
    except OSError:
        return  # the JVM is already gone
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the JVM's to handle
    _sweep(os.path.dirname(base))
    for module in _preloaded():
        try:
            importlib.import_module(module)
        except Exception as exc:
            print(f"flamestream warm start: not preloaded {module}: {exc!r}", file=sys.stderr)
    share_zip_directories()  # every child's tasks call invalidate_caches (workers.py says why)
    # read each zip's directory now, once: a child's first invalidate_caches (a source
    # runner's only one, at each query start) finds them unchanged instead of reading all
    # of pyspark.zip's again (about 50 ms of a query's start)
    importlib.invalidate_caches()
    gc.collect()
    gc.freeze()  # the imports stay shared with every child: the GC never touches their pages
    try:
        Server(base, jvm).run()
    finally:
        for suffix in (".lock", ".log"):
            path = base + suffix
            if suffix == ".lock" or os.path.getsize(path) == 0:
                os.unlink(path)


def _preloaded() -> list[str]:
    """:data:`PRELOAD`, then the front and sink modules of ``pyspark_flamestream``."""
    try:
        from pyspark_flamestream import connector_modules
    except Exception:  # the preload reports what fails; a child imports it or says why not
        return list(PRELOAD)
    return [*PRELOAD, *connector_modules()]


def _take(lock: int) -> bool:
    """Whether this process got the lock (launchers probe it for an instant: try a few times)."""
    import fcntl
    import time

    for _ in range(50):
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            time.sleep(0.002)
        else:
            return True
    return False


def _sweep(directory: str) -> None:
    """Remove what servers of JVMs that have ended left behind (unless a lock is still held).

    A server removes its files when it ends, but keeps a log it wrote to, and one that was
    killed keeps everything.
    """
    stems = {name.rpartition(".")[0] for name in os.listdir(directory)}
    for stem in stems:
        pid = stem.partition("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        base = os.path.join(directory, stem)
        if os.path.exists(base + ".lock") and _server_alive(base):
            continue  # still held: its server is alive
        for leftover in (".sock", ".log", ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + leftover)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Server:
    """The accept/fork/reap loop of :func:`serve` (module docstring: the protocol)."""

    def __init__(self, base: str, jvm: int) -> None:
        self.path = base + ".sock"
        self.jvm = jvm
        if os.path.lexists(self.path):
            os.unlink(self.path)  # a dead server's: the lock says none is alive
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.children: dict[int, socket.socket] = {}  # child pid -> its launcher's connection
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_write)

    def run(self) -> None:
        """Until the JVM ends or the socket file is gone: accept requests, reap children."""
        try:
            while os.path.exists(self.path):
                watched: list[Any] = [self.listener, self.jvm, self.wake_read]
                ready, _, _ = select.select(watched, [], [], 1)
                if self.wake_read in ready:
                    os.read(self.wake_read, 512)
                self._reap()
                if self.jvm in ready:
                    return
                if self.listener in ready:
                    self._accept()
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(_REQUEST_TIMEOUT)
            if not self._same_user(conn):
                conn.close()
                return
            head, fds, _, _ = socket.recv_fds(conn, _LENGTH.size, 8)
            while len(head) < _LENGTH.size:
                more = conn.recv(_LENGTH.size - len(head))
                if not more:
                    msg = "request cut short"
                    raise ConnectionError(msg)
                head += more
            request = _literal(_exactly(conn, _LENGTH.unpack(head)[0]))
            pid = os.fork()
            if pid == 0:
                self._become_child(request, fds, conn)
            conn.sendall(f"pid {pid}\n".encode())
            self.children[pid] = conn
        except (OSError, ValueError):
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    @staticmethod
    def _same_user(conn: socket.socket) -> bool:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        return bool(uid == os.getuid())

    def _reap(self) -> None:
        """Report each ended child to its launcher (a child no launcher waits for: reap it)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):  # else the launcher is gone
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()

    def _become_child(
        self, request: dict[str, Any], fds: list[int], conn: socket.socket
    ) -> NoReturn:
        """In the forked child: drop the server's parts, take the request's, run the module."""
        try:
            conn.close()
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGINT):
                signal.signal(signum, signal.SIG_DFL)
            self.listener.close()
            for fd in (self.jvm, self.wake_read, self.wake_write):
                os.close(fd)
            for conn in self.children.values():
                conn.close()
            run_child(request, fds)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(70)  # run_child exits itself; reaching here is a bug in the server


def _literal(body: bytes) -> dict[str, Any]:
    """A request as the launcher wrote it (``repr``), read safely (``ast.literal_eval``)."""
    import ast

    request: dict[str, Any] = ast.literal_eval(body.decode("utf-8", "surrogateescape"))
    return request


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 16))
        if not chunk:
            msg = "request cut short"
            raise ConnectionError(msg)
        data += chunk
    return data


#: pyspark's connect-back timeout default (``SPARK_AUTH_SOCKET_TIMEOUT``), in seconds.
AUTH_TIMEOUT = 15


def auth_timeout() -> int:
    """The timeout pyspark's ``local_connect_and_auth`` gives the socket it returns."""
    return int(os.environ.get("SPARK_AUTH_SOCKET_TIMEOUT", AUTH_TIMEOUT))


def hand_over(address: str | int, connection: tuple[Any, socket.socket]) -> None:
    """Make pyspark's connect-back return ``connection``, once, for ``address``.

    The hand-over of a connection made before pyspark was imported: the launcher's cold path
    and a warm child both call it (this module owns it; the launcher imports this module).
    """
    import pyspark.util
    import pyspark.worker_util

    original = pyspark.util.local_connect_and_auth
    pending = [connection]

    def local_connect_and_auth(conn_info: Any, auth_secret: Any) -> tuple[Any, Any]:
        if pending and conn_info == address:
            return pending.pop()
        return original(conn_info, auth_secret)

    # worker_util imported the name from util: replace it in both
    pyspark.util.local_connect_and_auth = local_connect_and_auth
    setattr(pyspark.worker_util, "local_connect_and_auth", local_connect_and_auth)  # noqa: B010


def run_child(request: dict[str, Any], fds: list[int]) -> NoReturn:
    """Become the process the request describes and run its module; exit with its code."""
    stdin, stdout, stderr, watchdog, *connection = fds
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    with contextlib.suppress(OSError):  # the launcher's group: a kill of the group reaches it
        os.setpgid(0, request["pgid"])
    _watch(watchdog)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    _, module, *args = request["argv"]  # -m MODULE ARGS
    if connection:
        sock = socket.socket(fileno=connection[0])
        # the launcher's socket had a timeout, so its descriptor is non-blocking, but a socket
        # made from a descriptor has none: a worker that keeps pyspark's default (it does not
        # set one itself, e.g. transformWithStateInPandas's driver worker) then read nothing
        # before the JVM wrote and took it for the end of the stream. As pyspark returns it:
        sock.settimeout(auth_timeout())
        hand_over(request["address"], (sock.makefile("rwb", request["buffer"]), sock))
    code = 0
    try:
        import runpy

        sys.argv = [module, *args]
        sys.path[0] = os.getcwd()
        sys.modules.pop(module, None)  # run as __main__, as `python -m` would: fresh
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _code_of(exc)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _exit_as_python_would(code)


def _exit_as_python_would(code: int) -> NoReturn:
    """End as an interpreter does: wait for non-daemon threads, run ``atexit``, flush.

    Then ``os._exit``: what is left (the server's own state) must not run its exit code.
    """
    import atexit
    import threading

    with contextlib.suppress(Exception):
        getattr(threading, "_shutdown")()  # noqa: B009  (interpreter exit: joins non-daemon threads)
    with contextlib.suppress(Exception):
        getattr(atexit, "_run_exitfuncs")()  # noqa: B009
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _code_of(exc: SystemExit) -> int:
    """``python``'s exit code for an uncaught ``SystemExit``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _watch(fd: int) -> None:
    """Stop this process when the launcher is gone (the pipe's write end closed)."""
    import threading
    import time

    def watch() -> None:
        while os.read(fd, 64):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)
        os._exit(1)

    threading.Thread(target=watch, name="flamestream-warm-watchdog", daemon=True).start()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
