"""Declared counts of text, run in Arrow: a first stage that splits and counts text words.

A stage runner applies steps item by item because their functions are opaque Python. Two
are not: ``str.split`` as a flat_map's function, and :func:`flamestream.count`'s mapper
(:class:`~flamestream.graph.mapreduce.CountMapper` without a key). A stateless stage that is
exactly ``[flat_map(str.split) ->] count's map`` (the plan's ``declared-count`` path, see
:mod:`flamestream.spark.plan.paths`) runs as :class:`CountedText`, with Arrow kernels:
``ascii_split_whitespace`` (with the separators only ``str.split()`` knows, the file
separators U+001C to U+001F, made spaces first; empty pieces dropped, as ``str.split()``
makes none), then

* combined before the shuffle (``release="latest"``, reducer ``operator.add``): words
  numbered by ``dictionary_encode`` and counted, then one row per word in order of first
  sight, its payload the
  pickled ``(word, count)`` pair, with the row and trace suffix of the word's last
  occurrence (the items are in meta order, so a word's latest is its last); no Python per
  word;
* not combined (``release="every"``): one row per word, its payload the pickled ``(word, 1)``
  pair built from the word's bytes and length; no Python per word.

Either way the rows are the general path's, byte for byte. Only batches the general path
would also take in order qualify: one target, no flags, empty traces (a front's rows),
strictly increasing ``(ts, front)``, and text payloads (ASCII text, to be split). Any other
batch goes the general way. ``tests/unit/test_columnar.py`` compares the two on random text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.spark.exec.general.items import ITEM_SCHEMA, PAIR_HEAD, TEXT_TAG
from flamestream.spark.exec.shuffle.packed import group, packed_rows
from flamestream.spark.plan.paths import TextCount


class CountedText:
    """A stage that is ``[flat_map(str.split) ->] count(...)``'s map: in Arrow."""

    def __init__(self, shape: TextCount) -> None:
        self.entry = shape.entry  #: the stage's one entry step
        self.split = shape.split  #: whether the entry splits the text into words first
        self.dest = shape.dest  #: where the count's items go (the count's merge, keyed)
        self.combine = shape.combined  #: combined per word (latest), or a row per word

    def run(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The stage's rows for item rows; None: the general path runs.

        :meth:`_combined` or :meth:`_rows`, as the stage is, once the batch qualifies.
        """
        text = self._text(batch)
        return None if text is None else self._made(batch, text)

    def packed(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """:meth:`run`'s rows packed, as :func:`~.packed.pack` packs them; or None.

        None for a combining stage too (the plan packs none: its rows are distinct words
        already). See :meth:`_packed`.
        """
        text = None if self.combine else self._text(batch)
        return None if text is None else self._packed(batch, text)

    def of_front(
        self, rows: pa.RecordBatch, entry: str, text: pa.Array, packed: bool
    ) -> pa.RecordBatch | None:
        """What :meth:`run` (or :meth:`packed`) makes of a front's rows entering the graph.

        ``rows`` are a front's (meta columns, no trace, no flags) going to step ``entry``,
        ``text`` their payload column (string). The same rows as :meth:`run` makes of the
        item rows ``FrontStage`` would make of them, without making those: no payload is
        tagged only for the tag to be cut off again (a tenth of a read task's work). None:
        the general path runs.
        """
        if entry != self.entry or text.null_count or not _rising(rows):
            return None
        if packed:
            return None if self.combine else self._packed(rows, text)
        return self._made(rows, text)

    def _made(self, batch: pa.RecordBatch, text: pa.Array) -> pa.RecordBatch | None:
        """The rows for ``batch``, whose text is ``text``: combined, or one per word."""
        return self._combined(batch, text) if self.combine else self._rows(batch, text)

    def _combined(self, batch: pa.RecordBatch, text: pa.Array) -> pa.RecordBatch | None:
        """Combined: the rows leaving for :attr:`dest`, one per distinct word; or None.

        The general combine's rows, byte for byte: per word in order of first sight, the
        pickled ``(word, count)`` pair (see :func:`_pickled_pairs`) with the row and trace
        suffix of the word's last occurrence (the items are in meta order).
        """
        split = self._words(text)
        if split is None or not len(split.words):
            return None
        # numbered in order of first sight, as the general combine makes its rows (Arrow's
        # group_by took twice as long in a read task: its engine starts up per process)
        encoded = pc.dictionary_encode(split.words)
        numbers = encoded.indices.to_numpy()
        counts = np.bincount(numbers)
        last = np.zeros(len(counts), np.int64)
        np.maximum.at(last, numbers, np.arange(len(numbers)))
        data = encoded.dictionary.cast(pa.binary())
        payload = _pickled_pairs(data, counts)
        if payload is None:
            return None
        suffixes = self._suffixes(split, last)
        return self._item_rows(batch, split.rows[last], suffixes, data, payload)

    def _rows(self, batch: pa.RecordBatch, text: pa.Array) -> pa.RecordBatch | None:
        """Not combined: the rows leaving for :attr:`dest`, one per word; or None.

        The general path's rows, byte for byte: its map sends ``(word, 1)`` pairs, encoded
        as ``MAPPED_TAG`` and the pickle of the pair, keyed by the word's encoded key, with
        the trace suffixes of the flat_map's child and the map (see :func:`_pickled_pairs`).
        """
        split = self._words(text)
        if split is None or not len(split.words):
            return None
        data = split.words.cast(pa.binary())
        payload = _pickled_pairs(data, np.ones(len(data), np.int64))
        if payload is None:
            return None
        return self._item_rows(batch, split.rows, self._suffixes(split), data, payload)

    def _packed(self, batch: pa.RecordBatch, text: pa.Array) -> pa.RecordBatch | None:
        """:meth:`_rows` packed, as :func:`~.packed.pack` packs them; or None.

        Made packed, not packed once made: the words are grouped first (by front, source and
        word, which decide the other shared columns), so a payload and a key are made per
        distinct word, not per occurrence.
        """
        split = self._words(text)
        if split is None or not len(split.words):
            return None
        data = split.words.cast(pa.binary())
        firsts, order, starts, shared_of = _grouped(batch, split.rows, data)
        distinct = data.take(firsts)
        payload = _pickled_pairs(distinct, np.ones(len(distinct), np.int64))
        if payload is None:
            return None
        n = len(distinct)
        shared = {
            "front": shared_of("front"),
            "flags": pa.repeat(pa.scalar(0, pa.int8()), n),
            "source": shared_of("source"),
            "to": pa.repeat(pa.scalar(self.dest, pa.string()), n),
            "key": _text_keys(distinct),
            "payload": payload,
            "value": pa.nulls(n, pa.string()),
        }
        occurring = pa.array(split.rows[order], pa.int64())
        occurrences = {
            "ts": batch.column("ts").take(occurring),
            "trace": self._suffixes(split, order),
            "position": batch.column("position").take(occurring),
        }
        return packed_rows(shared, occurrences, starts)

    def _suffixes(self, split: Split, words: np.ndarray | None = None) -> pa.Array:
        """The encoded trace suffix of ``words`` (indexes into the split; None: all of them).

        A front row's trace is empty: the flat_map's ``(0, child)`` and the map's ``(0, 0)``,
        or only the map's without a split.
        """
        which = np.arange(len(split.words)) if words is None else words
        if not self.split:
            return _fixed_binary(np.zeros(len(which), _MAP_SUFFIX))
        fixed = np.zeros(len(which), _CHILD_SUFFIX)
        fixed["child"] = which - split.firsts[split.rows[which]]
        return _fixed_binary(fixed)

    def _item_rows(
        self,
        batch: pa.RecordBatch,
        rows: np.ndarray,
        traces: pa.Array,
        words: pa.Array,
        payload: pa.Array,
    ) -> pa.RecordBatch:
        """Item rows for :attr:`dest`, one per word.

        Each has its row's meta and determinant, its trace suffix (a front row's trace is
        empty), its key and its payload.
        """
        taken = pa.array(rows, pa.int64())
        n = len(words)
        columns = [
            pc.take(batch.column("ts"), taken),
            pc.take(batch.column("front"), taken),
            traces,
            pa.repeat(pa.scalar(0, pa.int8()), n),
            pc.take(batch.column("source"), taken),
            pc.take(batch.column("position"), taken),
            pa.repeat(pa.scalar(self.dest, pa.string()), n),
            _text_keys(words),
            payload,
            pa.nulls(n, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ITEM_SCHEMA)

    def _words(self, text: pa.Array) -> Split | None:
        """The words of ``text`` (the texts themselves, without a split); or None."""
        if not self.split:
            rows = np.arange(len(text))
            return Split(text, rows, np.arange(len(text) + 1))
        return _words(text)

    def _text(self, batch: pa.RecordBatch) -> pa.Array | None:
        """The rows' text, if the batch is one the general path takes in order; else None."""
        to, flags, trace = (batch.column(name) for name in ("to", "flags", "trace"))
        if pc.count_distinct(to).as_py() != 1 or to[0].as_py() != self.entry:
            return None
        if pc.max(flags).as_py() != 0 or pc.max(pc.binary_length(trace)).as_py() != 0:
            return None
        if not _rising(batch):
            return None
        payload = batch.column("payload")
        if payload.null_count or not pc.all(pc.starts_with(payload, TEXT_TAG)).as_py():
            return None
        return pc.utf8_slice_codeunits(payload.cast(pa.string()), 1)  # the tag is one byte


class Split(NamedTuple):
    """Words split from rows of text."""

    words: pa.Array  #: the words, row after row
    rows: np.ndarray  #: each word's row (ascending)
    #: each row's first word (an index into ``words``), and after them the number of words:
    #: a word's index among its row's words (its flat_map child) is its index minus its row's
    firsts: np.ndarray


def _rising(batch: pa.RecordBatch) -> bool:
    """Whether the rows' metas ``(ts, front)`` strictly increase (the general path's order)."""
    ts = batch.column("ts").to_numpy()
    front = batch.column("front").to_numpy()
    rising = (ts[1:] > ts[:-1]) | ((ts[1:] == ts[:-1]) & (front[1:] > front[:-1]))
    return bool(rising.all())


#: The separators ``str.split()`` knows in ASCII that ``ascii_split_whitespace`` does not.
_FILE_SEPARATORS = "[\x1c-\x1f]"


def _grouped(
    batch: pa.RecordBatch, rows: np.ndarray, data: pa.Array
) -> tuple[pa.Array, np.ndarray, np.ndarray, Callable[[str], pa.Array]]:
    """The words grouped by front, source and word (``packed.group``).

    Returns each group's first word, the order and starts as ``group`` gives them, and a
    function giving a shared line column (``front``, ``source``) per group. A read task's
    lines mostly have one front and one source: then they are not repeated and grouped per
    word (1.2 M of them for 100,000 lines), which adds nothing to the words' grouping.
    """
    lines = {name: batch.column(name) for name in ("front", "source")}
    if all(len(pc.unique(column)) == 1 for column in lines.values()):
        order, starts = group([data])
        return (
            pa.array(order[starts]),
            order,
            starts,
            lambda name: pa.repeat(lines[name][0], len(starts)),
        )
    at = pa.array(rows, pa.int64())
    per_word = {name: column.take(at) for name, column in lines.items()}
    order, starts = group([per_word["front"], per_word["source"], data])
    firsts = pa.array(order[starts])
    return firsts, order, starts, lambda name: per_word[name].take(firsts)


def _has_file_separators(text: pa.Array) -> bool:
    """Whether ASCII ``text`` holds a byte 0x1c-0x1f (a regex search took 4 times as long)."""
    if not len(text):
        return False
    _, offsets_buffer, data_buffer = text.buffers()
    wide = np.int64 if pa.types.is_large_string(text.type) else np.int32
    first, last = np.frombuffer(offsets_buffer, wide)[[text.offset, text.offset + len(text)]]
    data = np.frombuffer(data_buffer, np.uint8)[first:last]
    return bool((np.subtract(data, 0x1C, dtype=np.uint8) < 4).any())  # wraps below 0x1c


def _words(text: pa.Array) -> Split | None:
    """Each line's words as ``str.split()`` makes them, with the row each word comes from.

    None for text that is not all ASCII: ``utf8_split_whitespace`` (pyarrow 26) leaves some
    runs of non-ASCII separators unsplit (NEL then an ideographic space, at a line's end).
    """
    if not pc.all(pc.string_is_ascii(text)).as_py():
        return None
    if _has_file_separators(text):
        text = pc.replace_substring_regex(text, _FILE_SEPARATORS, " ")  # a separator as well
    lists = pc.ascii_split_whitespace(text)
    pieces = pc.list_flatten(lists)
    rows = pc.list_parent_indices(lists).to_numpy()
    starts = lists.offsets.to_numpy()
    firsts = starts - starts[0]
    # runs of separators count as one, but leading/trailing ones leave empty pieces: their
    # offsets repeat (read off the buffer: a length kernel and a filter were a tenth of it all)
    wide = np.dtype(np.int64 if pa.types.is_large_string(pieces.type) else np.int32)
    bounds = np.frombuffer(
        pieces.buffers()[1], wide, len(pieces) + 1, pieces.offset * wide.itemsize
    )
    kept = bounds[1:] != bounds[:-1]
    if kept.all():
        return Split(pieces, rows, firsts)
    before = np.concatenate(([0], np.cumsum(kept)))  # words kept before each piece
    return Split(pieces.filter(pa.array(kept)), rows[kept], before[firsts])


#: ``MAPPED_TAG + pickle.dumps((word, n), 5)`` for a word under 256 bytes: ``PAIR_HEAD``
#: (the tag, protocol 5, a frame opcode), the frame's length (8 bytes, little-endian),
#: SHORT_BINUNICODE and its 1-byte length, the word, MEMOIZE, then ``n`` as BININT1 (1 byte,
#: n < 256), BININT2 (2 bytes, n < 65536) or BININT (4 bytes), TUPLE2, MEMOIZE, STOP.
_PAIR_LENGTHS = np.dtype([("frame", "<u8"), ("opcode", "u1"), ("length", "u1")])
_INT_OPS = ((1, ord("K")), (2, ord("M")), (4, ord("J")))
_TEXT_KEY, _NOTHING = pa.scalar(TEXT_TAG, pa.binary()), pa.scalar(b"", pa.binary())
#: An encoded trace suffix ``((0, child), (0, 0))``: 8 + 4 bytes per local time, big-endian.
_CHILD_SUFFIX = np.dtype([("zero", "S8"), ("child", ">u4"), ("map", "S12")])
#: The map's alone, ``((0, 0),)``.
_MAP_SUFFIX = np.dtype([("map", "S12")])


def _text_keys(words: pa.Array) -> pa.Array:
    """Each word's encoded key (``encode_key`` of its text), from its UTF-8 bytes."""
    return pc.binary_join_element_wise(_TEXT_KEY, words, _NOTHING)


def _pickled_pairs(words: pa.Array, counts: np.ndarray) -> pa.Array | None:
    """``MAPPED_TAG + pickle.dumps((word, n), 5)`` per word and count (binary), or None.

    None if a word is 256 bytes or longer, or a count not in ``[1, 2**31)``: those pickle
    otherwise, and go the general way.

    ``tests/unit/test_columnar.py`` checks the bytes against ``pickle``'s on random words.
    """
    lengths = pc.binary_length(words).to_numpy(zero_copy_only=False)
    if lengths.max() >= 256 or counts.min() < 1 or counts.max() >= 2**31:
        return None
    widths = np.where(counts < 256, 1, np.where(counts < 65536, 2, 4))
    fixed = np.zeros(len(lengths), _PAIR_LENGTHS)
    fixed["frame"], fixed["opcode"], fixed["length"] = lengths + 7 + widths, 0x8C, lengths
    head = pa.scalar(PAIR_HEAD, pa.binary())
    return pc.binary_join_element_wise(
        head, _fixed_binary(fixed), words, _pair_tails(counts, widths), _NOTHING
    )


def _pair_tails(counts: np.ndarray, widths: np.ndarray) -> pa.Array:
    """What follows each word: MEMOIZE, the count's opcode and bytes, TUPLE2, MEMOIZE, STOP."""
    sizes = 5 + widths
    record = np.zeros((len(counts), 9), np.uint8)
    record[:, 0] = 0x94
    for width, opcode in _INT_OPS:
        record[widths == width, 1] = opcode
    record[:, 2:6] = counts.astype("<u4").view(np.uint8).reshape(-1, 4)
    positions = np.arange(9)
    ends = (2 + widths)[:, None]  # the tail's three bytes go right after the count
    for nth, byte in enumerate((0x86, 0x94, ord("."))):
        record[positions == ends + nth] = byte
    keep = positions < sizes[:, None]  # row by row, the record's first ``size`` bytes
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(record[keep])]
    return pa.BinaryArray.from_buffers(pa.binary(), len(counts), buffers)


def _fixed_binary(records: np.ndarray) -> pa.Array:
    """Each record's bytes as one binary value."""
    kind = pa.binary(records.dtype.itemsize)
    buffers = [None, pa.py_buffer(records.tobytes())]
    return pa.FixedSizeBinaryArray.from_buffers(kind, len(records), buffers).cast(pa.binary())
