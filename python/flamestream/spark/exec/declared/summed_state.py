"""What a summing cycle keeps of its keys: settled buckets as columns (``SummedBuckets``).

After an in-order batch below the min-time, :class:`~.summed.SummedCycle` leaves each key's
bucket holding one item, ``Reduced(key, sum)``, and a clock (see
``GroupingState.settle_in_order``). Kept as objects, those buckets were most of a
``release="latest"`` write task's Python: a ``DataItem``, ``Meta``, ``GlobalTime`` and trace
tuple made per key at every batch, then walked and pickled by the snapshot. Kept as
columns, a batch reads its keys' sums and clocks with one lookup, writes them back with one
``take``, and the snapshot pickles seven buffers.

The block is the state's (a :class:`~flamestream.runtime.grouping.ColumnBuckets`): every
other reader of the state gets a key's bucket as the objects would have been, made from its
row on demand, byte for byte the same item, meta and clock.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.graph.mapreduce import Reduced
from flamestream.model import DataItem, GlobalTime, Meta
from flamestream.runtime.grouping import Bucket, ColumnBuckets
from flamestream.spark.exec.general.items import decode_trace


class SummedBuckets(ColumnBuckets):
    """Settled buckets of text keys, one row per key.

    A row holds the key's one item, ``Reduced(key, total)`` at ``(ts, front)`` with the
    encoded trace ``trace``, and its bucket's ``clock``.
    """

    def __init__(
        self,
        keys: pa.Array,
        totals: np.ndarray,
        clocks: np.ndarray,
        times: tuple[np.ndarray, np.ndarray],
        traces: pa.Array,
    ) -> None:
        self.keys = keys
        self.totals = totals
        self.clocks = clocks
        self.ts, self.fronts = times
        self.traces = traces
        #: rows whose key was taken out (``pop``): they hold nothing
        self._gone = np.zeros(len(keys), bool)
        #: key -> row, made when a single key is first looked up
        self._rows: dict[Hashable, int] | None = None

    @classmethod
    def empty(cls) -> SummedBuckets:
        """A block holding no key."""
        ints = np.zeros(0, np.int64)
        return cls(pa.array([], pa.string()), ints, ints, (ints, ints), pa.array([], pa.binary()))

    @classmethod
    def of(cls, columns: ColumnBuckets | None) -> SummedBuckets | None:
        """The state's block without its taken rows (a new block); None if not a summed one."""
        if columns is None:
            return cls.empty()
        if not isinstance(columns, SummedBuckets):
            return None
        return columns.compacted()

    def compacted(self) -> SummedBuckets:
        """The block without the rows whose keys were taken out (itself if there are none)."""
        if not self._gone.any():
            return self
        kept = np.flatnonzero(~self._gone)
        rows = pa.array(kept)
        return SummedBuckets(
            self.keys.take(rows),
            self.totals[kept],
            self.clocks[kept],
            (self.ts[kept], self.fronts[kept]),
            self.traces.take(rows),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # the columns only: taken rows dropped, the lookup dict made again when needed
        block = self.compacted()
        times = (block.ts, block.fronts)
        return SummedBuckets, (block.keys, block.totals, block.clocks, times, block.traces)

    def __len__(self) -> int:
        return len(self.keys) - int(self._gone.sum())

    def rows_of(self, keys: pa.Array) -> np.ndarray:
        """Each of ``keys``' row in the block, -1 for a key it does not hold."""
        found = pc.index_in(keys, value_set=self.keys).fill_null(-1)
        rows: np.ndarray = found.to_numpy().astype(np.int64)
        if self._gone.any():
            rows[(rows >= 0) & self._gone[np.maximum(rows, 0)]] = -1
        return rows

    def pop(self, key: Hashable) -> Bucket | None:
        """``key``'s bucket, its row marked taken; None if the block does not hold it."""
        if self._rows is None:
            self._rows = {k: row for row, k in enumerate(self.keys.to_pylist())}
        row = self._rows.get(key)
        if row is None or self._gone[row]:
            return None
        self._gone[row] = True
        return self._bucket(row)

    def buckets(self) -> dict[Hashable, Bucket]:
        """Every key's bucket not taken out, in row order."""
        keys = self.keys.to_pylist()
        return {keys[row]: self._bucket(row) for row in np.flatnonzero(~self._gone).tolist()}

    def meta(self, row: int) -> Meta:
        """The meta of row ``row``'s item."""
        time = GlobalTime(int(self.ts[row]), int(self.fronts[row]))
        return Meta(time, decode_trace(self.traces[row].as_py()))

    def _bucket(self, row: int) -> Bucket:
        """Row ``row`` as the objects ``settle_in_order`` would have kept."""
        item = DataItem(Reduced(self.keys[row].as_py(), int(self.totals[row])), self.meta(row))
        return Bucket([item], int(self.clocks[row]))

    def with_batch(
        self,
        rows: np.ndarray,
        keys: pa.Array,
        totals: np.ndarray,
        clocks: np.ndarray,
        times: tuple[np.ndarray, np.ndarray],
        traces: pa.Array,
    ) -> SummedBuckets:
        """A new block: this one's keys and a batch's, settled as the batch left them.

        ``keys`` and the columns after it are the batch's, one per key; ``rows`` is each
        key's row here (``rows_of``), -1 for a key the block did not hold. A held key keeps
        its row; new keys go after the block's, in the batch's order. This block must hold
        no taken row (``compacted``).
        """
        held, new = np.flatnonzero(rows >= 0), np.flatnonzero(rows < 0)
        size = len(self.keys)
        # where each row of the new block is found in (this block's columns + the batch's)
        source = np.concatenate((np.arange(size), size + new))
        source[rows[held]] = size + held
        picks = pa.array(source)

        def merged(mine: np.ndarray, batch: np.ndarray) -> np.ndarray:
            both: np.ndarray = np.concatenate((mine, batch.astype(mine.dtype)))[source]
            return both

        ts, fronts = times
        return SummedBuckets(
            pa.concat_arrays([self.keys, keys.cast(self.keys.type)]).take(picks),
            merged(self.totals, totals),
            merged(self.clocks, clocks),
            (merged(self.ts, ts), merged(self.fronts, fronts)),
            pa.concat_arrays([self.traces, traces.cast(self.traces.type)]).take(picks),
        )
