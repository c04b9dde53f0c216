"""The in-order fast path of a keyed stage running map_reduce's cycle.

A keyed stage delivers its batch's items one at a time, each to quiescence through the
grouping's state machine and the stateless steps of the cycle
(:meth:`KeyedRunner._run <flamestream.spark.keyed.KeyedRunner>`). For map_reduce's cycle
(merge -> grouping(2, by key) -> filter -> reduce -> broadcast -> back to the merge) an
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
<flamestream.runtime.grouping.GroupingState.receive>`, the same leaving row, without the
intermediate items and deliveries. An item takes the fast path only when every step of that
table provably happens (no may-invalidate or tombstone flag, the bucket's last item below it,
no flagged item of its global time in the index, a reduce that does not raise); any other item
goes through the general path, in its turn, so the state stays what the general path alone
would make of the batch. ``tests/unit/test_fastpath.py`` checks that on random batches.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Mapping, Sequence
from heapq import heappush
from operator import attrgetter
from typing import Any

import pyarrow as pa

from flamestream.graph.logical import LogicalGraph
from flamestream.graph.mapreduce import Mapped, _ends_with_mapped, _ReduceStep
from flamestream.graph.steps import Broadcast, Filter, Grouping, Map, Merge
from flamestream.model import DataItem, GlobalTime, LocalTime, Meta
from flamestream.runtime.grouping import Bucket, GroupingState
from flamestream.spark.items import (
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_payload,
    decode_trace,
    encode_trace,
)
from flamestream.spark.stages import Exits, Stage

_LOCAL = struct.Struct(">QI")
_L00 = LocalTime(0, 0)
#: How map_reduce's grouping keys items (``attrgetter("key")``), as ``repr`` shows it.
_KEY_REPR = repr(attrgetter("key"))


class Leaving:
    """Items leaving a keyed stage, as row columns (the trace already encoded)."""

    __slots__ = ("dests", "flags", "fronts", "payloads", "times", "traces")

    def __init__(self) -> None:
        self.dests: list[str] = []
        self.times: list[int] = []
        self.fronts: list[int] = []
        self.traces: list[bytes] = []
        self.flags: list[int] = []
        self.payloads: list[Any] = []

    def __len__(self) -> int:
        return len(self.dests)

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

    def latest(self, key: Callable[[Any], Hashable]) -> Leaving:
        """Per destination and key only the row with the greatest meta; tombstones all stay.

        Tombstones first, then one row per (destination, key) in order of first sight. Encoded
        traces order as traces do, so ``(ts, front, trace)`` compares as the meta.
        """
        kept: list[int] = []
        best: dict[tuple[str, Any], int] = {}
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
        return self._take([*kept, *best.values()])

    def _meta(self, row: int) -> tuple[int, int, bytes]:
        return self.times[row], self.fronts[row], self.traces[row]

    def _take(self, rows: Sequence[int]) -> Leaving:
        out = Leaving()
        out.dests = [self.dests[r] for r in rows]
        out.times = [self.times[r] for r in rows]
        out.fronts = [self.fronts[r] for r in rows]
        out.traces = [self.traces[r] for r in rows]
        out.flags = [self.flags[r] for r in rows]
        out.payloads = [self.payloads[r] for r in rows]
        return out

    def batch(
        self, exits: Exits, determinants: Mapping[GlobalTime, tuple[Any, Any]]
    ) -> pa.RecordBatch:
        """The leaving rows, each with the determinant of its global time (if this batch had it)."""
        out = exits.builder()
        sources: list[Any] = []
        positions: list[Any] = []
        last: tuple[int, int] | None = None
        where: tuple[Any, Any] = (None, None)
        for dest, ts, front, flag, payload in zip(
            self.dests, self.times, self.fronts, self.flags, self.payloads, strict=True
        ):
            if (ts, front) != last:  # rows of one global time mostly come together
                last = (ts, front)
                where = determinants.get(GlobalTime(ts, front), (None, None))
            sources.append(where[0])
            positions.append(where[1])
            out.add(dest, payload, flag, _Where(GlobalTime(ts, front), where))
        return out.batch(
            pa.array(self.times, pa.int64()),
            pa.array(self.fronts, pa.int32()),
            pa.array(self.traces, pa.binary()),
            pa.array(self.flags, pa.int8()),
            pa.array(sources, pa.string()),
            pa.array(positions, pa.int64()),
        )


class _Where:
    """A row's global time and determinant, for error messages (called only on an error)."""

    __slots__ = ("determinant", "time")

    def __init__(self, time: GlobalTime, determinant: Any) -> None:
        self.time, self.determinant = time, determinant

    def __call__(self) -> tuple[GlobalTime, Any]:
        return self.time, self.determinant


class MapReduceCycle:
    """map_reduce's cycle in a keyed stage, with the in-order fast path (module docstring)."""

    def __init__(
        self, merge: str, exit_to: str, exit_port: int, back_port: int, reduce: _ReduceStep
    ) -> None:
        self.merge = merge
        self.exit_to = exit_to
        self.reduce = reduce
        # (c,0) goes between these: the merge's local time before, filter, reduce and the
        # broadcast's after (the leaving copy's, and the copy going back through the merge)
        self.exit_tail = encode_trace((_L00, _L00, LocalTime(0, exit_port)))
        self.back_tail = (_L00, _L00, LocalTime(0, back_port), _L00)

    @classmethod
    def of(cls, graph: LogicalGraph, stage: Stage) -> MapReduceCycle | None:
        """The cycle if ``stage`` is exactly map_reduce's (as built by ``map_reduce``), or None."""
        if stage.grouping is None or len(stage.steps) != 5 or len(stage.entries) != 1:
            return None
        inside = set(stage.steps)
        merge = graph.step(stage.entries[0])
        grouping = graph.step(stage.grouping)
        if not isinstance(merge, Merge) or graph.consumer(merge.step_id) != grouping.step_id:
            return None
        if not (
            isinstance(grouping, Grouping)
            and grouping.window == 2
            and isinstance(grouping.key, attrgetter)
            and repr(grouping.key) == _KEY_REPR
        ):
            return None
        filter_ = graph.step(graph.consumer(grouping.step_id))
        if not (
            isinstance(filter_, Filter)
            and filter_.predicate is _ends_with_mapped
            and filter_.version_stable
        ):
            return None
        reduce = graph.step(graph.consumer(filter_.step_id))
        if not (isinstance(reduce, Map) and isinstance(reduce.fn, _ReduceStep)):
            return None
        broadcast = graph.step(graph.consumer(reduce.step_id))
        if not (isinstance(broadcast, Broadcast) and broadcast.n == 2):
            return None
        ports = [graph.consumer(broadcast.step_id, port) for port in range(2)]
        if merge.step_id not in ports:
            return None
        back = ports.index(merge.step_id)
        exit_port = 1 - back
        if ports[exit_port] in inside:
            return None
        return cls(merge.step_id, ports[exit_port], exit_port, back, reduce.fn)

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
        # The grouping's internals, as GroupingState.receive's in-order branch touches them.
        buckets: dict[Hashable, Bucket] = state._buckets
        by_time = state._by_time
        times_heap = state._times
        oversized = state._oversized
        stats = state.stats
        reduce, merge, exit_to = self.reduce, self.merge, self.exit_to
        exit_tail, back_tail = self.exit_tail, self.back_tail
        pack = _LOCAL.pack
        out_dests, out_times, out_fronts = leaving.dests, leaving.times, leaving.fronts
        out_traces, out_flags, out_payloads = leaving.traces, leaving.flags, leaving.payloads
        # per encoded trace of an entering row: its trace at the grouping, and the bytes of it
        entering: dict[bytes, tuple[tuple[LocalTime, ...], bytes]] = {}
        merge_local = _LOCAL.pack(0, 0)
        last: tuple[int, int] | None = None
        time = GlobalTime(0, 0)
        clean: bool | None = None  # no may-invalidate item of ``time`` in the index
        fast = 0
        for row, (ts, front, trace, flags, source, position, to, payload) in enumerate(
            zip(
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
        ):
            if (ts, front) != last:  # sorted by meta: a global time's rows come together
                last = (ts, front)
                time = GlobalTime(ts, front)
                determinants.setdefault(time, (source, position))
                clean = None
            if flags or to != merge or payload is None:
                general(row)
                clean = None  # the general path may have indexed may-invalidate items
                continue
            mapped = decode_payload(payload)
            if not isinstance(mapped, Mapped):
                general(row)
                clean = None
                continue
            known = entering.get(trace)
            if known is None:
                known = entering[trace] = ((*decode_trace(trace), _L00), trace + merge_local)
            x_trace, x_bytes = known
            x_meta = Meta(time, x_trace)
            key = mapped.key
            bucket = buckets.get(key)
            previous = bucket.items[-1] if bucket is not None and bucket.items else None
            if previous is not None and not previous.meta < x_meta:
                general(row)
                clean = None
                continue
            if clean is None:
                peers = by_time.get(time)
                clean = not peers or not any(p.may_invalidate for _, p in peers)
            if not clean:
                general(row)
                continue
            window = (mapped,) if previous is None else (previous.payload, mapped)
            try:
                reduced = reduce(window)
            except Exception:  # the general path raises it again, naming the step
                general(row)
                clean = None
                continue
            # What receive(x), the cycle and receive(r) do to the state, in that order.
            if bucket is None:
                bucket = buckets[key] = Bucket()
            clock = bucket.clock + 1
            bucket.clock = clock + 1
            x = DataItem(mapped, x_meta)
            r = DataItem(reduced, Meta(time, (*x_trace, LocalTime(clock, 0), *back_tail)))
            bucket.items.append(x)
            bucket.items.append(r)
            oversized.add(key)  # the bucket holds at least x and r: window (2) items
            entries = by_time.get(time)
            if entries is None:
                entries = by_time[time] = []
                heappush(times_heap, time)
            entries.append((key, x))
            entries.append((key, r))
            stats.received += 2
            stats.emitted += 2
            out_dests.append(exit_to)
            out_times.append(ts)
            out_fronts.append(front)
            out_traces.append(x_bytes + pack(clock, 0) + exit_tail)
            out_flags.append(0)
            out_payloads.append(reduced)
            fast += 1
        return fast
