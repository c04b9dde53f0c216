"""The resident memory of a Spark application's processes, by role, read from ``/proc``.

Roles: this (driver) Python process, the driver JVM, flamestream's warm servers
(``flamestream.warm_start``, one per JVM and Python path), and every Python process Spark
started, named by the module it runs (``pyspark.daemon`` and the task workers it forks,
``python_streaming_source_runner``, the sink's commit workers ...). With warm starts such a
process is a child forked by the warm server and shows the server's command line; its module
is the one of the launcher (``flamestream-python -m MODULE``) whose standard streams it took.
Processes of other applications on the machine are not counted: only this process's
descendants and the warm servers serving its JVM (their last argument is the JVM's pid).
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

#: What a warm server (and every process it forks) shows as its command line.
WARM = b"flamestream.warm_start"

#: Spark's driver JVM, started by PySpark's gateway.
DRIVER_JVM = b"org.apache.spark.deploy.SparkSubmit"


@dataclass(frozen=True)
class Proc:
    """One process: parent, command line (arguments), resident bytes."""

    pid: int
    parent: int
    command: tuple[bytes, ...]
    rss: int

    def runs(self, text: bytes) -> bool:
        """Whether ``text`` is in one of the arguments."""
        return any(text in part for part in self.command)

    def module(self) -> str | None:
        """The module after ``-m``, if any (``pyspark.daemon``'s: the worker module it forks)."""
        for at, flag in enumerate(self.command[:-1]):
            if flag == b"-m":
                module = self.command[at + 1].decode(errors="replace")
                if module == "pyspark.daemon" and at + 2 < len(self.command):
                    return "daemon:" + self.command[at + 2].decode(errors="replace")
                return module
        return None


def processes() -> dict[int, Proc]:
    """Every process on the machine (those that end meanwhile left out)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            fields = dict(line.split(":", 1) for line in status if ":" in line)
            rss = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
            found[int(pid)] = Proc(int(pid), int(fields["PPid"]), tuple(command), rss)
        except (OSError, ValueError, KeyError):
            continue
    return found


def _pipes(pid: int) -> set[str]:
    """The pipes the process holds (``pipe:[inode]``), empty if unreadable.

    A launcher keeps the write end of the watchdog pipe whose read end its warm child got.
    """
    found = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("pipe:"):
                    found.add(target)
    except OSError:
        pass
    return found


def _descendants(roots: set[int], every: dict[int, Proc]) -> set[int]:
    """``roots`` and every process below them."""
    children: dict[int, list[int]] = defaultdict(list)
    for proc in every.values():
        children[proc.parent].append(proc.pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _forked(proc: Proc, every: dict[int, Proc]) -> bool:
    """Whether ``proc`` was forked by a process with its command line (a server's child)."""
    parent = every.get(proc.parent)
    return parent is not None and parent.command == proc.command


def short(module: str) -> str:
    """A module's last name (``pyspark.sql.worker.x`` -> ``x``, ``daemon:a.b`` -> ``daemon:b``)."""
    prefix, _, name = module.rpartition(":")
    return (prefix + ":" if prefix else "") + name.rsplit(".", 1)[-1]


def _launched(pid: int, launchers: dict[str, str]) -> str:
    """A warm child's role: the module of the launcher holding one of its pipes."""
    for pipe in _pipes(pid):
        if pipe in launchers:
            return short(launchers[pipe])
    return "warm_child"


def application(driver: int, every: dict[int, Proc]) -> tuple[set[int], set[int], set[int]]:
    """The processes of the application driven by ``driver``: all, its JVMs, its warm servers.

    All: ``driver``'s descendants, and the warm servers serving its JVMs with theirs.
    """
    mine = _descendants({driver}, every)
    jvms = {pid for pid in mine if every[pid].runs(DRIVER_JVM)}
    jvm_pids = {str(pid).encode() for pid in jvms}
    servers = {
        p.pid
        for p in every.values()
        if p.runs(WARM) and p.command[-1] in jvm_pids and not _forked(p, every)
    }
    return mine | _descendants(servers, every), jvms, servers


def roles(driver: int | None = None) -> dict[str, tuple[int, int]]:
    """Per role: (processes, resident bytes together) of the application driven by ``driver``.

    ``driver`` is the driver's Python process (default: this one). A warm child is named by
    its launcher's module; a process forked by a warm child (a daemon's task worker) is
    ``<module>.fork``; a launcher itself is ``launcher``. Spark's daemons are
    ``daemon:<worker module>``, the workers they fork ``<worker module>.fork``.
    """
    driver = os.getpid() if driver is None else driver
    every = processes()
    mine, jvms, servers = application(driver, every)
    launchers = {
        pipe: every[pid].module() or "?"
        for pid in mine
        if not every[pid].runs(WARM) and every[pid].module()
        for pipe in _pipes(pid)
    }
    children = {pid for pid in mine if every[pid].parent in servers}
    handed = {pipe for pid in children for pipe in _pipes(pid)}
    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for pid in mine:
        if not every[pid].command[0]:
            continue  # a zombie
        proc = every[pid]
        if proc.module() and not proc.runs(WARM) and _pipes(pid) & handed:
            role = "launcher"  # its module runs in a warm child
        else:
            role = _role(every[pid], driver, jvms, servers, every, launchers)
        found[role][0] += 1
        found[role][1] += every[pid].rss
    return {role: (count, rss) for role, (count, rss) in sorted(found.items())}


def _role(
    proc: Proc,
    driver: int,
    jvms: set[int],
    servers: set[int],
    every: dict[int, Proc],
    launchers: dict[str, str],
) -> str:
    """The role of one process of the application (see :func:`roles`)."""
    if proc.pid == driver:
        return "driver_python"
    if proc.pid in jvms:
        return "driver_jvm"
    if proc.pid in servers:
        return "warm_server"
    if proc.runs(WARM):
        if proc.parent in servers:
            return _launched(proc.pid, launchers)
        parent = every.get(proc.parent)
        if parent is not None and parent.parent in servers:
            return _launched(parent.pid, launchers).replace("daemon:", "") + ".fork"
        return "warm_child"
    parent = every.get(proc.parent)
    if parent is not None and parent.command == proc.command and proc.module() is not None:
        return short(proc.module() or "?") + ".fork"  # forked by a cold daemon
    module = proc.module()
    if module is not None:
        return short(module)
    return "other:" + os.path.basename(proc.command[0].decode(errors="replace"))


class PeakMemory:
    """While it runs, the peak resident memory of this application's Python workers and JVM.

    Workers: the processes of :func:`application` but this driver's Python and its JVMs
    (Spark's daemons and the tasks they fork, flamestream's warm servers and their children,
    a data source's planner): the largest one's peak (``worker_mb``), and the peak of their
    sum (``workers_mb``; forked processes share pages, so the sum overstates); sampled every
    ``every`` seconds from another thread. Other applications' processes are not counted.
    """

    def __init__(self, every: float = 0.5) -> None:
        import threading

        self.worker_mb = self.workers_mb = self.jvm_mb = 0.0
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        every = processes()
        mine, jvms, _ = application(os.getpid(), every)
        workers = [every[p].rss for p in mine - jvms - {os.getpid()} if every[p].command[0]]
        self.worker_mb = max(self.worker_mb, round(max(workers, default=0) / 2**20, 1))
        self.workers_mb = max(self.workers_mb, round(sum(workers) / 2**20, 1))
        self.jvm_mb = max(self.jvm_mb, round(sum(every[p].rss for p in jvms) / 2**20, 1))
