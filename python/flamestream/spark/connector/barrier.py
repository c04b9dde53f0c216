"""The barrier's rules: what a batch's commit may release.

The min-time of a batch (the fronts' reports and the ack table) and which rows a release keeps
(invalidated versions dropped, in meta order, below the min-time).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import FlameStreamError
from flamestream.model import END_OF_TIME, GlobalTime
from flamestream.runtime.invalidation import TraceIndex
from flamestream.spark.connector.offsets import OFFSET_VERSIONS, FrontOffset
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.loop import AckTable, loops_enabled
from flamestream.spark.exec.general.items import (
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_trace,
    sorted_by_meta,
)


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


def read_min_time(
    checkpoint: str,
    batch_id: int,
    *,
    in_task: bool = False,
    offsets: list[dict[str, Any]] | None = None,
) -> GlobalTime:
    """The min-time after ``batch_id``: the fronts' least report and the ack table's least.

    The fronts are every front of the query's flamestream sources: each reports ``(its next
    ts, its id)``, and each source also ``(its horizon, its next unused id)`` for the fronts
    it has not seen yet (:meth:`FrontOffset.reports`). The ack table (graphs with loop channels
    only) holds the global times still in flight in a loop.

    ``in_task=True`` asks from inside the batch's tasks, before the batch's own sends into a
    loop are known: with loop channels that is the min-time after the previous batch (what
    this batch sends descends from items at or above it); without, it is the same answer.
    ``offsets``: ``front_offsets(checkpoint, batch_id)`` if the caller read them already.
    """
    loops = loops_enabled(checkpoint)
    if in_task and loops:
        return read_min_time(checkpoint, batch_id - 1) if batch_id > 0 else GlobalTime(0, 0)
    if offsets is None:
        offsets = front_offsets(checkpoint, batch_id)
    reports = [report for offset in offsets for report in FrontOffset.from_json(offset).reports()]
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


def drop_invalidated(table: pa.Table) -> pa.Table:
    """``table`` without tombstones and without rows a newer version in it invalidates.

    Graph outputs carry ``flags`` and ``trace`` (:mod:`flamestream.spark.exec.general.items`).
    Only rows flagged may-invalidate can invalidate, and only rows of their own global time,
    so rows are judged within the global times that have a flagged row (against a trie of
    its flagged rows' traces, :class:`~flamestream.runtime.invalidation.TraceIndex`: in the
    length of a row's trace, not against every flagged row); the rest pass untouched.
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
    for rows in groups.values():
        newer: TraceIndex[None] = TraceIndex(
            (decode_trace(traces[i]), None, True) for i in rows if flag_list[i] & MAY_INVALIDATE
        )
        for i in rows:
            if flag_list[i] & TOMBSTONE or newer.invalidated(decode_trace(traces[i])):
                keep[i] = False
    return table.filter(pa.array(keep))


def ready_and_rest(table: pa.Table, ready: pa.Array) -> tuple[pa.Table, pa.Table]:
    """(the ``ready`` rows in meta order, the others); a table wholly ready is not copied."""
    if pc.all(ready).as_py():  # the usual case: a batch's rows all below its min-time
        return sorted_by_meta(table), table.slice(0, 0)
    return sorted_by_meta(table.filter(ready)), table.filter(pc.invert(ready))


def below(table: pa.Table, min_time: GlobalTime) -> pa.Array:
    """Rows whose global time (ts, front) is below ``min_time``."""
    if min_time == END_OF_TIME:
        return pa.repeat(True, table.num_rows)
    ts, front = table.column("ts"), table.column("front")
    earlier = pc.less(ts, min_time.ts)
    same_ts = pc.and_(pc.equal(ts, min_time.ts), pc.less(front, min_time.front))
    return pc.or_(earlier, same_ts)
