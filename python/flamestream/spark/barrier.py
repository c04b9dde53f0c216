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
front's end offset carries its report (see :mod:`flamestream.spark.front`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import FlameStreamError
from flamestream.model import END_OF_TIME, GlobalTime, Meta, invalidates
from flamestream.spark.durable import QueryCheckpoint, filesystem, numbered, write_atomically
from flamestream.spark.front import OFFSET_VERSIONS, FrontOffset
from flamestream.spark.items import MAY_INVALIDATE, TOMBSTONE, decode_trace
from flamestream.spark.loop import AckTable, loops_enabled

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


def front_offsets(checkpoint: str, batch_id: int) -> list[dict[str, Any]]:
    """The end offsets of the query's flamestream fronts for ``batch_id``, from the offset log.

    Every line of the offset log after the first two is one source's end offset; lines that
    are not flamestream front offsets belong to other sources and are skipped.
    """
    log = QueryCheckpoint(checkpoint)
    offsets = log.source_offsets(batch_id)
    if offsets is None:
        path = log.offset_path(batch_id)
        msg = f"sink: no offset log {path}; is checkpointLocation the query's checkpoint?"
        raise FlameStreamError(msg)
    return [
        offset
        for offset in offsets
        if isinstance(offset, dict) and offset.get("flamestream") in OFFSET_VERSIONS
    ]


def read_min_time(checkpoint: str, batch_id: int, *, in_task: bool = False) -> GlobalTime:
    """The min-time after ``batch_id``: the fronts' least report and the ack table's least.

    The fronts are every front of the query's flamestream sources: each reports ``(its next
    ts, its id)``, and each source also ``(its horizon, its next unused id)`` for the fronts
    it has not seen yet (:meth:`FrontOffset.reports`). The ack table (graphs with loop fronts
    only) holds the global times still in flight in a loop.

    ``in_task=True`` asks from inside the batch's tasks, before the batch's own sends into a
    loop are known: with loop fronts that is the min-time after the previous batch (what
    this batch sends descends from items at or above it); without, it is the same answer.
    """
    loops = loops_enabled(checkpoint)
    if in_task and loops:
        return read_min_time(checkpoint, batch_id - 1) if batch_id > 0 else GlobalTime(0, 0)
    reports = [
        report
        for offset in front_offsets(checkpoint, batch_id)
        for report in FrontOffset.from_json(offset).reports()
    ]
    if not reports:
        msg = (
            f"sink: batch {batch_id} has no flamestream front; a barrier sink needs the "
            "query to read from format('flamestream') fronts (their reports give the min-time)"
        )
        raise FlameStreamError(msg)
    if loops:
        in_flight = AckTable(QueryCheckpoint(checkpoint).graph_url).least(batch_id)
        if in_flight is not None:
            reports.append(in_flight)
    return min(reports)


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
    ) -> CommitOutcome:
        """Merge staged rows into the buffer and release what is below ``min_time``.

        ``release`` is called once, with the rows to release (None if there are none), unless
        the batch was marked done before; ``released_in_tasks`` rows were released by the
        write tasks themselves (they count in the marker).
        """
        fs, root = self._fs()
        marker = posixpath.join(root, "commits", f"{batch_id:012d}.json")
        if fs.exists(marker):
            done = json.loads(fs.cat_file(marker))
            return CommitOutcome(
                batch_id,
                GlobalTime(*done["minTime"]),
                done["released"],
                done["pending"],
                True,
                done.get("dropped", 0),
            )
        previous = self._previous_marker(fs, root, batch_id)
        tables = []
        if previous and previous.get("pendingPath"):
            tables.append(_read_arrow(fs, previous["pendingPath"]))
        tables += [_read_arrow(fs, p.path) for p in parts if p is not None and p.rows]
        buffered = pa.concat_tables(tables, promote_options="default") if tables else None
        dropped = 0
        if buffered is not None:
            before = buffered.num_rows
            buffered = drop_invalidated(buffered)
            dropped = before - buffered.num_rows
        released_rows = pending_rows = 0
        pending_path = None
        out = None
        if buffered is not None and buffered.num_rows:
            ready = below(buffered, min_time)
            out = buffered.filter(ready).sort_by(meta_order(buffered))
            rest = buffered.filter(pc.invert(ready))
            if rest.num_rows:
                pending_path = posixpath.join(root, "pending", f"{batch_id:012d}.arrow")
                fs.makedirs(posixpath.dirname(pending_path), exist_ok=True)
                _write_arrow(fs, pending_path, rest)
            released_rows, pending_rows = out.num_rows, rest.num_rows
        release(batch_id, out if out is not None and out.num_rows else None)
        released_rows += released_in_tasks
        fs.makedirs(posixpath.dirname(marker), exist_ok=True)
        record = {
            "batch": batch_id,
            "minTime": list(min_time),
            "released": released_rows,
            "pending": pending_rows,
            "pendingPath": pending_path,
            "dropped": dropped,
        }
        write_atomically(fs, marker, json.dumps(record).encode())
        self._collect(fs, root, batch_id)
        return CommitOutcome(batch_id, min_time, released_rows, pending_rows, False, dropped)

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


def drop_invalidated(table: pa.Table) -> pa.Table:
    """``table`` without tombstones and without rows a newer version in it invalidates.

    Graph outputs carry ``flags`` and ``trace`` (:mod:`flamestream.spark.items`). Only rows
    flagged may-invalidate can invalidate, and only rows of their own global time, so rows
    are compared within the global times that have a flagged row; the rest pass untouched.
    A victim always reaches the sink before the min-time passes its global time, so it is
    either here (pending or new) or arrives later and is dropped here then.
    """
    if "flags" not in table.column_names or not table.num_rows:
        return table
    flags = table.column("flags")
    flagged = pc.not_equal(pc.bit_wise_and(flags, MAY_INVALIDATE | TOMBSTONE), 0)
    if not pc.any(flagged).as_py():
        return table
    ts, fronts = table.column("ts").to_pylist(), table.column("front").to_pylist()
    flag_list, traces = flags.to_pylist(), table.column("trace").to_pylist()
    times = {(ts[i], fronts[i]) for i, f in enumerate(flagged.to_pylist()) if f}
    groups: dict[tuple[int, int], list[int]] = {}
    for i, time in enumerate(zip(ts, fronts, strict=True)):
        if time in times:
            groups.setdefault(time, []).append(i)
    keep = [True] * table.num_rows
    for time, rows in groups.items():
        metas = {i: Meta(GlobalTime(*time), decode_trace(traces[i])) for i in rows}
        newer = [i for i in rows if flag_list[i] & MAY_INVALIDATE]
        for i in rows:
            if flag_list[i] & TOMBSTONE or any(invalidates(metas[j], metas[i]) for j in newer):
                keep[i] = False
    return table.filter(pa.array(keep))


def meta_order(table: pa.Table) -> list[tuple[str, str]]:
    """Sort keys putting rows in meta order: global time, then the trace if rows carry one.

    Graph outputs (:mod:`flamestream.spark.apply`) carry ``trace`` encoded so that byte order
    is trace order; items of one global time (a flat_map's outputs) are then ordered as the
    model orders them, whatever the partitioning.
    """
    keys = [("ts", "ascending"), ("front", "ascending")]
    if "trace" in table.column_names:
        keys.append(("trace", "ascending"))
    return keys


def below(table: pa.Table, min_time: GlobalTime) -> pa.Array:
    """Rows whose global time (ts, front) is below ``min_time``."""
    if min_time == END_OF_TIME:
        return pa.repeat(True, table.num_rows)
    ts, front = table.column("ts"), table.column("front")
    earlier = pc.less(ts, min_time.ts)
    same_ts = pc.and_(pc.equal(ts, min_time.ts), pc.less(front, min_time.front))
    return pc.or_(earlier, same_ts)


def _write_arrow(fs: Any, path: str, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    write_atomically(fs, path, sink.getvalue().to_pybytes())


def _read_arrow(fs: Any, path: str) -> pa.Table:
    return pa.ipc.open_file(pa.BufferReader(fs.cat_file(path))).read_all()
