"""A query's checkpoint, read through flamestream's own readers (never Spark's files directly).

Offsets come from :class:`flamestream.spark.durable.QueryCheckpoint` and
:func:`flamestream.spark.connector.barrier.front_offsets`; release times from the barrier
sink's commit markers (``flamestream-sink/commits/<batch>.json``, the sink's store).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flamestream.spark.connector.barrier import front_offsets
from flamestream.spark.durable import QueryCheckpoint


@dataclass
class Batch:
    """One micro-batch as the checkpoint tells it."""

    id: int
    planned: float  #: the offset's base: the planning's wall clock, s
    starts: dict[str, int]
    ends: dict[str, int]
    controller: dict[str, Any] | None
    released: float | None = None  #: mtime of the sink's commit marker, s
    pending: int = 0  #: rows the commit kept for later (0 expected: one source)

    @property
    def rows(self) -> int:
        """Records read."""
        return sum(self.ends[k] - self.starts[k] for k in self.ends)


@dataclass
class Checkpoint:
    """Batches, the front's raw offsets, the control channel's layouts, offsets/0's mtime."""

    batches: list[Batch]
    offsets: dict[int, dict[str, Any]]  #: batch -> the (one) flamestream front's end offset
    layouts: dict[int, dict[str, Any]]  #: batch -> the control channel's offset (elastic only)
    first_mtime: float | None


def first_offset_mtime(ck: Path) -> float | None:
    """When offsets/0 was written (None: not yet): the query's first planning."""
    try:
        return os.stat(QueryCheckpoint(str(ck)).offset_path(0)).st_mtime
    except FileNotFoundError:
        return None


def read(ck: Path) -> Checkpoint:
    """The batches from the offset log (one flamestream source) and the sink's markers."""
    log = QueryCheckpoint(str(ck))
    offsets: dict[int, dict[str, Any]] = {}
    layouts: dict[int, dict[str, Any]] = {}
    for b in log.logged_batches():
        offsets[b] = front_offsets(str(ck), b)[0]
        layout = log.offsets_where(b, lambda offset: offset.get("flamestreamLayout") == 1)
        if layout:
            layouts[b] = layout[0]
    markers: dict[int, tuple[float, dict[str, Any]]] = {}
    commits = Path(log.sink_url) / "commits"
    if commits.is_dir():
        for path in commits.iterdir():
            if path.name.endswith(".json") and not path.name.startswith("."):
                markers[int(path.stem)] = (path.stat().st_mtime, json.loads(path.read_text()))
    batches = []
    previous: dict[str, int] = {}
    for b in sorted(offsets):
        offset = offsets[b]
        ends = {key: int(position) for key, _front, position, *_ in offset["fronts"]}
        starts = {key: previous.get(key, 0) for key in ends}
        previous = ends
        batch = Batch(b, offset["base"] / 1e6, starts, ends, offset.get("controller"))
        if b in markers:
            batch.released = markers[b][0]
            batch.pending = int(markers[b][1].get("pending", 0))
        batches.append(batch)
    return Checkpoint(batches, offsets, layouts, first_offset_mtime(ck))


def clock_start(batches: Sequence[Batch], schedule: Any) -> tuple[float, float]:
    """When the generator's clock started, and how far before batch 0's planning that is.

    The clock starts in the first planning's ``discover``, just before batch 0's base is
    taken; every batch also bounds it from above (its ends were available at its planning).
    """
    start = batches[0].planned
    for batch in batches:
        furthest = max(batch.ends.values(), default=0)
        if furthest:
            start = min(start, batch.planned - schedule.elapsed_for(furthest * len(batch.ends)))
    return start, batches[0].planned - start
