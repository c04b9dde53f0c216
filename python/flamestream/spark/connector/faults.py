"""Crash points for the crash tests: kill the whole query, abruptly, at a named place.

Set ``FLAMESTREAM_CRASH_AT=<point>:<batch id>`` in a query's environment and the process
that reaches that point in that batch sends SIGKILL to the query's process group (named by
``FLAMESTREAM_CRASH_GROUP``, which the driver sets with :func:`arm`) and to its own (PySpark's
worker daemon has a group of its own): the driver, the JVM and every Python worker die at
once, as in a machine crash. Unset (always, outside tests), a crash point costs one
dictionary lookup.

Points (the batch is Spark's batch id, except for ``front.plan``: the source's own batch
sequence number, equal to it when the query has one source): ``front.plan`` (an end offset was
computed, before Spark logs it), ``front.read``
(a read task has produced part of its range), ``sink.write`` (a write task staged its rows),
``sink.commit.start``, ``sink.commit.released`` (output written, marker not yet),
``sink.commit.marked`` (marker written; the output's readers not told yet, Spark's commit log
not yet); in the files sink with ``release=tasks``, ``sink.commit.published`` (the first of
the batch's parts published, the others not yet); in the kafka sink,
``sink.kafka.in_transaction`` (records sent in the batch's transaction, not committed); in the
delta sink, ``sink.delta.writing`` (delta-rs has taken the batch's rows and written a data
file of its commit, which it cannot make yet: the sink holds the stream of rows open); and
in graphs' keyed stages, ``graph.keyed.saved`` (a task wrote its state snapshot, its output
not yet sent on); in graphs with a loop channel, ``graph.loop.sent`` (a task wrote the items it
sends into the loop and their ack contributions) and ``graph.loop.received`` (a loop read task
recorded its receipts, its items not yet returned); in elastic graphs, ``control.plan`` (the
control channel decided a new layout, consuming requests, before Spark logs it; the batch is
the one being planned).
"""

from __future__ import annotations

import os
import signal

#: The environment variable naming the crash point.
ENV = "FLAMESTREAM_CRASH_AT"


#: The environment variable naming the process group to kill.
GROUP_ENV = "FLAMESTREAM_CRASH_GROUP"


#: Set to ``executor`` to kill only the executor JVM running the task (cluster modes).
SCOPE_ENV = "FLAMESTREAM_CRASH_SCOPE"


#: A file path: crash only if it does not exist yet, and create it (so a retry succeeds).
ONCE_ENV = "FLAMESTREAM_CRASH_ONCE"


POINTS = (
    "front.plan",
    "front.read",
    "sink.write",
    "sink.commit.start",
    "sink.commit.released",
    "sink.commit.marked",
)


def arm() -> None:
    """Call in the driver before Spark starts: crashes then kill this process's group."""
    os.environ[GROUP_ENV] = str(os.getpgid(0))


def armed(point: str, batch_id: int) -> bool:
    """Whether the environment asks for a crash at ``point`` in ``batch_id``.

    For a point that must first bring about what the crash is meant to leave behind.
    """
    wanted = os.environ.get(ENV)
    return bool(wanted) and wanted == f"{point}:{batch_id}"


def crash_point(point: str, batch_id: int) -> None:
    """Die here if the environment asks for it (see the module docstring)."""
    if armed(point, batch_id):
        once = os.environ.get(ONCE_ENV)
        if once:
            try:
                os.close(os.open(once, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return
        if os.environ.get(SCOPE_ENV) == "executor":
            # a Python worker's parent is PySpark's worker daemon, whose parent is the executor
            os.kill(_parent_of(os.getppid()), signal.SIGKILL)
            return
        group = os.environ.get(GROUP_ENV)
        if group:
            os.killpg(int(group), signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)


def _parent_of(pid: int) -> int:
    """The parent process id of ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])
