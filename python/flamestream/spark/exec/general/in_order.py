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
makes of the batch. ``tests/unit/test_in_order_lane.py`` checks that on random batches.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from flamestream.graph.logical import LogicalGraph
from flamestream.graph.steps import Grouping
from flamestream.model import DataItem, GlobalTime, LocalTime, Meta
from flamestream.runtime.grouping import GroupingState
from flamestream.spark.exec.general.items import decode_payload, decode_trace
from flamestream.spark.exec.general.leaving import Leaving, item_rows
from flamestream.spark.plan.stages import Stage

_LOCAL = struct.Struct(">QI")


class InOrderGrouping:
    """A keyed stage that is a grouping alone, with the in-order lane (module docstring)."""

    def __init__(self, grouping: Grouping, exit_to: str) -> None:
        self.grouping = grouping.step_id
        self.key = grouping.key
        self.exit_to = exit_to  #: the step the grouping's tuples go to (after the stage)

    @classmethod
    def of(cls, graph: LogicalGraph, stage: Stage) -> InOrderGrouping | None:
        """The lane if ``stage`` is its grouping alone (a cycle's stage holds more steps)."""
        if stage.grouping is None or tuple(stage.steps) != (stage.grouping,):
            return None
        grouping = graph.step(stage.grouping)
        assert isinstance(grouping, Grouping)  # noqa: S101
        return cls(grouping, graph.consumer(grouping.step_id))

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
        pack = _LOCAL.pack
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
            leaving.dests.append(exit_to)
            leaving.times.append(ts)
            leaving.fronts.append(front)
            leaving.traces.append(trace + pack(clock, 0))
            leaving.flags.append(0)
            leaving.payloads.append(payloads)
            leaving.wheres.append(where)
            taken += 1
        return taken
