"""A query's checkpoint: Spark's logs, read in one place, and where flamestream's stores live.

Layout (any fsspec URL)::

    <checkpoint>/offsets/<batch>        Spark's offset log: a version line, the batch's
                                        metadata, then one line per source, in the query's
                                        source order (flamestream's are JSON objects: the
                                        fronts' FrontOffset, the control channel's layout, the
                                        loop channel's offset)
    <checkpoint>/commits/<batch>        Spark's commit log: the batch completed
    <checkpoint>/flamestream-graph/     a graph's stores: grouping state, loop, ack table,
                                        slot loads, layout.json (durable.state, .loop,
                                        .slots)
    <checkpoint>/flamestream-sink/      a barrier sink's store, unless ``stateLocation`` says
                                        otherwise (durable.barrier)
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from typing import Any

from flamestream.spark.durable.files import filesystem, numbered

#: Folder of a graph's stores under the checkpoint.
GRAPH_DIR = "flamestream-graph"
#: Folder of a barrier sink's store under the checkpoint (its default ``stateLocation``).
SINK_DIR = "flamestream-sink"
#: Lines of an offset log file before the sources' offsets (version, metadata).
_HEADER_LINES = 2


class QueryCheckpoint:
    """One query's ``checkpointLocation``: read its logs, name its stores."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    @property
    def graph_url(self) -> str:
        """Where a graph applied with this checkpoint keeps its stores."""
        return f"{self.url}/{GRAPH_DIR}"

    @property
    def sink_url(self) -> str:
        """A barrier sink's default ``stateLocation``."""
        return f"{self.url}/{SINK_DIR}"

    def offset_path(self, batch_id: int) -> str:
        """The offset log file of ``batch_id`` (a path of the checkpoint's file system)."""
        _, root = filesystem(self.url)
        return posixpath.join(root, "offsets", str(batch_id))

    def source_offsets(self, batch_id: int) -> list[Any] | None:
        """The end offsets of ``batch_id``'s sources, in source order; None if not logged.

        Each is the JSON its source wrote; a line that is not JSON (another kind of source)
        is left out.
        """
        fs, _ = filesystem(self.url)
        try:
            lines = fs.cat_file(self.offset_path(batch_id)).decode().splitlines()
        except FileNotFoundError:
            return None
        offsets = []
        for line in lines[_HEADER_LINES:]:
            try:
                offsets.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return offsets

    def offsets_where(
        self, batch_id: int, accept: Callable[[dict[str, Any]], bool]
    ) -> list[dict[str, Any]]:
        """The source offsets of ``batch_id`` that are JSON objects ``accept`` takes.

        None at all when the batch is not logged.
        """
        return [
            offset
            for offset in self.source_offsets(batch_id) or []
            if isinstance(offset, dict) and accept(offset)
        ]

    def logged_batches(self) -> list[int]:
        """The batch ids in the offset log, oldest first."""
        fs, root = filesystem(self.url)
        return numbered(fs, posixpath.join(root, "offsets"))

    def retained_from(self, batch_id: int, keep: int) -> int:
        """The oldest batch a restart of this query can still need, as batch ``batch_id`` ends.

        In step with Spark's own retention (``spark.sql.streaming.minBatchesToRetain``): the
        oldest batch still in the offset log, but never more recent than ``keep`` batches
        before ``batch_id`` (a store's own margin). Stores drop what only older batches need.
        """
        logged = self.logged_batches()
        oldest = logged[0] if logged else batch_id
        return max(0, min(oldest, batch_id - keep))

    def last_committed_batch(self) -> int:
        """The newest batch id in Spark's commit log (-1 if none)."""
        fs, root = filesystem(self.url)
        committed = numbered(fs, posixpath.join(root, "commits"))
        return committed[-1] if committed else -1


def batch_id_of_task() -> int:
    """The micro-batch the running Spark task belongs to (-1 outside streaming).

    Every store written by tasks is named by it, so a retried task overwrites its own files.
    """
    from pyspark import TaskContext  # executors only: planning-side code needs no Spark

    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context else None
    return int(value) if value else -1


def attempt_of_task() -> int:
    """The running Spark task attempt's id, unique in the application (0 outside a task).

    Files a task writes for its commit message are named by it, so no two attempts (a retry,
    a speculative copy, one killed by a crash) ever write the same name.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.taskAttemptId() if context else 0
