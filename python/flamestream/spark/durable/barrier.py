"""The barrier sink's durable side: stage, buffer, compute the min-time, release once.

Layout under ``<state>/`` (any fsspec URL)::

    staging/<batch>/part-<partition>-<attempt>.arrow   rows a write task attempt received
    pending/<batch>.arrow                    rows not released after batch <batch>
    commits/<batch>.json                     the per-batch marker: done, what was released

Every file is written once, whole (:func:`~flamestream.spark.durable.files.write_atomically`:
a rename on POSIX file systems, one PUT on object stores), under a name that is a function of
(batch, task, attempt) or of the batch alone with content that is a function of the batch.
A staged file is read only by the name in its task's commit message, so what a failed or
crashed attempt staged is never read, and goes with its batch's folder.

A batch's commit is a pure function of (the previous batch's pending rows, the batch's staged
rows, the batch's min-time), so running it again after a crash gives the same release, and
outputs named by batch id are overwritten, never duplicated. The commit decision is the
marker, one atomic write: once it exists, a replayed commit releases nothing. What the
output's readers are told of a batch (the files sink's ``_spark_metadata`` log) follows the
marker, so it names committed output only (:meth:`BarrierStore.commit`, step 7). Markers are
kept in step with Spark's offset log (:meth:`BarrierStore.forget_before`).

The min-time comes from Spark's offset log, ``checkpoint/offsets/<batch>``: every flamestream
front's end offset carries its report (see :mod:`flamestream.spark.connector.front`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from flamestream.model import GlobalTime
from flamestream.spark.connector.barrier import below, drop_invalidated, ready_and_rest
from flamestream.spark.durable import (
    attempt_of_task,
    filesystem,
    listing,
    numbered,
    numbered_paths,
    remove,
    stale_temporaries,
    write_atomically,
)

#: Batches of staging and pending files kept behind the newest commit (for inspection).
KEEP_BATCHES = 2

#: Markers kept behind the newest commit at least, whatever Spark's log retains: a restart
#: replays at most the batch after Spark's last commit, and reads the marker before it.
KEEP_MARKERS = 2


@dataclass(frozen=True)
class StagedPart:
    """The commit message of one write task: where its rows are staged."""

    path: str
    rows: int


@dataclass(frozen=True)
class CommitOutcome:
    """What a batch's commit did."""

    batch_id: int
    min_time: GlobalTime
    released: int
    pending: int
    skipped: bool
    #: rows the batch's commit dropped as invalidated (and tombstones)
    dropped: int = 0


class BarrierStore:
    """Durable buffer of one sink. Created on executors (staging) and on the driver (commit)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _fs(self) -> tuple[Any, str]:
        return filesystem(self.url)

    # --- executors ---------------------------------------------------------------------

    def stage(
        self, batch_id: int, partition_id: int, table: pa.Table, attempt: int | None = None
    ) -> StagedPart:
        """Write one task attempt's rows, under a name of its own (the commit reads it).

        ``attempt``: the task attempt's id (the running task's, by default).
        """
        fs, root = self._fs()
        attempt = attempt_of_task() if attempt is None else attempt
        folder = posixpath.join(root, "staging", str(batch_id))
        path = posixpath.join(folder, f"part-{partition_id:05d}-{attempt}.arrow")
        _write_arrow(fs, path, table)
        return StagedPart(path, table.num_rows)

    # --- driver --------------------------------------------------------------------------

    def commit(
        self,
        batch_id: int,
        parts: Sequence[StagedPart | None],
        min_time: GlobalTime,
        release: Callable[[int, pa.Table | None], None],
        *,
        released_in_tasks: int = 0,
        committed: Callable[[int, bool], None] | None = None,
    ) -> CommitOutcome:
        """Merge staged rows into the buffer and release what is below ``min_time``.

        ``release`` is called once, with the rows to release (None if there are none), unless
        the batch was marked done before; ``released_in_tasks`` rows were released by the
        write tasks themselves (they count in the marker). ``committed(batch, replayed)`` is
        called once the marker exists, by this commit or (``replayed``) a commit before it:
        it tells the output's readers, and must be idempotent.

        The protocol, step by step; a crash between any two steps is safe, because everything
        before the marker is a pure function of durable files and is simply done again, and
        everything after it is idempotent:

        1. If the batch's marker exists, the batch was committed: go to step 7 with what it
           recorded (a replayed commit releases nothing twice).
        2. Merge the previous marker's pending rows with this batch's staged parts.
        3. Drop tombstones and the versions a newer one in the buffer invalidates.
        4. Split at ``min_time``: what is below is released in meta order; the rest is
           written as this batch's pending file (a repeat writes the same file).
        5. Release (outputs are named by batch id: a repeat overwrites).
        6. Write the marker, atomically: the commit decision. From now on step 1 answers.
        7. Tell the output's readers (``committed``): the files sink logs the batch's files
           for Spark's readers (``_spark_metadata``), which then see it whole. After the
           marker, so that what readers are told is decided; on a replay as well, so that a
           crash between 6 and 7 is made good.
        8. Delete staging and pending files that no commit can need any more.
        """
        fs, root = self._fs()
        marker = posixpath.join(root, "commits", f"{batch_id:012d}.json")
        # 1. committed before? (read, not listed: an object store's listing may be cached)
        try:
            recorded = json.loads(fs.cat_file(marker))
        except FileNotFoundError:
            recorded = None
        if recorded is not None:
            if committed is not None:  # 7. (again: a crash may have come before it)
                committed(batch_id, True)
            return _outcome(batch_id, recorded)
        # 2. merge
        buffered = self._buffered(fs, root, batch_id, parts)
        # 3. drop what is invalidated
        dropped = 0
        if buffered is not None:
            before = buffered.num_rows
            buffered = drop_invalidated(buffered)
            dropped = before - buffered.num_rows
        # 4. split at the min-time; keep the rest
        out, rest = _split(buffered, min_time)
        pending_path = None
        if rest is not None and rest.num_rows:
            pending_path = posixpath.join(root, "pending", f"{batch_id:012d}.arrow")
            _write_arrow(fs, pending_path, rest)
        # 5. release
        release(batch_id, out if out is not None and out.num_rows else None)
        # 6. mark
        record = {
            "batch": batch_id,
            "minTime": list(min_time),
            "released": (out.num_rows if out is not None else 0) + released_in_tasks,
            "pending": rest.num_rows if rest is not None else 0,
            "pendingPath": pending_path,
            "dropped": dropped,
        }
        write_atomically(fs, marker, json.dumps(record).encode())
        # 7. tell the readers
        if committed is not None:
            committed(batch_id, False)
        # 8. collect
        self._collect(fs, root, batch_id)
        return _outcome(batch_id, record, skipped=False)

    def _buffered(
        self, fs: Any, root: str, batch_id: int, parts: Sequence[StagedPart | None]
    ) -> pa.Table | None:
        """The previous commit's pending rows and this batch's staged rows (None: none)."""
        previous = self._previous_marker(fs, root, batch_id)
        tables = []
        if previous and previous.get("pendingPath"):
            tables.append(_read_arrow(fs, previous["pendingPath"]))
        tables += [_read_arrow(fs, p.path) for p in parts if p is not None and p.rows]
        return pa.concat_tables(tables, promote_options="default") if tables else None

    def newest_marked(self) -> int:
        """The newest batch whose commit is marked (-1: none yet). One listing."""
        fs, root = self._fs()
        batches = numbered(fs, posixpath.join(root, "commits"), ".json")
        return batches[-1] if batches else -1

    def pending_rows(self) -> int:
        """Rows buffered after the newest committed batch."""
        fs, root = self._fs()
        newest = self._previous_marker(fs, root, None)
        return int(newest["pending"]) if newest else 0

    def forget_before(self, batch_id: int) -> int:
        """Remove the markers of batches before ``batch_id``, but the newest few; how many.

        Markers before the oldest batch Spark's offset log keeps can never be asked for
        again (:meth:`QueryCheckpoint.retained_from`); without this the folder gains one per
        batch for ever. Temporaries a crash left go too. One listing of a bounded folder.
        """
        fs, root = self._fs()
        folder = posixpath.join(root, "commits")
        entries = listing(fs, folder)
        markers = sorted(numbered_paths(fs, folder, ".json", entries))
        old = [path for batch, path in markers[:-KEEP_MARKERS] if batch < batch_id]
        remove(fs, old + stale_temporaries(entries, batch_id))
        return len(old)

    def _previous_marker(self, fs: Any, root: str, before: int | None) -> dict[str, Any] | None:
        folder = posixpath.join(root, "commits")
        batches = numbered(fs, folder, ".json")
        earlier = [b for b in batches if before is None or b < before]
        if not earlier:
            return None
        data: dict[str, Any] = json.loads(
            fs.cat_file(posixpath.join(folder, f"{earlier[-1]:012d}.json"))
        )
        return data

    def _collect(self, fs: Any, root: str, batch_id: int) -> None:
        """Delete staging and pending files no commit can need any more (and temporaries)."""
        before = batch_id - KEEP_BATCHES
        for kind, suffix in (("staging", ""), ("pending", ".arrow")):
            folder = posixpath.join(root, kind)
            entries = listing(fs, folder)
            old = [path for b, path in numbered_paths(fs, folder, suffix, entries) if b < before]
            remove(fs, old + stale_temporaries(entries, before), recursive=True)


def _write_arrow(fs: Any, path: str, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    write_atomically(fs, path, sink.getvalue().to_pybytes())


def _read_arrow(fs: Any, path: str) -> pa.Table:
    return pa.ipc.open_file(pa.BufferReader(fs.cat_file(path))).read_all()


def _split(
    buffered: pa.Table | None, min_time: GlobalTime
) -> tuple[pa.Table | None, pa.Table | None]:
    """(rows below ``min_time`` in meta order, the rest); (None, None) for an empty buffer."""
    if buffered is None or not buffered.num_rows:
        return None, None
    return ready_and_rest(buffered, below(buffered, min_time))


def _outcome(batch_id: int, record: dict[str, Any], *, skipped: bool = True) -> CommitOutcome:
    """The outcome a marker records (``skipped``: found, not written, by this commit)."""
    return CommitOutcome(
        batch_id,
        GlobalTime(*record["minTime"]),
        record["released"],
        record["pending"],
        skipped,
        record.get("dropped", 0),
    )
