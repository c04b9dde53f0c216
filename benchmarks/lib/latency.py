"""Per record of a generator pipeline: availability, release, latency, backlog and recovery.

Everything from the checkpoint alone (:mod:`benchmarks.lib.checkpoint`): a batch's planning
(its offset's base), its per-front ranges, its release (its commit marker's mtime).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.lib.checkpoint import Batch, clock_start
from benchmarks.lib.pipeline import GENERATOR_PARTITIONS, Watched
from benchmarks.lib.stats import summary_or_none


class ConstantRate:
    """A generator schedule at a constant rate (records made by a time, and its inverse)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def records(self, elapsed: float) -> float:
        """Records made ``elapsed`` seconds after the clock's start."""
        return max(0.0, elapsed) * self.rate

    def elapsed_for(self, records: float) -> float:
        """Seconds after the clock's start when ``records`` were made."""
        return records / self.rate


@dataclass
class Timeline:
    """Every batch's figures and every record's latency (censored at the stop)."""

    start: float  #: the generator clock's start
    before_planning: float  #: how far before batch 0's planning that is
    per_batch: list[dict[str, Any]] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)  #: made after the settle time
    after_step: list[float] = field(default_factory=list)
    released: int = 0
    censored: int = 0
    unread: int = 0


def timeline(
    batches: list[Batch],
    rates: Any,
    shares: dict[str, int],
    watched: Watched,
    settle: float,
    stepped: Callable[[int, float], bool],
) -> Timeline:
    """Release - availability per record.

    ``stepped(index, t)``: whether record ``index`` of a partition, made ``t`` seconds after
    the clock's start, comes after the step.
    """
    start, before_planning = clock_start(batches, rates)
    found = Timeline(start, before_planning)

    def made_at(i: int) -> float:
        # the generator makes int(made / P) records per partition: record i once (i + 1) * P
        return float(start + rates.elapsed_for((i + 1) * GENERATOR_PARTITIONS))

    def count(release: float, first: int, end: int) -> None:
        for i in range(first, end):
            made = made_at(i)
            if made >= start + settle:
                found.measured.append(release - made)
            if stepped(i, made - start):
                found.after_step.append(release - made)

    def reach(t: float) -> int:
        return int(rates.records(t) / GENERATOR_PARTITIONS)

    for batch in batches:
        if not batch.rows:
            continue
        release = batch.released if batch.released is not None else watched.stopped
        if batch.released is None:
            found.censored += batch.rows
        else:
            found.released += batch.rows
        for key, end in batch.ends.items():
            count(release, batch.starts[key], end)
        read = [k for k in batch.ends if batch.ends[k] > batch.starts[k]]
        oldest = min(made_at(batch.starts[k]) for k in read)
        t, ends = batch.planned - start, batch.ends
        found.per_batch.append(
            {
                "batch": batch.id,
                "planned": t,
                "rows": batch.rows,
                "seconds": release - batch.planned,
                "oldest_ms": (release - oldest) * 1000,
                "backlog": sum(max(0, min(reach(t), shares[k]) - ends[k]) for k in ends),
                "skewed": any(stepped(ends[k] - 1, made_at(ends[k] - 1) - start) for k in ends),
                "limit": (batch.controller or {}).get("limit"),
            }
        )
    # records available by the stop but never read: censored at the stop too
    last = batches[-1].ends if batches else {}
    for key, share in shares.items():
        first, end = last.get(key, 0), min(reach(watched.stopped - start), share)
        if end > first:
            found.unread += end - first
            count(watched.stopped, first, end)
    return found


def recovery(
    found: Timeline, after: list[dict[str, Any]], budget_ms: float, step: float
) -> dict[str, Any]:
    """The figures both step benchmarks report, around the batches ``after`` the step."""
    over = [i for i, b in enumerate(after) if b["oldest_ms"] > budget_ms]
    # ticks after the step until every later batch ended within the budget (None: never)
    recovered = None if (after and over and over[-1] == len(after) - 1) or found.unread else 0
    if recovered is not None and over:
        recovered = over[-1] + 1
    seconds = None
    if recovered is not None and after:
        seconds = 0.0 if recovered == 0 else after[recovered]["planned"] - step
    return {
        "released_rows": found.released,
        "censored_rows": found.censored + found.unread,
        "latency_ms": summary_or_none(found.measured),
        "latency_after_step_ms": summary_or_none(found.after_step),
        "peak_backlog": max((b["backlog"] for b in found.per_batch), default=0),
        "peak_backlog_after_step": max((b["backlog"] for b in after), default=0),
        "unread_at_stop": found.unread,
        "batches_over_budget_after_step": len(over),
        "ticks_to_recover_after_step": recovered,
        "seconds_to_recover_after_step": round(seconds, 3) if seconds is not None else None,
    }


def around(
    per_batch: list[dict[str, Any]], after: list[dict[str, Any]], describe: Callable[..., str]
) -> list[str]:
    """The batches from 2 before the first one ``after`` the step to 10 after, described."""
    step = per_batch.index(after[0]) if after else len(per_batch)
    return [describe(b) for b in per_batch[max(0, step - 2) : step + 10]]


def describe(b: dict[str, Any], *extra: str, mark: str = "") -> str:
    """A batch in one line: planning, rows, seconds, oldest record, backlog, ``extra``."""
    shown = [f"{b['rows']} rows", f"{b['seconds']:.2f} s", f"oldest {b['oldest_ms']:.0f} ms"]
    shown += [f"backlog {b['backlog']}", *extra]
    if b["limit"] is not None:
        shown.append(f"limit {b['limit']}")
    return f"{b['batch']} @{b['planned']:.2f}s{mark}: " + ", ".join(shown)


def run_lengths(values: Sequence[Any]) -> str:
    """``[5, 5, 5, 9]`` as ``"5x3 9"``: a limit trace in one line."""
    parts: list[str] = []
    for value, group in itertools.groupby(values):
        n = len(list(group))
        parts.append(f"{value}x{n}" if n > 1 else f"{value}")
    return " ".join(parts)


def controller_summary(batches: list[Batch]) -> dict[str, Any] | None:
    """The front controller's record at the last batch, and its limits as run lengths."""
    records = [b.controller for b in batches if b.controller]
    if not records:
        return None
    last = records[-1]
    return {
        "decisions": int(last["decisions"]),
        "limit_last": last["limit"],
        "reason_last": last["reason"],
        "limits": run_lengths([r["limit"] for r in records]),
    }


#: Notes both step benchmarks share.
NOTES = [
    "latency of a record: release (its batch's commit marker mtime) - availability (clock "
    "start + when the schedule made it); latency_ms over the records available after "
    "--settle s, latency_after_step_ms over those after the step. A run is stopped --drain s "
    "after its input ends; records not released by then count with the stop as release "
    "(censored_rows: lower bounds).",
    "everything from the checkpoint, read through QueryCheckpoint and front_offsets: per "
    "batch its fronts' end positions, its planning instant (base), the controller's record "
    "and (elastic) the layout; the sink's commit markers give each batch's release (mtime; "
    "pending_rows_in_markers: 0 with one source). Clock start: batch 0's base, moved earlier "
    "if a batch's ends would not have been available at its planning otherwise.",
    "backlog at a planning: records available (capped by totalRows) minus the batch's end "
    "positions, over both fronts; peak over the batches.",
    "recovery: ticks_to_recover_after_step = batches after the step until every later "
    "batch's oldest record is within the budget (0: never over; null: still over at the "
    "end); seconds_to_recover_after_step: from the step to that batch's planning.",
]
