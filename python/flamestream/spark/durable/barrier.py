"""The barrier sink's durable side: stage, buffer, compute the min-time, release once.

Layout under ``<state>/`` (any fsspec URL)::

    staging/<batch>/part-<partition>.arrow   rows a write task received (overwritten on retry)
    pending/<batch>.arrow                    rows not released after batch <batch>
    commits/<batch>.json                     the per-batch marker: done, what was released

A batch's commit is a pure function of (the previous batch's pending rows, the batch's staged
rows, the batch's min-time), so running it again after a crash gives the same release, and
outputs named by batch id are overwritten, never duplicated. Once its marker exists, a
replayed commit does nothing.

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
from flamestream.spark.durable import filesystem, numbered, write_atomically

#: Batches of staging and pending files kept behind the newest commit (for inspection).
KEEP_BATCHES = 2


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

    def stage(self, batch_id: int, partition_id: int, table: pa.Table) -> StagedPart:
        """Write one task's rows; a retried task overwrites the same file."""
        fs, root = self._fs()
        folder = posixpath.join(root, "staging", str(batch_id))
        fs.makedirs(folder, exist_ok=True)
        path = posixpath.join(folder, f"part-{partition_id:05d}.arrow")
        _write_arrow(fs, path, table, racing=True)  # a task and its retry may overlap
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
    ) -> CommitOutcome:
        """Merge staged rows into the buffer and release what is below ``min_time``.

        ``release`` is called once, with the rows to release (None if there are none), unless
        the batch was marked done before; ``released_in_tasks`` rows were released by the
        write tasks themselves (they count in the marker).

        The protocol, step by step; a crash between any two steps is safe, because everything
        before the marker is a pure function of durable files and is simply done again:

        1. If the batch's marker exists, the batch was committed: return what it recorded
           (a replayed commit releases nothing twice).
        2. Merge the previous marker's pending rows with this batch's staged parts.
        3. Drop tombstones and the versions a newer one in the buffer invalidates.
        4. Split at ``min_time``: what is below is released in meta order; the rest is
           written as this batch's pending file (a repeat writes the same file).
        5. Release (outputs are named by batch id: a repeat overwrites).
        6. Write the marker, atomically: from now on step 1 answers.
        7. Delete staging and pending files that no commit can need any more.
        """
        fs, root = self._fs()
        marker = posixpath.join(root, "commits", f"{batch_id:012d}.json")
        # 1. committed before?
        if fs.exists(marker):
            return _outcome(batch_id, json.loads(fs.cat_file(marker)))
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
            fs.makedirs(posixpath.dirname(pending_path), exist_ok=True)
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
        # 7. collect
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

    def pending_rows(self) -> int:
        """Rows buffered after the newest committed batch."""
        fs, root = self._fs()
        newest = self._previous_marker(fs, root, None)
        return int(newest["pending"]) if newest else 0

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
        """Delete staging and pending files no commit can need any more."""
        for kind in ("staging", "pending"):
            folder = posixpath.join(root, kind)
            if not fs.exists(folder):
                continue
            for path in fs.ls(folder, detail=False):
                name = posixpath.basename(path).split(".")[0]
                if name.isdigit() and int(name) < batch_id - KEEP_BATCHES:
                    fs.rm(path, recursive=True)


def _write_arrow(fs: Any, path: str, table: pa.Table, *, racing: bool = False) -> None:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    write_atomically(fs, path, sink.getvalue().to_pybytes(), racing=racing)


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
