"""Items leaving a keyed stage, gathered as row columns, and the rows a keyed stage reads."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import pyarrow as pa

from flamestream.model import DataItem, GlobalTime
from flamestream.spark.exec.general.items import MAY_INVALIDATE, TOMBSTONE, encode_trace
from flamestream.spark.exec.general.stateless import Exits

#: What an in-order fold (``run_in_order``'s first pass) returns for the rows it took.
Folded = TypeVar("Folded")


class Leaving:
    """Items leaving a keyed stage, as row columns (the trace already encoded)."""

    __slots__ = ("dests", "flags", "fronts", "payloads", "times", "traces", "wheres")

    def __init__(self) -> None:
        self.dests: list[str] = []
        self.times: list[int] = []
        self.fronts: list[int] = []
        self.traces: list[bytes] = []
        self.flags: list[int] = []
        self.payloads: list[Any] = []
        #: the row's determinant (source, position), or None: its global time's, looked up
        self.wheres: list[tuple[Any, Any] | None] = []

    def __len__(self) -> int:
        return len(self.dests)

    def take_back(self, mark: int) -> None:
        """Forget the rows added since there were ``mark`` (an in-order fold gave up).

        A fold fills times, fronts, traces, payloads and wheres, then the rest (:meth:`fold`).
        """
        for column in (self.times, self.fronts, self.traces, self.payloads, self.wheres):
            del column[mark:]

    def fold(self, dest: str, fold: Callable[[], Folded | None]) -> Folded | None:
        """The rows of a whole batch taken in order at once (``run_in_order``), or none.

        ``fold`` appends the rows' times, fronts, traces, payloads and wheres and returns
        what it took; or None at the first row it cannot take, and then what it appended is
        taken back. The rows it keeps all go to ``dest``, unflagged.
        """
        mark = len(self)
        folded = fold()
        if folded is None:
            self.take_back(mark)
            return None
        added = len(self.times) - mark
        self.dests += [dest] * added
        self.flags += [0] * added
        return folded

    def add_row(
        self, dest: str, ts: int, front: int, trace: bytes, payload: Any, where: Any
    ) -> None:
        """One unflagged row an in-order path sent out of the stage (its trace encoded)."""
        self.dests.append(dest)
        self.times.append(ts)
        self.fronts.append(front)
        self.traces.append(trace)
        self.flags.append(0)
        self.payloads.append(payload)
        self.wheres.append(where)

    def add_item(self, dest: str, item: DataItem) -> None:
        """One item the general path sent out of the stage."""
        time = item.meta.global_time
        self.dests.append(dest)
        self.times.append(time.ts)
        self.fronts.append(time.front)
        self.traces.append(encode_trace(item.meta.trace))
        self.flags.append(
            (MAY_INVALIDATE if item.may_invalidate else 0) | (TOMBSTONE if item.tombstone else 0)
        )
        self.payloads.append(item.payload)
        self.wheres.append(None)

    def latest(self, key: Callable[[Any], Hashable]) -> Leaving:
        """Per destination and key only the row with the greatest meta; tombstones all stay.

        Tombstones first, then one row per (destination, key) in order of first sight. Encoded
        traces order as traces do, so ``(ts, front, trace)`` compares as the meta.

        A replayed row (flagged may-invalidate) that is not its key's latest goes on as a
        tombstone: it is the newer version of a row an earlier batch sent (a late item changed
        that key's value at an earlier global time), and the barrier may still hold the older
        version, which it must drop, not release. Without a payload it releases nothing.
        """
        kept: list[int] = []
        best: dict[tuple[str, Any], int] = {}
        replayed: list[int] = []
        for row, (dest, flag, payload) in enumerate(
            zip(self.dests, self.flags, self.payloads, strict=True)
        ):
            if flag & TOMBSTONE:
                kept.append(row)
                continue
            slot = (dest, key(payload))
            held = best.get(slot)
            if held is None or self._meta(held) < self._meta(row):
                best[slot] = row
            if flag & MAY_INVALIDATE:
                replayed.append(row)
        latest = set(best.values())
        voided = [row for row in replayed if row not in latest]
        out = self.take([*kept, *voided, *best.values()])
        for row in range(len(kept), len(kept) + len(voided)):
            out.flags[row] = MAY_INVALIDATE | TOMBSTONE  # as a tombstone is (DataItem)
            out.payloads[row] = None
        return out

    def _meta(self, row: int) -> tuple[int, int, bytes]:
        return self.times[row], self.fronts[row], self.traces[row]

    def take(self, rows: Sequence[int]) -> Leaving:
        """These rows, in this order."""
        out = Leaving()
        out.dests = [self.dests[r] for r in rows]
        out.times = [self.times[r] for r in rows]
        out.fronts = [self.fronts[r] for r in rows]
        out.traces = [self.traces[r] for r in rows]
        out.flags = [self.flags[r] for r in rows]
        out.payloads = [self.payloads[r] for r in rows]
        out.wheres = [self.wheres[r] for r in rows]
        return out

    def batch(
        self, exits: Exits, determinants: Mapping[GlobalTime, tuple[Any, Any]]
    ) -> tuple[pa.RecordBatch, list[Any] | None]:
        """The leaving rows, with the determinant of each one's global time (if known).

        Also the payload objects of rows for ``exits.handed`` destinations (by row).
        """
        out = exits.builder()
        wheres = self.wheres
        last: tuple[int, int] | None = None
        found: tuple[Any, Any] = (None, None)
        for row in [r for r, where in enumerate(wheres) if where is None]:
            time = (self.times[row], self.fronts[row])
            if time != last:  # rows of one global time mostly come together
                last = time
                found = determinants.get(GlobalTime(*time), (None, None))
            wheres[row] = found
        sources = [where[0] for where in wheres]  # type: ignore[index]
        positions = [where[1] for where in wheres]  # type: ignore[index]
        start = 0
        while start < len(self.dests):  # runs of rows for one destination, in bulk
            dest = self.dests[start]
            stop = start + 1
            while stop < len(self.dests) and self.dests[stop] == dest:
                stop += 1
            located = partial(self._where, start, sources, positions)
            out.extend(dest, self.payloads[start:stop], self.flags[start:stop], located)
            start = stop
        rows = out.batch(
            pa.array(self.times, pa.int64()),
            pa.array(self.fronts, pa.int32()),
            pa.array(self.traces, pa.binary()),
            pa.array(self.flags, pa.int8()),
            pa.array(sources, pa.string()),
            pa.array(positions, pa.int64()),
        )
        return rows, out.objects

    def _where(
        self, start: int, sources: list[Any], positions: list[Any], nth: int
    ) -> tuple[GlobalTime, Any]:
        """Row ``start + nth``'s global time and determinant (for error messages)."""
        row = start + nth
        return GlobalTime(self.times[row], self.fronts[row]), (sources[row], positions[row])


def item_rows(columns: Mapping[str, list[Any]]) -> Any:
    """The item columns a keyed stage reads, row by row (``ts`` ... ``payload``)."""
    return zip(
        columns["ts"],
        columns["front"],
        columns["trace"],
        columns["flags"],
        columns["source"],
        columns["position"],
        columns["to"],
        columns["payload"],
        strict=True,
    )
