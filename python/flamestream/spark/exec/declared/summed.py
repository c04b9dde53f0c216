"""map_reduce's cycle adding up ints (``count``, or ``operator.add``), run in Arrow.

:meth:`MapReduceCycle.run_in_order <flamestream.spark.exec.declared.fastpath.MapReduceCycle>`
folds a batch lying wholly in order and below the min-time one row at a time: decode the pair, fold,
make the leaving row. When the reduce adds up (``ReduceStep.sums``: ``operator.add``, no
``initial``) and every row is a ``Mapped(text key, int value)``, that fold is a cumulative sum
per key, and what it leaves is fixed by the rows alone:

* a row of rank ``k`` among its key's rows (in meta order) leaves with the key's sum so far,
  its trace ``entering + (0,0) + (c + 1 + 2k, 0) + exit tail``, where ``c`` is the bucket's
  clock before the batch (each row's tuple and its reduced item take two logical times);
* the key's bucket keeps its last reduced item and clock ``c + 2 * rows``, as the collection
  below the min-time leaves it (``GroupingState.settle_in_order``).

:class:`SummedCycle` computes that with numpy and Arrow: the pairs are read from their pickles'
bytes (a layout check on every row; any other payload sends the batch to the Python fold),
keys grouped with ``dictionary_encode``, sums with ``cumsum``. Python runs once per distinct
key (the bucket's tail, the settled state) and once per leaving row for its ``Reduced``
payload, unless the rows go to a tail: that gets the keys and sums as columns
(:class:`~.rendered.ReducedColumns`), and a ``Template`` tail renders them in Arrow. The
rows are those of ``run_in_order`` byte for byte, in the same order, and the state is the
same: ``tests/unit/test_fastpath.py`` compares them on random batches.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.graph.mapreduce import Reduced
from flamestream.model import GlobalTime, LocalTime, Meta
from flamestream.runtime.grouping import GroupingState
from flamestream.spark.exec.declared.fastpath import MapReduceCycle, _TraceCache
from flamestream.spark.exec.declared.rendered import ReducedColumns, item_rows
from flamestream.spark.exec.declared.summed_state import SummedBuckets
from flamestream.spark.exec.general.items import (
    LOCAL_BYTES,
    PAIR_HEAD,
    encode_trace,
    extended_traces,
    stable_order,
    time_starts,
)
from flamestream.spark.exec.general.stateless import Exits, Handed

#: ``MAPPED_TAG`` + ``pickle.dumps((text, int), 5)`` with text < 256 bytes: ``PAIR_HEAD``
#: (the tag, protocol 5, a frame opcode), the frame's 8-byte length, SHORT_BINUNICODE, its
#: 1-byte length, the text, MEMOIZE, an int (BININT1, BININT2 or BININT: 1, 2 or 4 bytes),
#: TUPLE2, MEMOIZE, STOP.
_TEXT_OP, _MEMOIZE, _TAIL = 0x8C, 0x94, b"\x86\x94."
#: Bytes of a pair besides its text and its int.
_PAIR_BYTES = len(PAIR_HEAD) + 8 + 2 + 1 + 1 + len(_TAIL)
#: The int opcode for each width.
_INT_OPS = {1: ord("K"), 2: ord("M"), 4: ord("J")}
#: Sums stay exact in int64 while bases (earlier sums) and per-batch sums stay below these.
_BASE_LIMIT, _ROWS_LIMIT = 2**62, 2**30

_L00 = LocalTime(0, 0)


class SummedCycle:
    """A summing map_reduce cycle's in-order batches, in Arrow (module docstring)."""

    def __init__(self, cycle: MapReduceCycle) -> None:
        self.cycle = cycle
        self._parsed = _ParsedDictionary()

    def run(
        self,
        table: pa.Table,
        state: GroupingState,
        min_time: GlobalTime,
        exits: Exits,
        latest: bool,
    ) -> tuple[pa.RecordBatch, Handed | None] | None:
        """The leaving rows (and handed payloads) of ``table`` (in meta order); or None.

        As ``run_in_order`` followed by ``Leaving.batch`` (``latest``: each key's last row,
        keys in order of first sight), for a caller that collects garbage below ``min_time``
        right after. None, with the state untouched, when the batch does not qualify:

        1. The batch is plain: no flags, all bound for the merge, below the min-time, and the
           state indexes no item (so none of the batch's times may invalidate).
        2. Every payload is a pickled ``(text, int)`` pair, read without unpickling.
        3. Keys are grouped; each key's first row comes after its bucket's last item, whose
           value (if reduced) is an int.
        4. Sums and clocks per row; rows of one key and one global time stay in order.
        5. The leaving rows, built as ``Leaving.batch`` builds them.
        6. The state settles, key by key.
        """
        rows = table.num_rows
        # 1. plain
        if not rows or rows >= _ROWS_LIMIT or not self._plain(table, state, min_time):
            return None
        # 2. pairs (a dictionary's read once per distinct payload: unpacked rows, .packed;
        # and once for the runs of a batch, which share it)
        payloads = _whole(table.column("payload"))
        coded = pa.types.is_dictionary(payloads.type)
        pairs = self._parsed(payloads.dictionary) if coded else _pairs(payloads)
        if pairs is None:
            return None
        words, values = pairs
        # 3. keys
        if coded:
            indices = payloads.indices.to_numpy()
            numbers = self._parsed.numbers()
            groups, values = _Groups.of_coded(numbers, indices), values[indices]
        else:
            groups = _Groups.of_words(words)
        metas = _Metas(table)
        block = SummedBuckets.of(state.columns)
        heads = None if block is None else _Heads.of(state, block, groups, metas)
        if block is None or heads is None:
            return None
        bases, clocks = heads.bases, heads.clocks
        # 4. sums and clocks
        totals = groups.scatter(groups.cumulative(values) + np.repeat(bases, groups.counts))
        row_clocks = groups.scatter(np.repeat(clocks + 1, groups.counts) + 2 * groups.ranks())
        if not self._same_times_in_order(groups, metas, row_clocks):
            return None
        # 5. leaving rows
        leaving = groups.last_rows if latest else np.arange(rows)
        out = self._leaving(table, leaving, metas, groups, (totals, row_clocks), exits)
        # 6. state
        finals = (totals[groups.last_rows], clocks + 2 * groups.counts)
        self._settle(state, (block, heads), groups, metas, finals)
        return out

    def _plain(self, table: pa.Table, state: GroupingState, min_time: GlobalTime) -> bool:
        """Step 1 of :meth:`run`: nothing in the batch needs the general path's care."""
        if state.indexed_times() or table.column("payload").null_count:
            return False
        if pc.any(pc.not_equal(table.column("flags"), 0)).as_py():
            return False
        if pc.any(pc.not_equal(table.column("to"), self.cycle.merge)).as_py():
            return False
        ts, fronts = table.column("ts"), table.column("front")
        below = pc.or_(
            pc.less(ts, min_time.ts),
            pc.and_(pc.equal(ts, min_time.ts), pc.less(fronts, min_time.front)),
        )
        return bool(pc.all(below).as_py())

    def _same_times_in_order(self, groups: _Groups, metas: _Metas, row_clocks: np.ndarray) -> bool:
        """Whether each row of a key follows the key's row before it at the same time.

        The Python fold checks that the row's trace at the grouping comes after the reduced
        item of the row before (``entering + (0,0) + (clock,0) + back tail``). Traces of equal
        length in meta order do unless equal; other pairs are compared as the fold does.
        """
        order, ts, fronts, traces = groups.order, metas.ts, metas.fronts, metas.traces
        before, after = order[:-1], order[1:]
        same = (
            (groups.codes[before] == groups.codes[after])
            & (ts[before] == ts[after])
            & (fronts[before] == fronts[after])
        )
        if not same.any():
            return True
        before, after = before[same], after[same]
        lengths = traces.lengths()
        if traces.equal_any(before, after):
            return False
        uneven = lengths[before] != lengths[after]
        back = self.cycle.back_bytes
        merge = bytes(LOCAL_BYTES)
        for row, next_row in zip(before[uneven].tolist(), after[uneven].tolist(), strict=True):
            clock = encode_trace((LocalTime(int(row_clocks[row]), 0),))
            reduced = traces.value(row) + merge + clock + back
            if not traces.value(next_row) + merge > reduced:
                return False
        return True

    def _leaving(
        self,
        table: pa.Table,
        rows: np.ndarray,
        metas: _Metas,
        groups: _Groups,
        sums: tuple[np.ndarray, np.ndarray],
        exits: Exits,
    ) -> tuple[pa.RecordBatch, Handed | None]:
        """``rows``' leaving rows and handed payloads, as ``Leaving.batch`` makes them.

        ``sums``: per row, the key's sum and the row's clock. A row's determinant is that of
        the first row of its global time.
        """
        totals, row_clocks = sums
        # every row leaves (release every, or each key once): ``rows`` is then 0..n-1 in
        # order (keys come in order of first sight), so the columns are used as they are
        every = len(rows) == table.num_rows
        ts, fronts = (table.column(c) if every else table.column(c).take(rows) for c in META)
        to = self.cycle.exit_to
        handed = to in exits.handed and to not in exits.keys  # a tail's entry: hand columns
        suffix = exits.suffixes.get(to, b"") if handed else b""  # the tail's, appended now
        if handed and to in exits.suffixes and not exits.determinants:
            # rendered in Arrow for a sink that writes no determinant (Exits.determinants)
            sources = pa.chunked_array([pa.nulls(len(rows), pa.string())])
            positions = pa.chunked_array([pa.nulls(len(rows), pa.int64())])
        else:
            firsts = _first_of_time(metas.ts, metas.fronts)[rows]
            sources = table.column("source").take(firsts)
            positions = table.column("position").take(firsts)
        traces = self._leaving_traces(
            metas.traces, None if every else rows, row_clocks[rows], suffix
        )
        zeros = pa.array(np.zeros(len(rows), np.int8))
        meta = [_whole(ts), _whole(fronts), traces, zeros]
        # sources may be dictionary-encoded (``packed.unpack``): item rows make them text
        meta += [_whole(sources), _whole(positions)]
        if handed:
            sums = pa.array(totals[rows])
            keys = ReducedColumns.coded(groups.dictionary, groups.codes[rows], sums, suffix)
            return item_rows(meta, to), keys
        keys_of = groups.keys
        payloads = list(
            map(Reduced, [keys_of[c] for c in groups.codes[rows].tolist()], totals[rows].tolist())
        )

        def where(nth: int) -> tuple[GlobalTime, Any]:
            time = GlobalTime(ts[nth].as_py(), fronts[nth].as_py())
            return time, (sources[nth].as_py(), positions[nth].as_py())

        out = exits.builder()
        out.extend(to, payloads, [0] * len(rows), where)
        return out.batch(*meta), out.objects

    def _leaving_traces(
        self, traces: _Traces, rows: np.ndarray | None, clocks: np.ndarray, suffix: bytes
    ) -> pa.Array:
        """Each entering trace, the merge's ``(0,0)``, ``(clock, 0)``, the exit tail, ``suffix``.

        ``rows``: whose traces (None: every row's). ``suffix``: what the tail taking the rows
        appends (one copy of the traces, not two).
        """
        return _through_the_merge(traces, rows, clocks, self.cycle.exit_tail + suffix)

    def _settle(
        self,
        state: GroupingState,
        before: tuple[SummedBuckets, _Heads],
        groups: _Groups,
        metas: _Metas,
        finals: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """Each key's bucket as ``run_in_order`` leaves it: its last reduced item alone.

        That item is ``Reduced(key, total)`` at the key's last row's global time, its trace
        the row's entering trace, the merge's ``(0,0)``, ``(clock - 1, 0)`` and the way back.
        The keys' buckets go to the state's column block, whatever held them before.
        """
        block, heads = before
        totals, clocks = finals
        lasts = groups.last_rows
        traces = _through_the_merge(metas.traces, lasts, clocks - 1, self.cycle.back_bytes)
        times = (metas.ts[lasts], metas.fronts[lasts])
        settled = block.with_batch(heads.rows, groups.dictionary, totals, clocks, times, traces)
        appended = 2 * len(groups.codes)
        collected = int(heads.held.sum()) + appended - len(clocks)
        state.settle_columns(settled, heads.moved, appended, collected)


class _Heads:
    """Per key of a batch, what its bucket holds before it: the sum so far and the clock.

    ``rows``: the key's row in the column block (-1 if not there); ``held``: its bucket's item
    count; ``moved``: the keys whose buckets are objects (the batch settles them as columns).
    """

    def __init__(self, keys: int) -> None:
        self.bases = np.zeros(keys, np.int64)
        self.clocks = np.zeros(keys, np.int64)
        self.held = np.zeros(keys, np.int64)
        self.rows = np.full(keys, -1, np.int64)
        self.moved: list[Any] = []

    @classmethod
    def of(
        cls, state: GroupingState, block: SummedBuckets, groups: _Groups, metas: _Metas
    ) -> _Heads | None:
        """The heads of ``groups``' keys; None if one cannot go on from its bucket.

        That is, if a key's first row is not after its bucket's last item, or that item's
        value is not an int that sums safely.
        """
        heads = cls(len(groups.counts))
        if len(block) and not heads._from_block(block, groups, metas):
            return None
        if state.objects_held() and not heads._from_objects(state, groups, metas):
            return None
        return heads

    def _from_block(self, block: SummedBuckets, groups: _Groups, metas: _Metas) -> bool:
        """The keys the column block holds: compared by global time, by trace if equal."""
        rows = block.rows_of(groups.dictionary)
        held = np.flatnonzero(rows >= 0)
        at, firsts = rows[held], groups.first_rows[held]
        ts, fronts = metas.ts[firsts], metas.fronts[firsts]
        same = (block.ts[at] == ts) & (block.fronts[at] == fronts)
        after = (block.ts[at] < ts) | ((block.ts[at] == ts) & (block.fronts[at] < fronts))
        if not (after | same).all():
            return False
        for nth in np.flatnonzero(same).tolist():  # one global time: the traces decide
            previous = block.meta(int(at[nth]))
            ((time, trace),) = metas.at(firsts[nth : nth + 1])
            if not previous < Meta(time, metas.decoded(trace)):
                return False
        bases = block.totals[at]
        if len(bases) and not (np.abs(bases) < _BASE_LIMIT).all():
            return False
        self.rows, self.bases[held], self.clocks[held] = rows, bases, block.clocks[at]
        self.held[held] = 1
        return True

    def _from_objects(self, state: GroupingState, groups: _Groups, metas: _Metas) -> bool:
        """The keys the state holds as objects, one by one as ``run_in_order`` checks them."""
        unheld = np.flatnonzero(self.rows < 0)
        keys = groups.keys
        for nth, (time, trace) in zip(
            unheld.tolist(), metas.at(groups.first_rows[unheld]), strict=True
        ):
            found = state.object_tail(keys[nth])
            if found is None:
                continue
            previous, clock, count = found
            if previous is not None:
                if not previous.meta < Meta(time, metas.decoded(trace)):
                    return False
                if isinstance(previous.payload, Reduced):
                    base = previous.payload.value
                    if type(base) is not int or not -_BASE_LIMIT < base < _BASE_LIMIT:
                        return False
                    self.bases[nth] = base
            self.clocks[nth], self.held[nth] = clock, count
            self.moved.append(keys[nth])
        return True


class _Metas:
    """The batch's global times and entering traces (rows in meta order)."""

    def __init__(self, table: pa.Table) -> None:
        self.ts: np.ndarray = table.column("ts").to_numpy()
        self.fronts: np.ndarray = table.column("front").to_numpy()
        self.traces = _Traces(table.column("trace"))
        #: entering trace (encoded) -> the trace at the grouping
        self.decoded = _TraceCache()

    def at(self, rows: np.ndarray) -> list[tuple[GlobalTime, bytes]]:
        """The global time and encoded entering trace of each of ``rows``."""
        times = map(GlobalTime, self.ts[rows].tolist(), self.fronts[rows].tolist())
        return list(zip(times, self.traces.take(rows).to_pylist(), strict=True))


class _Traces:
    """A batch's entering traces, by row: plain, or dictionary-encoded (``sorted_by_meta``).

    A keyed task's rows hold a handful of distinct traces; coded, a trace's bytes are copied
    once, into the trace a row leaves with (:meth:`extended`), not first into a sorted column.
    """

    def __init__(self, column: pa.ChunkedArray) -> None:
        if pa.types.is_dictionary(column.type) and column.num_chunks > 1:
            column = column.unify_dictionaries()
        whole = _whole(column)
        #: the distinct traces (coded) or every row's (plain)
        self.values: pa.Array = whole.dictionary if isinstance(whole, pa.DictionaryArray) else whole
        #: each row's index in ``values``; None: plain, row ``i`` is ``values[i]``
        self.codes: np.ndarray | None = None
        if isinstance(whole, pa.DictionaryArray):
            self.codes = whole.indices.to_numpy().astype(np.int64)

    def take(self, rows: np.ndarray) -> pa.Array:
        """The traces of ``rows``, as a plain binary array."""
        return self.values.take(pa.array(rows if self.codes is None else self.codes[rows]))

    def equal_any(self, rows: np.ndarray, others: np.ndarray) -> bool:
        """Whether the trace of a row of ``rows`` equals that of its row in ``others``."""
        if self.codes is not None and self._distinct:  # equal values, equal codes
            return bool((self.codes[rows] == self.codes[others]).any())
        return bool(pc.any(pc.equal(self.take(rows), self.take(others))).as_py())

    @cached_property
    def _distinct(self) -> bool:
        """Whether no two ``values`` are equal (a ``dictionary_encode``'s dictionary)."""
        return bool(pc.count_distinct(self.values).as_py() == len(self.values))

    def value(self, row: int) -> bytes:
        """Row ``row``'s trace."""
        found: bytes = self.values[row if self.codes is None else int(self.codes[row])].as_py()
        return found

    def lengths(self) -> np.ndarray:
        """Each row's trace length in bytes."""
        lengths: np.ndarray = pc.binary_length(self.values).to_numpy()
        return lengths if self.codes is None else lengths[self.codes]

    def index(self, rows: np.ndarray | None) -> np.ndarray | None:
        """Where in ``values`` the traces of ``rows`` (None: all) are; None: all, in order."""
        if self.codes is None:
            return rows
        return self.codes if rows is None else self.codes[rows]


def _merged_traces(
    values: pa.Array, index: np.ndarray | None, clocks: np.ndarray, tail: bytes
) -> pa.Array | None:
    """``values[index]`` (None: ``values``) through the merge (``_through_the_merge``).

    Written in one pass, each trace copied as one opaque (void) value, as
    ``extended_traces`` does; None unless the traces are all as long.
    """
    offsets = np.frombuffer(values.buffers()[1], np.int32, len(values) + 1, values.offset * 4)
    lengths = np.diff(offsets)
    if not len(values) or values.null_count or not lengths[0] or not tail:
        return None
    if (lengths != lengths[0]).any():
        return None
    length, rows = int(lengths[0]), len(clocks)
    data = np.frombuffer(values.buffers()[2], np.uint8, len(values) * length, int(offsets[0]))
    # the merge's (0,0), then (clock, 0): a big-endian logical time and a zero child, ``tail``
    rest = bytes(LOCAL_BYTES - 8) + tail
    fields = [("trace", f"V{length}"), ("merge", f"V{LOCAL_BYTES}"), ("clock", ">u8")]
    layout = np.dtype([*fields, ("rest", f"V{len(rest)}")])
    out = np.empty(rows, layout)
    traces = data.view(f"V{length}")
    out["trace"] = traces if index is None else traces[index]
    out["merge"] = np.void(bytes(LOCAL_BYTES))
    out["clock"] = clocks
    out["rest"] = np.void(rest)
    bounds = np.arange(0, (rows + 1) * layout.itemsize, layout.itemsize, dtype=np.int32)
    buffers = [None, pa.py_buffer(bounds), pa.py_buffer(out)]
    return pa.BinaryArray.from_buffers(pa.binary(), rows, buffers)


class _Groups:
    """A batch's rows grouped by key: keys in order of first sight, rows in meta order."""

    def __init__(self, dictionary: pa.Array, codes: np.ndarray) -> None:
        #: the keys, in order of first sight (as Python values: ``keys``)
        self.dictionary: pa.Array = dictionary
        #: each row's key, as its index in ``dictionary``
        self.codes: np.ndarray = codes.astype(np.int64)
        #: the rows, key by key (each key's in meta order)
        self.order: np.ndarray = stable_order(self.codes, len(dictionary))
        self.counts: np.ndarray = np.bincount(self.codes, minlength=len(dictionary))
        self.ends: np.ndarray = np.cumsum(self.counts)
        self.starts: np.ndarray = self.ends - self.counts
        self.first_rows: np.ndarray = self.order[self.starts]
        self.last_rows: np.ndarray = self.order[self.ends - 1]

    @cached_property
    def keys(self) -> list[Any]:
        """The keys as Python values (made only if a Python step needs them)."""
        keys: list[Any] = self.dictionary.to_pylist()
        return keys

    @classmethod
    def of_words(cls, words: pa.Array) -> _Groups:
        """The rows grouped by their ``words``."""
        encoded = pc.dictionary_encode(words)
        return cls(encoded.dictionary, encoded.indices.to_numpy())

    @classmethod
    def of_coded(cls, encoded: pa.DictionaryArray, indices: np.ndarray) -> _Groups:
        """The rows grouped by ``words[indices]`` (distinct indices may share a word).

        ``encoded``: the words' ``dictionary_encode``.
        """
        rows = encoded.indices.to_numpy()[indices]  # a word's number per row ...
        seen = pc.dictionary_encode(pa.array(rows))  # ... renumbered in order of first sight
        return cls(encoded.dictionary.take(seen.dictionary), seen.indices.to_numpy())

    def ranks(self) -> np.ndarray:
        """Each row's rank among its key's rows, key by key (as ``order``)."""
        ranks: np.ndarray = np.arange(len(self.order)) - np.repeat(self.starts, self.counts)
        return ranks

    def cumulative(self, values: np.ndarray) -> np.ndarray:
        """Each row's sum of its key's values up to it, key by key (as ``order``)."""
        sums = np.cumsum(values[self.order])
        before = np.concatenate(([0], sums))[self.starts]
        within: np.ndarray = sums - np.repeat(before, self.counts)
        return within

    def scatter(self, by_key: np.ndarray) -> np.ndarray:
        """Values given key by key (as ``order``), by row."""
        out = np.empty_like(by_key)
        out[self.order] = by_key
        return out


class _ParsedDictionary:
    """The pairs of the last dictionary of payloads given, and its words numbered.

    A keyed task's runs (``KeyedRunner._runs``) are slices of one batch, whose payloads share
    one dictionary (the packed rows'): it is read once, not once per run. The dictionary is
    held while it is the last one, so its buffers, by which it is recognized, stay its own.
    """

    def __init__(self) -> None:
        self._last: tuple[Any, pa.Array, tuple[pa.Array, np.ndarray] | None] | None = None
        self._numbers: pa.DictionaryArray | None = None

    def __call__(self, dictionary: pa.Array) -> tuple[pa.Array, np.ndarray] | None:
        """``_pairs(dictionary)``, read again only for another dictionary."""
        buffers = tuple(
            (b.address, b.size) if b is not None else None for b in dictionary.buffers()
        )
        key = (buffers, dictionary.offset, len(dictionary))
        if self._last is None or self._last[0] != key:
            self._last, self._numbers = (key, dictionary, _pairs(dictionary)), None
        return self._last[2]

    def numbers(self) -> pa.DictionaryArray:
        """The last dictionary's words, ``dictionary_encode``d (made once)."""
        assert self._last is not None and self._last[2] is not None  # noqa: S101
        if self._numbers is None:
            self._numbers = pc.dictionary_encode(self._last[2][0])
        return self._numbers

    def __getstate__(self) -> dict[str, Any]:
        return {"_last": None, "_numbers": None}  # what travels is the runner, not a batch


def _through_the_merge(
    traces: _Traces, rows: np.ndarray | None, clocks: np.ndarray, tail: bytes
) -> pa.Array:
    """Each entering trace, the merge's ``(0,0)``, ``(clock, 0)`` and ``tail`` (encoded).

    ``rows``: whose entering traces (None: every row's). The traces of the rows a summing
    cycle makes: a leaving row's (``tail``: the way out, and what the tail taking it
    appends) and a settled item's (the way back).
    """
    index = traces.index(rows)
    made = _merged_traces(traces.values, index, clocks, tail)
    if made is not None:
        return made
    # traces of several lengths: each joined with its record
    record = np.zeros((len(clocks), 2 * LOCAL_BYTES + len(tail)), np.uint8)
    record[:, LOCAL_BYTES : LOCAL_BYTES + 8] = clocks.astype(">u8").view(np.uint8).reshape(-1, 8)
    record[:, 2 * LOCAL_BYTES :] = np.frombuffer(tail, np.uint8)
    entering = traces.values if index is None else traces.values.take(pa.array(index))
    return extended_traces(entering, record)


def _pairs(payloads: pa.Array) -> tuple[pa.Array, np.ndarray] | None:
    """The text keys and int values of pickled ``(text, int)`` pairs; None if one is not.

    Every byte of the layout is checked (tag, protocol, frame length, opcodes, lengths), so
    what is read is what ``pickle.loads`` would return; the text must be valid UTF-8.
    """
    if payloads.type != pa.binary():
        return None
    offsets = np.frombuffer(payloads.buffers()[1], np.int32, len(payloads) + 1, payloads.offset * 4)
    data = np.frombuffer(payloads.buffers()[2], np.uint8)
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    if lengths.min() < _PAIR_BYTES + 1:
        return None
    texts = data[starts + 13].astype(np.int64)
    widths = lengths - _PAIR_BYTES - texts
    if not np.isin(widths, list(_INT_OPS)).all():
        return None
    if not _layout_holds(data, starts, lengths, texts, widths):
        return None
    at = starts + len(PAIR_HEAD) + 12 + texts  # the int's first byte
    values = _ints(data, at, widths)
    words = _gathered(data, starts + len(PAIR_HEAD) + 10, texts)
    try:
        return words.cast(pa.string()), values
    except pa.ArrowInvalid:  # not UTF-8: pickle would not make such a str
        return None


def _layout_holds(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, texts: np.ndarray, widths: np.ndarray
) -> bool:
    """Whether every pair has the layout's fixed bytes where they belong (see ``PAIR_HEAD``)."""
    for offset, byte in enumerate(PAIR_HEAD):
        if not (data[starts + offset] == byte).all():
            return False
    frame = np.zeros(len(starts), np.int64)
    for nth in range(8):
        frame |= data[starts + len(PAIR_HEAD) + nth].astype(np.int64) << (8 * nth)
    if not (frame == lengths - len(PAIR_HEAD) - 8).all():
        return False
    text_op = starts + len(PAIR_HEAD) + 8
    if not (data[text_op] == _TEXT_OP).all():
        return False
    memoize = text_op + 2 + texts
    if not (data[memoize] == _MEMOIZE).all():
        return False
    ops = np.select([widths == w for w in _INT_OPS], list(_INT_OPS.values()))
    if not (data[memoize + 1] == ops).all():
        return False
    ends = starts + lengths
    return all((data[ends - len(_TAIL) + nth] == byte).all() for nth, byte in enumerate(_TAIL))


def _ints(data: np.ndarray, at: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """The little-endian ints at ``at``: unsigned of 1 or 2 bytes, signed of 4."""
    last = len(data) - 1
    byte = [data[np.minimum(at + nth, last)].astype(np.int64) for nth in range(4)]
    two = byte[0] | (byte[1] << 8)
    four = (two | (byte[2] << 16) | (byte[3] << 24)).astype(np.uint32).view(np.int32)
    ints: np.ndarray = np.where(
        widths == 1, byte[0], np.where(widths == 2, two, four.astype(np.int64))
    )
    return ints


def _gathered(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The byte ranges ``[start, start + length)`` of ``data`` as one binary array."""
    offsets = np.zeros(len(starts) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    buffers = [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data[index].tobytes())]
    return pa.BinaryArray.from_buffers(pa.binary(), len(starts), buffers)


def _whole(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array; a single chunk as it is (``combine_chunks`` copies it)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _first_of_time(ts: np.ndarray, fronts: np.ndarray) -> np.ndarray:
    """Per row, the first row of its global time (rows in meta order)."""
    return np.maximum.accumulate(np.where(time_starts(ts, fronts), np.arange(len(ts)), 0))


#: The columns of a row's global time.
META = ("ts", "front")
