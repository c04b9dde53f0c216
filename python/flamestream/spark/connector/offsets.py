"""A front source's offset: what Spark checkpoints per batch, and everything a replay needs.

See docs/connectors.md, "Stamping and the determinism contract" for the format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flamestream.errors import FlameStreamError
from flamestream.model import GlobalTime

#: Version of the offset format; bumped on any incompatible change. Version 1 (one shared
#: ``base``/``horizon`` per source, fronts ``[key, id, position]``) is still read: a
#: checkpoint written by it resumes, and its last batch replays exactly as it was stamped.
OFFSET_VERSION = 2


#: Every offset version this module reads.
OFFSET_VERSIONS = (1, 2)


class OffsetError(FlameStreamError):
    """The checkpoint's offsets do not fit this source (another query's, or input gone)."""


@dataclass(frozen=True)
class FrontState:
    """One source as the offset records it."""

    key: str
    front: int
    position: int
    #: the front's report: every record it stamps later gets a ts at or above it
    next: int = 0


@dataclass(frozen=True)
class FrontOffset:
    """The whole offset of a flamestream source; ``to_json`` is what Spark checkpoints."""

    kind: str
    id_base: int
    #: the planning clock in µs (``clock=wall``; 0 otherwise): fronts stamp from at least it
    base: int
    #: the largest next ts of the fronts so far: where a front first seen later starts
    horizon: int
    fronts: tuple[FrontState, ...]
    extra: tuple[tuple[str, Any], ...] = ()
    #: How many batches this source has planned before this one (-1: none yet).
    seq: int = -1
    #: start positions of the fronts first seen in this batch
    first_seen: tuple[tuple[str, int], ...] = ()
    #: the stamping mode the batch was planned with (``clock``)
    clock: str = "wall"
    #: the offset format this was read from (1: one base for every front of the batch)
    version: int = OFFSET_VERSION

    def to_json(self) -> dict[str, Any]:
        """A dict with a stable key order (Spark compares and logs it verbatim)."""
        return {
            "flamestream": OFFSET_VERSION,
            "front": self.kind,
            "seq": self.seq,
            "idBase": self.id_base,
            "clock": self.clock,
            "base": self.base,
            "horizon": self.horizon,
            "fronts": [[f.key, f.front, f.position, f.next] for f in self.fronts],
            "firstSeen": [[k, p] for k, p in self.first_seen],
            **dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FrontOffset:
        """Parse what :meth:`to_json` produced (possibly read back from the offset log).

        A version 1 offset reads as fronts that all report its horizon.
        """
        version = data.get("flamestream") if isinstance(data, Mapping) else None
        if version not in OFFSET_VERSIONS:
            msg = f"not a flamestream offset (versions {OFFSET_VERSIONS}): {data!r}"
            raise ValueError(msg)
        known = {
            "flamestream",
            "front",
            "seq",
            "idBase",
            "clock",
            "base",
            "horizon",
            "fronts",
            "firstSeen",
        }
        horizon = int(data["horizon"])
        if version == 1:
            fronts = tuple(
                FrontState(str(k), int(f), int(p), horizon) for k, f, p in data["fronts"]
            )
        else:
            fronts = tuple(
                FrontState(str(k), int(f), int(p), int(n)) for k, f, p, n in data["fronts"]
            )
        return cls(
            kind=str(data["front"]),
            id_base=int(data["idBase"]),
            base=int(data["base"]),
            horizon=horizon,
            fronts=fronts,
            extra=tuple((k, v) for k, v in data.items() if k not in known),
            seq=int(data["seq"]),
            first_seen=tuple((str(k), int(p)) for k, p in data.get("firstSeen", ())),
            clock=str(data.get("clock", "wall")),
            version=int(version),
        )

    def positions(self) -> dict[str, int]:
        """Position per source key."""
        return {f.key: f.position for f in self.fronts}

    def reports(self) -> list[GlobalTime]:
        """The least global time each front may still assign, and any front not seen yet."""
        next_id = max((f.front + 1 for f in self.fronts), default=self.id_base)
        unseen = GlobalTime(self.horizon, next_id)
        return [GlobalTime(f.next, f.front) for f in self.fronts] + [unseen]

    @property
    def report(self) -> GlobalTime:
        """The least global time any front of this source may still assign."""
        return min(self.reports())


@dataclass(frozen=True)
class FrontRange:
    """What one read task reads: a source's records in [start, end), stamped from ``base``.

    ``base`` is the first ts the range may assign: ``ts = base + (position - start)``, or with
    record times, ``ts = max(record time, previous ts + 1)`` with the first record's previous
    ts being ``base - 1``.
    """

    key: str
    front: int
    start: int
    end: int
    base: int
    record_time: bool = False


@dataclass(frozen=True)
class ReadTask:
    """What one read task reads: its ranges, one after another (each stamped on its own)."""

    ranges: tuple[FrontRange, ...]


def packed_ranges(ranges: list[FrontRange], tasks: int | None) -> list[ReadTask]:
    """``ranges`` packed into at most ``tasks`` read tasks of about equal records.

    ``None``: one task per range. Largest range first to the task with the fewest records so
    far (the lowest-numbered on a tie), so each task's load is at most the mean plus one
    range. A range is never split. Pure: the same ranges give the same tasks, in a replay too
    (nothing a task reads or stamps depends on which task reads it; fewer, fuller tasks save
    the per-task start that, on 2 cores, made 4 small files take 2 waves).
    """
    if tasks is None or tasks >= len(ranges):
        return [ReadTask((r,)) for r in ranges]
    loads = [0] * tasks
    chosen: list[list[int]] = [[] for _ in range(tasks)]
    by_size = sorted(range(len(ranges)), key=lambda i: (-(ranges[i].end - ranges[i].start), i))
    for i in by_size:
        lightest = min(range(tasks), key=lambda t: (loads[t], t))
        loads[lightest] += ranges[i].end - ranges[i].start
        chosen[lightest].append(i)
    # each task reads its ranges in the order they were planned
    return [ReadTask(tuple(ranges[i] for i in sorted(picked))) for picked in chosen if picked]
