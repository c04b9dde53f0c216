"""Where a live source starts after a history: the switch of a history-then-live front.

Pure functions, no I/O: the reader (:mod:`flamestream.spark.connector.history`) gathers what
the history holds and what the live source has, and these decide the live start positions
and the gaps, so the rule is tested on its own and every replay of the switch decides alike.

Two boundaries, declared once by the user:

* **position**: the history holds the live source's determinants (a source and a position:
  Kafka's partition and offset an archiver keeps, or the ``source``/``position`` columns a
  flamestream sink writes). A live source found in the history starts right after the
  largest position found for it; one missing from the history starts at its earliest. A
  record in both is thereby admitted once (from the history); a record in neither, which
  the rule cannot admit, is a **gap**: reported, never silent.
* **time**: a cut time. History rows below it are read, live rows at or above it: the
  history's and the live source's rows are both filtered by their record time, and a live
  source that can find the first position at a time (Kafka's offsets for times) starts
  there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Gap ranges listed per source in the warning and the offset (the count is always whole).
LISTED_GAPS = 10


@dataclass
class FoundPositions:
    """What the history holds of one live source: its positions, gathered chunk by chunk.

    The largest is kept as chunks come; the distinct positions (for gaps) only when asked,
    by a sort (2 M positions: ~0.1 s; ``np.unique``'s hashing takes 0.5 s).
    """

    chunks: list[np.ndarray] = field(default_factory=list)
    top: int | None = None

    def add(self, positions: np.ndarray) -> None:
        """More positions of this source (any order, repeats allowed)."""
        if len(positions):
            chunk = np.asarray(positions, dtype=np.int64)
            self.chunks.append(chunk)
            largest = int(chunk.max())
            self.top = largest if self.top is None else max(self.top, largest)

    def distinct(self) -> np.ndarray:
        """The distinct positions, sorted."""
        if not self.chunks:
            return np.empty(0, dtype=np.int64)
        ordered = np.sort(np.concatenate(self.chunks))
        keep = np.empty(len(ordered), dtype=bool)
        keep[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
        return ordered[keep]


@dataclass(frozen=True)
class Gap:
    """Positions ``[first, last]`` of a live source that neither the history nor live reads."""

    source: str
    first: int
    last: int
    #: ``inside``: between two positions the history holds; ``before-earliest``: between the
    #: history's last position and the live source's earliest available one
    where: str

    @property
    def size(self) -> int:
        """How many positions the gap spans."""
        return self.last - self.first + 1

    def to_json(self) -> list[Any]:
        """``[source, first, last, where]``."""
        return [self.source, self.first, self.last, self.where]


@dataclass(frozen=True)
class Switch:
    """The live start positions, what they were derived from, and the gaps found."""

    #: live key -> its first position
    starts: dict[str, int]
    #: live source name -> (how the start was derived, the history's largest position or None)
    derived: dict[str, list[Any]]
    gaps: tuple[Gap, ...] = ()
    #: positions in every gap (the metric; the listed gaps may be fewer)
    gap_positions: int = 0


def holes(source: str, positions: np.ndarray) -> list[Gap]:
    """The runs of positions missing between the history's smallest and largest.

    >>> [g.to_json() for g in holes("t-0", np.array([0, 1, 4, 5, 9]))]
    [['t-0', 2, 3, 'inside'], ['t-0', 6, 8, 'inside']]
    """
    if len(positions) < 2:
        return []
    steps = np.diff(positions)
    cut = np.nonzero(steps > 1)[0]
    return [Gap(source, int(positions[i]) + 1, int(positions[i + 1]) - 1, "inside") for i in cut]


@dataclass(frozen=True)
class Held:
    """What the history holds of one live source, summed up once (at the backfill's start).

    ``top``: its largest position; ``holes``: the positions missing between its smallest and
    largest (only where positions count records), at most :data:`LISTED_GAPS` listed.
    """

    top: int
    holes: tuple[Gap, ...] = ()
    hole_positions: int = 0

    @classmethod
    def of(cls, name: str, found: FoundPositions, *, counted: bool) -> Held:
        """The summary of ``found`` (which holds at least one position)."""
        assert found.top is not None  # noqa: S101 - only sources with positions are summed up
        if not counted:
            return cls(found.top)
        inside = holes(name, found.distinct())
        return cls(found.top, tuple(inside[:LISTED_GAPS]), sum(g.size for g in inside))

    def to_json(self) -> list[Any]:
        """``[top, hole positions, [gap, ...]]``."""
        return [self.top, self.hole_positions, [g.to_json() for g in self.holes]]

    @classmethod
    def from_json(cls, data: list[Any]) -> Held:
        """What :meth:`to_json` made."""
        top, count, listed_holes = data
        return cls(
            int(top),
            tuple(Gap(str(s), int(a), int(b), str(w)) for s, a, b, w in listed_holes),
            int(count),
        )


def position_switch(
    held: Mapping[str, Held],
    live: Mapping[str, str],
    after: Callable[[str, int], int],
    earliest: Callable[[str], int],
    *,
    counted: bool,
) -> Switch:
    """Live starts from the positions the history holds (boundary ``position``).

    ``held``: per live source name, what the history holds of it. ``live``: the live keys by
    source name. ``after(key, position)``: the live position right after a record's
    (``position + 1`` for Kafka offsets; the next line for a file). ``earliest(key)``: the
    first position the live source still has. ``counted``: positions count records (every
    position is a record, so a missing one is a gap).
    """
    starts: dict[str, int] = {}
    derived: dict[str, list[Any]] = {}
    gaps: list[Gap] = []
    count = 0
    for name, key in sorted(live.items()):
        first = earliest(key)
        if name not in held:
            starts[key] = first
            derived[name] = ["earliest: not in the history", None, first]
            continue
        top = held[name].top
        nxt = after(key, top)
        starts[key] = max(nxt, first)
        derived[name] = ["after the history's largest position", top, starts[key]]
        gaps.extend(held[name].holes)
        count += held[name].hole_positions
        if counted and first > nxt:
            gaps.append(Gap(name, nxt, first - 1, "before-earliest"))
            count += first - nxt
    return Switch(starts, derived, tuple(gaps), count)


def time_switch(
    live: Iterable[str], at_time: Callable[[str], int | None], earliest: Callable[[str], int]
) -> Switch:
    """Live starts for a cut time (boundary ``time``).

    ``at_time(key)``: the first position whose record time may be at or after the cut
    (None: the source cannot tell, so it starts at its earliest and the filter alone cuts).
    """
    starts: dict[str, int] = {}
    derived: dict[str, list[Any]] = {}
    for key in sorted(live):
        position = at_time(key)
        if position is None:
            starts[key] = earliest(key)
            derived[key] = ["earliest, rows below the cut time dropped", None, starts[key]]
        else:
            starts[key] = max(position, earliest(key))
            derived[key] = ["first position at the cut time", None, starts[key]]
    return Switch(starts, derived)


def listed(gaps: Iterable[Gap]) -> list[list[Any]]:
    """At most :data:`LISTED_GAPS` gaps per source, as JSON (the offset's record)."""
    out: list[list[Any]] = []
    per: dict[str, int] = {}
    for gap in gaps:
        per[gap.source] = per.get(gap.source, 0) + 1
        if per[gap.source] <= LISTED_GAPS:
            out.append(gap.to_json())
    return out
