"""The budget policy's sketch decisions on Spark: recorded in the offset log, read per batch.

``exact_or_approximate`` steps (issue 41) keep exact state per key until the budget policy
sketches key slots (:mod:`flamestream.spark.control.policy`). The control channel records each
decision in its end offset, under :data:`SKETCH`, as ``{"at": [ts, front], "slots": [...]}``
appended to the decisions in force (:func:`record`): ``at`` is
:func:`~flamestream.spark.control.swaps.effective_time`, at or above every global time
processed so far, so items already processed (loop items, a slow front's rows, a grouping's
replays of older items) keep folding exactly, on every replay. Spark writes the offset into
the offset log before the batch runs; the keyed tasks read it back (:func:`read_schedule`,
cached per batch) and fold each item of a sketched slot's key at or above ``at`` lowered
(:class:`~flamestream.approx.schedule.SketchSchedule`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flamestream.approx.schedule import SketchSchedule
from flamestream.spark.control.swaps import effective_time
from flamestream.spark.durable import QueryCheckpoint

#: The control offset's key for the sketch decisions in force (a list, oldest first).
SKETCH = "sketch"


def sketched_slots(state: dict[str, Any]) -> tuple[int, ...]:
    """Every slot the decisions in ``state`` (a control offset) sketched, ascending."""
    return tuple(sorted({int(s) for d in state.get(SKETCH, ()) for s in d["slots"]}))


def record(checkpoint: str, state: dict[str, Any], slots: Sequence[int]) -> dict[str, Any]:
    """``state`` with the slots of ``slots`` not sketched yet sketched from now on.

    Monotone: a sketched slot stays sketched, its time is its first decision's. The time is
    never below an earlier decision's (nor a swap's).
    """
    known = set(sketched_slots(state))
    new = sorted({int(s) for s in slots} - known)
    if not new:
        return state
    decisions = list(state.get(SKETCH, ()))
    at = effective_time(checkpoint, [*state.get("swaps", ()), *decisions])
    decisions.append({"at": [at.ts, at.front], "slots": new})
    return {**state, SKETCH: decisions}


#: The schedules of recent batches read in this process, by (checkpoint, batch).
_READ: dict[tuple[str, int], SketchSchedule] = {}


def read_schedule(checkpoint: str, batch_id: int) -> SketchSchedule:
    """The sketch decisions in force for ``batch_id``, from its control offset (cached)."""
    cached = _READ.get((checkpoint, batch_id))
    if cached is not None:
        return cached
    offsets = QueryCheckpoint(checkpoint).source_offsets(batch_id) if batch_id >= 0 else None
    schedule = SketchSchedule({}, 1)
    for offset in offsets or []:
        if isinstance(offset, dict) and offset.get("flamestreamLayout") == 1:
            schedule = schedule_of(offset)
    if offsets is not None:  # a batch not logged yet is never cached
        if len(_READ) > 64:
            _READ.clear()
        _READ[(checkpoint, batch_id)] = schedule
    return schedule


def schedule_of(offset: dict[str, Any]) -> SketchSchedule:
    """The schedule a control offset records (its slots: the layout's)."""
    return SketchSchedule.from_records(offset.get(SKETCH, ()), len(offset["assignment"]))


def recorded_schedule(checkpoint: str) -> SketchSchedule:
    """The schedule in force in the newest logged batch: for ``run_in_order(sketch=...)``."""
    logged = QueryCheckpoint(checkpoint).logged_batches()
    return read_schedule(checkpoint, logged[-1]) if logged else SketchSchedule({}, 1)
