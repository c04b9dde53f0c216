"""The in-order lane of a keyed stage that is a grouping alone.

A keyed stage delivers its rows one at a time, each to quiescence: a data item made from the
row, a handler per step, ``GroupingState.receive``, the leaving item encoded again
(:meth:`KeyedRunner._run <flamestream.spark.exec.general.keyed.KeyedRunner>`). When the stage
is a grouping alone (any user grouping outside a cycle: pairs, sessions, windows, with any key
function; the steps after it run as the stage's tails), an item arriving *in order* always
takes the same path: the grouping appends it to its key's bucket (it comes after the bucket's
last item) and emits the tuple of the bucket's last ``window`` payloads, unflagged, with the
item's trace and ``(c, 0)``, ``c`` the bucket's next logical time.

:class:`InOrderGrouping` makes exactly that, per row, through the state's
:meth:`~flamestream.runtime.grouping.GroupingState.append_in_order`: the same bucket, index
entry, counters and leaving row as ``receive``, without the intermediate items, handlers and
trace encoding. A row takes the lane only when every step of that table provably happens (no
may-invalidate or tombstone flag, a key the key function gives and a dict can hold, the
bucket's last item below it, no may-invalidate item of its global time in the index); any
other row goes the general way in its turn, so the state stays what the general path alone
makes of the batch. ``tests/unit/test_in_order_lane.py`` checks that on random batches. The
plan decides which stages take the lane (``in-order-grouping``, see
:mod:`flamestream.spark.plan.paths`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from flamestream.graph.steps import Grouping
from flamestream.model import DataItem, GlobalTime, LocalTime, Meta
from flamestream.runtime.grouping import GroupingState
from flamestream.spark.exec.general.items import decode_payload, decode_trace
from flamestream.spark.exec.general.leaving import Leaving, item_rows

_LOCAL = struct.Struct(">QI")


class InOrderGrouping:
    """A keyed stage that is a grouping alone, with the in-order lane (module docstring)."""

    def __init__(self, grouping: Grouping, exit_to: str) -> None:
        self.grouping = grouping.step_id
        self.key = grouping.key
        self.window = grouping.window
        self.exit_to = exit_to  #: the step the grouping's tuples go to (after the stage)

    def run(
        self,
        state: GroupingState,
        columns: Mapping[str, list[Any]],
        determinants: dict[GlobalTime, tuple[Any, Any]],
        general: Callable[[int], None],
        leaving: Leaving,
    ) -> int:
        """Every row of the batch (in meta order), in the lane where in order; how many were.

        ``general(row)`` delivers row ``row`` to quiescence the general way, appending what
        leaves to ``leaving``; it runs in the row's turn, so both ways see the same state.
        """
        key_of, exit_to, grouping = self.key, self.exit_to, self.grouping
        pack, add_row = _LOCAL.pack, leaving.add_row
        traces: dict[bytes, tuple[LocalTime, ...]] = {}  # entering trace -> decoded
        last: tuple[int, int] | None = None
        time, where = GlobalTime(0, 0), (None, None)
        clean: bool | None = None  # no may-invalidate item of ``time`` in the index
        taken = 0
        for row, (ts, front, trace, flags, source, position, to, payload) in enumerate(
            item_rows(columns)
        ):
            if (ts, front) != last:  # sorted by meta: a global time's rows come together
                last, time = (ts, front), GlobalTime(ts, front)
                where = determinants.setdefault(time, (source, position))
                clean = None
            if flags or payload is None or to != grouping:
                general(row)
                clean = None  # the general way may have indexed may-invalidate items
                continue
            if clean is None:
                clean = not state.may_invalidate_at(time)
            if not clean:
                general(row)
                continue
            value = decode_payload(payload)
            decoded = traces.get(trace)
            if decoded is None:
                decoded = traces[trace] = decode_trace(trace)
            try:
                emitted = state.receive_in_order(
                    key_of(value), DataItem(value, Meta(time, decoded))
                )
            except Exception:  # the general way raises it again, naming step and record
                emitted = None
            if emitted is None:  # not after its key's last item, or no key: the general way
                general(row)
                clean = None  # the general way may have indexed may-invalidate items
                continue
            payloads, clock = emitted
            add_row(exit_to, ts, front, trace + pack(clock, 0), payloads, where)
            taken += 1
        return taken

    def run_in_order(
        self,
        state: GroupingState,
        columns: Mapping[str, list[Any]],
        determinants: dict[GlobalTime, tuple[Any, Any]],
        leaving: Leaving,
        min_time: GlobalTime,
    ) -> bool:
        """The whole batch at once, if every row is in order and below ``min_time``.

        Only for a caller that collects garbage below ``min_time`` right after (as
        ``MapReduceCycle.run_in_order``): of a key's items below the min-time the collection
        keeps only the last ``window - 1`` and drops the index entries of their times. So
        each of the batch's keys is left with just those items (``settle_in_order``: its
        clock and the statistics as the appends and the collection would count them), and
        the batch's times are not indexed. Two passes: the first checks every row and makes
        the leaving rows without touching the state; at a row it cannot take (flagged, out of
        order, above the min-time, a key that fails) it takes them back and returns False,
        nothing changed (then :meth:`run` does the batch). A window of 1 keeps nothing (the
        collection deletes the bucket, clock and all): such batches go row by row.
        """
        if self.window < 2:
            return False
        folded = leaving.fold(
            self.exit_to,
            lambda: self._fold_in_order(state, columns, determinants, leaving, min_time),
        )
        if folded is None:
            return False
        keys, values = folded
        made = _ItemsOfRows(columns, values)
        for key, (recent, clock, appended) in keys.items():
            kept = [made(x) for x in recent]
            state.settle_in_order(key, kept, clock, appended=appended)
        return True

    def _fold_in_order(
        self,
        state: GroupingState,
        columns: Mapping[str, list[Any]],
        determinants: dict[GlobalTime, tuple[Any, Any]],
        leaving: Leaving,
        min_time: GlobalTime,
    ) -> tuple[dict[Hashable, list[Any]], list[Any]] | None:
        """The first pass of :meth:`run_in_order`: check every row and make its leaving row.

        Returns per key ``[recent, clock, appended]``: its last ``window - 1`` items (bucket
        items, or the batch's row numbers), its clock after the batch, the rows appended; and
        the rows' payloads. None at the first row the batch cannot take this way.
        """
        key_of, grouping, keep = self.key, self.grouping, self.window - 1
        pack = _LOCAL.pack
        values: list[Any] = []  # per row, its payload
        keys: dict[Hashable, list[Any]] = {}
        # the row before's meta (None before the first row)
        last_ts: int | None = None
        last_front: int | None = None
        last_trace = b""
        time, where = GlobalTime(0, 0), (None, None)
        # the leaving columns' appends, looked up once (a hot loop: ~200k rows a task)
        times, fronts = leaving.times.append, leaving.fronts.append
        traces, windows, wheres = (
            leaving.traces.append,
            leaving.payloads.append,
            leaving.wheres.append,
        )
        for row, (ts, front, trace, flags, source, position, to, payload) in enumerate(
            item_rows(columns)
        ):
            if ts != last_ts or front != last_front:
                time = GlobalTime(ts, front)
                where = determinants.setdefault(time, (source, position))
                if not time < min_time or state.may_invalidate_at(time):
                    return None
                last_ts, last_front = ts, front
            elif trace <= last_trace:  # two rows of one meta: the general way reports it
                return None
            last_trace = trace
            if flags or payload is None or to != grouping:
                return None
            value = decode_payload(payload)
            values.append(value)
            try:
                key = key_of(value)
                held = keys.get(key)
                if held is None:
                    held = self._first_of_key(state, key, keep, time, trace)
                    if held is None:
                        return None
                    keys[key] = held
            except Exception:  # the general way raises it again, naming step and record
                return None
            recent = held[0]
            # a recent item is a row number of this batch or a bucket's DataItem
            windows((*[values[x] if x.__class__ is int else x.payload for x in recent], value))
            if len(recent) >= keep:
                del recent[0]
            recent.append(row)
            clock = held[1] = held[1] + 1
            held[2] += 1
            times(ts)
            fronts(front)
            traces(trace + pack(clock, 0))
            wheres(where)
        return keys, values

    @staticmethod
    def _first_of_key(
        state: GroupingState,
        key: Hashable,
        keep: int,
        time: GlobalTime,
        trace: bytes,
    ) -> list[Any] | None:
        """A key's record at its first row of the batch; None if the row is not after it."""
        items, clock = state.last_items(key, keep)
        if items and not items[-1].meta < Meta(time, decode_trace(trace)):
            return None
        return [list(items), clock, 0]


class _ItemsOfRows:
    """Data items made from the batch's rows, for the items a key keeps."""

    def __init__(self, columns: Mapping[str, list[Any]], values: list[Any]) -> None:
        self.columns = columns
        self.values = values  #: the rows' payloads, as the leaving tuples hold them
        self.traces: dict[bytes, tuple[LocalTime, ...]] = {}

    def __call__(self, recent: Any) -> DataItem:
        """A bucket item as it is; a row (its number) as the item ``receive`` would hold."""
        if isinstance(recent, DataItem):
            return recent
        columns = self.columns
        trace = columns["trace"][recent]
        decoded = self.traces.get(trace)
        if decoded is None:
            decoded = self.traces[trace] = decode_trace(trace)
        time = GlobalTime(columns["ts"][recent], columns["front"][recent])
        return DataItem(self.values[recent], Meta(time, decoded))
