"""The in-order fast path of a keyed stage running map_reduce's cycle.

A keyed stage delivers its batch's items one at a time, each to quiescence through the
grouping's state machine and the stateless steps of the cycle
(:meth:`KeyedRunner._run <flamestream.spark.exec.general.keyed.KeyedRunner>`). For map_reduce's
cycle (merge -> grouping(2, by key) -> filter -> reduce -> broadcast -> back to the merge) an
item that arrives *in order* always takes the same path, so its outcome can be written down
instead of interpreted. A mapped item ``x`` with trace ``T`` whose key's bucket ends below it:

======================  ===================================================================
merge                   ``x`` reaches the grouping with trace ``T + (0,0)``
grouping                appends ``x``; emits ``(last, x)`` (or ``(x,)``) at ``(c,0)``, the
                        bucket's next logical time ``c``
filter, reduce          pass the tuple on; reduce makes ``r`` from it
broadcast               ``r`` leaves the stage (trace ``T (0,0) (c,0) (0,0) (0,0) (0,q)``)
                        and goes back to the merge (``… (0,p) (0,0)``)
grouping                appends ``r`` (in order: its trace extends ``x``'s); emits ``(x, r)``
                        at ``(c+1,0)``, which the filter drops (it ends in a reduced item)
======================  ===================================================================

:class:`MapReduceCycle` does exactly that: the same bucket appends, index entries, counters
and statistics as :meth:`GroupingState.receive
<flamestream.runtime.grouping.GroupingState.receive>`, made through the state's public
in-order methods (``tail``, ``append_in_order``, ``settle_in_order``), the same leaving row,
without the intermediate items and deliveries. An item takes the fast path only when every
step of that table provably happens (no may-invalidate or tombstone flag, the bucket's last
item below it, no flagged item of its global time in the index, a reduce that does not
raise); any other item goes through the general path, in its turn, so the state stays what
the general path alone would make of the batch. ``tests/unit/test_fastpath.py`` checks that
on random batches.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from flamestream.approx.schedule import SketchSchedule
from flamestream.graph.mapreduce import Mapped, ReduceStep
from flamestream.model import DataItem, GlobalTime, LocalTime, Meta
from flamestream.runtime.grouping import GroupingState
from flamestream.spark.exec.general.items import (
    MAPPED_TAG,
    decode_payload,
    decode_trace,
    encode_trace,
)
from flamestream.spark.exec.general.leaving import Leaving, item_rows
from flamestream.spark.plan.paths import CycleShape

_LOCAL = struct.Struct(">QI")


_L00 = LocalTime(0, 0)

#: Types whose objects may be shared by several items' payloads: immutable all through, so a
#: reducer cannot tell one decoded object from a copy (a tuple may hold a list: not here).
_SHARED = frozenset({str, bytes, int, float, bool, type(None)})


def _decoded_pair(
    payload: bytes | None, pairs: dict[bytes | None, tuple[Any, Any]]
) -> tuple[Any, Any] | None:
    """The ``(key, value)`` of a mapped item's payload (None: not a mapped item's).

    Kept in ``pairs`` by payload when key and value are immutable (``_SHARED``): the rows of
    a repeated pair (a word's ``(word, 1)``) then share one, unpickled once.
    """
    if payload is None or payload[:1] != MAPPED_TAG:
        return None
    pair: tuple[Any, Any] = pickle.loads(payload[1:])  # noqa: S301  (our own stages wrote it)
    if type(pair[0]) in _SHARED and type(pair[1]) in _SHARED:
        pairs[payload] = pair
    return pair


class MapReduceCycle:
    """map_reduce's cycle in a keyed stage, with the in-order fast path (module docstring)."""

    def __init__(self, shape: CycleShape) -> None:
        """The cycle the plan found (``plan.paths.map_reduce_cycle``)."""
        self.merge = shape.merge
        self.exit_to = shape.exit_to
        self.reduce = shape.reduce
        exit_port, back_port = shape.exit_port, shape.back_port
        # (c,0) goes between these: the merge's local time before, filter, reduce and the
        # broadcast's after (the leaving copy's, and the copy going back through the merge)
        self.exit_tail = encode_trace((_L00, _L00, LocalTime(0, exit_port)))
        self.back_tail = (_L00, _L00, LocalTime(0, back_port), _L00)
        self.back_bytes = encode_trace(self.back_tail)
        #: the batch's sketch decisions and the reduce they fold with (exact_or_approximate)
        self.sketch: SketchSchedule | None = None
        self.lowered: ReduceStep | None = None

    def schedule(self, sketch: SketchSchedule | None, lowered: ReduceStep | None) -> None:
        """Fold the items ``sketch`` picks with ``lowered`` this batch (None: none)."""
        self.sketch, self.lowered = (sketch, lowered) if sketch and lowered else (None, None)

    def _reduce_for(self, time: GlobalTime, key: Any) -> ReduceStep:
        """The reduce for key ``key``'s item of global time ``time``."""
        if self.sketch is not None and self.lowered is not None and self.sketch.lowered(time, key):
            return self.lowered
        return self.reduce

    def run_in_order(
        self,
        state: GroupingState,
        columns: Mapping[str, list[Any]],
        determinants: dict[GlobalTime, tuple[Any, Any]],
        leaving: Leaving,
        min_time: GlobalTime,
    ) -> list[int] | None:
        """The whole batch at once, if it is in order and below ``min_time``; or None.

        Only for a caller that collects garbage below ``min_time`` right after. The collection
        keeps, of a bucket's items below the min-time, only the last one (window - 1), and
        drops every index entry below it. So of what :meth:`run` would add to the state for a
        batch lying wholly below the min-time, only each key's last reduced item survives:
        this leaves each of the batch's keys with just that item (and its clock, and the
        statistics as the collection would count them), and no index entry for the batch's
        global times (the collection would drop them). Two passes: the first checks every
        row and computes the leaving rows without touching the state; if a row is not in
        order (or a reduce raises), its rows are taken back, nothing has changed and it
        returns None (then :meth:`run` does the batch).

        Returns the row in ``leaving`` of each key's last leaving item, keys in order of first
        sight: what ``Leaving.latest`` keeps of the rows, found without comparing metas.
        """
        folded = leaving.fold(
            self.exit_to,
            lambda: self._fold_in_order(state, columns, determinants, leaving, min_time),
        )
        if folded is None:
            return None
        keys, decoded = folded
        self._keep_last_reduced(state, keys, decoded)
        return [held[6] for held in keys.values()]

    def _fold_in_order(
        self,
        state: GroupingState,
        columns: Mapping[str, list[Any]],
        determinants: dict[GlobalTime, tuple[Any, Any]],
        leaving: Leaving,
        min_time: GlobalTime,
    ) -> tuple[dict[Hashable, list[Any]], _TraceCache] | None:
        """The first pass of :meth:`run_in_order`: check and fold every row, touching no state.

        Appends the leaving rows (not their destinations and flags); returns None at the first
        row out of order (``Leaving.fold`` takes back what was appended).
        """
        fold, merge = self.reduce.fold, self.merge
        chosen = self._reduce_for if self.sketch is not None else None
        exit_tail, back_bytes, pack = self.exit_tail, self.back_bytes, _LOCAL.pack
        out_times, out_fronts = leaving.times, leaving.fronts
        out_traces, out_payloads, out_wheres = leaving.traces, leaving.payloads, leaving.wheres
        entering: dict[bytes, bytes] = {}  # entering trace -> the bytes of it at the grouping
        merge_local = _LOCAL.pack(0, 0)
        # per key (see _first_of_key): [trace bytes at the grouping of its last reduced item,
        # its time, its payload, the bucket's clock, the key's items, its entering trace, the
        # row in ``leaving`` of its last leaving item]
        keys: dict[Hashable, list[Any]] = {}
        decoded = _TraceCache()
        pairs: dict[bytes | None, tuple[Any, Any]] = {}  # see _decoded_pair
        last: tuple[int, int] | None = None
        time, where, ok = GlobalTime(0, 0), (None, None), True
        for ts, front, trace, flags, source, position, to, payload in item_rows(columns):
            if (ts, front) != last:
                last, time = (ts, front), GlobalTime(ts, front)
                where = determinants.setdefault(time, (source, position))
                if not time < min_time or state.may_invalidate_at(time):
                    ok = False
                    break
            if flags or to != merge:
                ok = False
                break
            # a Mapped(key, value), not made: fold takes both
            pair = pairs.get(payload) or _decoded_pair(payload, pairs)
            if pair is None:
                ok = False
                break
            key, value = pair
            x_bytes = entering.get(trace)
            if x_bytes is None:
                x_bytes = entering[trace] = trace + merge_local
            held = keys.get(key)
            if held is None:
                first = _first_of_key(state.tail(key), time, trace, decoded)
                if first is None:  # not after the bucket's last item
                    ok = False
                    break
                held, before = first
                keys[key] = held
            else:
                # after the key's last reduced item r (same time: compare the encoded traces)
                if held[1] is time and not x_bytes > held[0]:
                    ok = False
                    break
                before = held[2]
            try:
                # what the reduce step makes of the tuple
                reduced = (fold if chosen is None else chosen(time, key).fold)(before, key, value)
            except Exception:  # run() leaves the item to the general path, which names it
                ok = False
                break
            clock = held[3] + 1
            at_grouping = x_bytes + pack(clock, 0)  # the tuple's trace
            held[0] = at_grouping + back_bytes
            held[1], held[2], held[3], held[5] = time, reduced, clock + 1, trace
            held[4] += 1
            held[6] = len(out_times)
            out_times.append(ts)
            out_fronts.append(front)
            out_traces.append(at_grouping + exit_tail)
            out_payloads.append(reduced)
            out_wheres.append(where)
        return (keys, decoded) if ok else None

    def _keep_last_reduced(
        self,
        state: GroupingState,
        keys: dict[Hashable, list[Any]],
        decoded: _TraceCache,
    ) -> None:
        """The state as :meth:`run` and then ``collect_garbage(min_time)`` would leave it.

        ``keys`` holds, per key of the batch, what :meth:`run_in_order` kept of its last
        reduced item.
        """
        # What run() and then collect_garbage(min_time) leave. The batch's global times are
        # not indexed: all lie below the min-time, so the collection would drop them again
        # (with the determinants noted for them), and indexing and dropping an entry per
        # time was the larger part of the collection's cost. The index's times stay as the
        # general path leaves them: the collection sorts them (GroupingState._times).
        # The collection's part for the batch's keys is done here: every item a key held came
        # before the key's first item of the batch, so below the min-time too, and only the
        # last item below it stays (window - 1 = 1): the last reduced item. Such a bucket
        # needs no further collection.
        back_tail = self.back_tail
        for key, (_, time, reduced, clock, count, trace, _) in keys.items():
            r_trace = (*decoded(trace), LocalTime(clock - 1, 0), *back_tail)
            kept = (DataItem(reduced, Meta(time, r_trace)),)
            state.settle_in_order(key, kept, clock, appended=2 * count)

    def run(
        self,
        state: GroupingState,
        columns: Mapping[str, list[Any]],
        determinants: dict[GlobalTime, tuple[Any, Any]],
        general: Callable[[int], None],
        leaving: Leaving,
    ) -> int:
        """Every row of the batch (in meta order), fast where in order; returns how many were.

        ``general(row)`` delivers row ``row`` to quiescence the general way, appending what
        leaves to ``leaving``; it runs in the row's turn, so both paths see the same state.
        """
        reduce, merge, exit_to = self.reduce, self.merge, self.exit_to
        chosen = self._reduce_for if self.sketch is not None else None
        exit_tail, back_tail = self.exit_tail, self.back_tail
        pack, add_row = _LOCAL.pack, leaving.add_row
        # per encoded trace of an entering row: its trace at the grouping, and the bytes of it
        entering: dict[bytes, tuple[tuple[LocalTime, ...], bytes]] = {}
        merge_local = _LOCAL.pack(0, 0)
        last: tuple[int, int] | None = None
        time = GlobalTime(0, 0)
        where: tuple[Any, Any] = (None, None)
        clean: bool | None = None  # no may-invalidate item of ``time`` in the index
        fast = 0
        for row, (ts, front, trace, flags, source, position, to, payload) in enumerate(
            item_rows(columns)
        ):
            if (ts, front) != last:  # sorted by meta: a global time's rows come together
                last = (ts, front)
                time = GlobalTime(ts, front)
                where = determinants.setdefault(time, (source, position))
                clean = None
            plain = not flags and to == merge and payload is not None
            mapped = decode_payload(payload) if plain else None
            if not isinstance(mapped, Mapped):
                general(row)
                clean = None  # the general path may have indexed may-invalidate items
                continue
            known = entering.get(trace)
            if known is None:
                known = entering[trace] = ((*decode_trace(trace), _L00), trace + merge_local)
            x_trace, x_bytes = known
            x_meta = Meta(time, x_trace)
            key = mapped.key
            previous, clock = state.tail(key)
            if previous is not None and not previous.meta < x_meta:
                general(row)
                clean = None
                continue
            if clean is None:
                clean = not state.may_invalidate_at(time)
            if not clean:
                general(row)
                continue
            window = (mapped,) if previous is None else (previous.payload, mapped)
            try:
                reduced = (reduce if chosen is None else chosen(time, key))(window)
            except Exception:  # the general path raises it again, naming the step
                general(row)
                clean = None
                continue
            clock = _remember_pair(state, key, clock, mapped, reduced, x_meta, back_tail)
            add_row(exit_to, ts, front, x_bytes + pack(clock, 0) + exit_tail, reduced, where)
            fast += 1
        return fast


def _first_of_key(
    tail: tuple[DataItem | None, int], time: GlobalTime, trace: bytes, decoded: _TraceCache
) -> tuple[list[Any], Any] | None:
    """For a key's first row of an in-order batch: its ``held`` record and its tuple's head.

    ``tail`` is the key's last item and clock (``GroupingState.tail``). None when the row
    does not come after that item (not in order).
    """
    previous, clock = tail
    if previous is not None and not previous.meta < Meta(time, decoded(trace)):
        return None
    before = None if previous is None else previous.payload
    return [None, time, None, clock, 0, trace, None], before


def _remember_pair(
    state: GroupingState,
    key: Hashable,
    clock: int,
    mapped: Mapped[Any, Any],
    reduced: Any,
    x_meta: Meta,
    back_tail: tuple[LocalTime, ...],
) -> int:
    """What receive(x), the cycle and receive(r) do to the state, in that order.

    x is the mapped item, r the reduced one, ``clock`` the bucket's clock before them;
    returns the grouping's logical time of x's tuple.
    """
    x_clock = clock + 1
    x = DataItem(mapped, x_meta)
    r_trace = (*x_meta.trace, LocalTime(x_clock, 0), *back_tail)
    r = DataItem(reduced, Meta(x_meta.global_time, r_trace))
    state.append_in_order(key, (x, r), x_clock + 1)
    return x_clock


class _TraceCache(dict[bytes, tuple[LocalTime, ...]]):
    """Entering trace (encoded) -> the item's trace at the grouping (after the merge)."""

    def __call__(self, trace: bytes) -> tuple[LocalTime, ...]:
        found = self.get(trace)
        if found is None:
            found = self[trace] = (*decode_trace(trace), _L00)
        return found
