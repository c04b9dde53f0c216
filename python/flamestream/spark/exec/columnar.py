"""Declared counts of text, run in Arrow: a first stage that splits and counts text words.

A stage runner applies steps item by item because their functions are opaque Python. Two
are not: ``str.split`` as a flat_map's function, and :func:`flamestream.count`'s mapper
(:class:`~flamestream.graph.mapreduce.CountMapper` without a key). A stateless stage that is
exactly ``[flat_map(str.split) ->] count's map`` (``plan.stages.text_count``) runs as
:class:`CountedText`, with Arrow kernels: ``ascii_split_whitespace``
(with the separators only ``str.split()`` knows, the file separators U+001C to U+001F, made
spaces first; empty pieces dropped, as ``str.split()`` makes none), then

* combined before the shuffle (``release="latest"``, reducer ``operator.add``): a
  ``group_by`` count; Python runs once per distinct word. One ``Mapped(word, count)`` per
  word in order of first sight, with the row and trace suffix of the word's last occurrence
  (the items are in meta order, so a word's latest is its last);
* not combined (``release="every"``): one row per word, its payload the pickled ``(word, 1)``
  pair built from the word's bytes and length; no Python per word.

Either way the rows are the general path's, byte for byte. Only batches the general path
would also take in order qualify: one target, no flags, empty traces (a front's rows),
strictly increasing ``(ts, front)``, and text payloads (ASCII text, to be split). Any other
batch goes the general way. ``tests/unit/test_columnar.py`` compares the two on random text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.graph.logical import LogicalGraph
from flamestream.graph.mapreduce import Mapped
from flamestream.model import LocalTime
from flamestream.spark.exec.combine import Items
from flamestream.spark.exec.items import ITEM_SCHEMA, PAIR_HEAD, TEXT_TAG
from flamestream.spark.plan.stages import Stage, TextCount, text_count

_L00 = LocalTime(0, 0)


class CountedText:
    """A stage that is ``[flat_map(str.split) ->] count(...)``'s map: in Arrow."""

    def __init__(self, shape: TextCount) -> None:
        self.entry = shape.entry  #: the stage's one entry step
        self.split = shape.split  #: whether the entry splits the text into words first
        self.dest = shape.dest  #: where the count's items go (the count's merge, keyed)
        self.combine = shape.combined  #: combined per word (latest), or a row per word

    @classmethod
    def of(
        cls,
        graph: LogicalGraph,
        stage: Stage,
        precombine: Mapping[str, Callable[[Any, Any], Any]],
    ) -> CountedText | None:
        """The stage's columnar form, or None if it is not exactly a combined count of text."""
        shape = text_count(graph, stage, precombine)
        return None if shape is None else cls(shape)

    def run(self, batch: pa.RecordBatch) -> Items | pa.RecordBatch | None:
        """:meth:`combined` or :meth:`rows`, as the stage is; None: the general path runs."""
        return self.combined(batch) if self.combine else self.rows(batch)

    def combined(self, batch: pa.RecordBatch) -> Items | None:
        """The combined counts leaving for :attr:`dest`, or None (then the general path runs)."""
        split = self._words(batch)
        if split is None:
            return None
        words, rows = split
        counted = (
            pa.table({"word": words, "at": np.arange(len(words))})
            .group_by("word", use_threads=False)
            .aggregate([("at", "min"), ("at", "max"), ("at", "count")])
            .sort_by("at_min")  # in order of first sight, as the general combine makes them
        )
        last = counted.column("at_max").to_numpy()
        out = Items()
        out.rows = rows[last].tolist()
        out.suffixes = _suffixes(_children(rows)[last] if self.split else None, len(last))
        out.payloads = list(
            map(Mapped, counted.column("word").to_pylist(), counted.column("at_count").to_pylist())
        )
        out.flags = [0] * len(out.rows)
        return out

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """Not combined: the rows leaving for :attr:`dest`, one per word; or None.

        The general path's rows, byte for byte: its map sends ``(word, 1)`` pairs, encoded
        as ``MAPPED_TAG`` and the pickle of the pair, keyed by the word's encoded key, with
        the trace suffixes of the flat_map's child and the map (see :func:`_pickled_pairs`).
        """
        split = self._words(batch)
        if split is None or not len(split[0]):
            return None
        words, rows = split
        data = words.cast(pa.binary())
        payload = _pickled_pairs(data)
        if payload is None:
            return None
        taken = pa.array(rows, pa.int64())
        n = len(words)
        columns = [
            pc.take(batch.column("ts"), taken),
            pc.take(batch.column("front"), taken),
            _suffix_bytes(rows, self.split),
            pa.repeat(pa.scalar(0, pa.int8()), n),
            pc.take(batch.column("source"), taken),
            pc.take(batch.column("position"), taken),
            pa.repeat(pa.scalar(self.dest, pa.string()), n),
            pc.binary_join_element_wise(_TEXT_KEY, data, _NOTHING),
            payload,
            pa.nulls(n, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ITEM_SCHEMA)

    def _words(self, batch: pa.RecordBatch) -> tuple[pa.Array, np.ndarray] | None:
        """The batch's words (its texts, without a split) and each one's row; or None."""
        text = self._text(batch)
        if text is None:
            return None
        return _words(text) if self.split else (text, np.arange(len(text)))

    def _text(self, batch: pa.RecordBatch) -> pa.Array | None:
        """The rows' text, if the batch is one the general path takes in order; else None."""
        n = batch.num_rows
        to, flags, trace = (batch.column(name) for name in ("to", "flags", "trace"))
        if pc.count_distinct(to).as_py() != 1 or to[0].as_py() != self.entry:
            return None
        if pc.max(flags).as_py() != 0 or pc.max(pc.binary_length(trace)).as_py() != 0:
            return None
        ts = batch.column("ts").to_numpy()
        front = batch.column("front").to_numpy()
        rising = (ts[1:] > ts[:-1]) | ((ts[1:] == ts[:-1]) & (front[1:] > front[:-1]))
        if n > 1 and not rising.all():
            return None
        payload = batch.column("payload")
        if payload.null_count or not pc.all(pc.starts_with(payload, TEXT_TAG)).as_py():
            return None
        return pc.utf8_slice_codeunits(payload.cast(pa.string()), 1)  # the tag is one byte


#: The separators ``str.split()`` knows in ASCII that ``ascii_split_whitespace`` does not.
_FILE_SEPARATORS = "[\x1c-\x1f]"


def _words(text: pa.Array) -> tuple[pa.Array, np.ndarray] | None:
    """Each line's words as ``str.split()`` makes them, and the row each word comes from.

    None for text that is not all ASCII: ``utf8_split_whitespace`` (pyarrow 26) leaves some
    runs of non-ASCII separators unsplit (NEL then an ideographic space, at a line's end).
    """
    if not pc.all(pc.string_is_ascii(text)).as_py():
        return None
    if pc.any(pc.match_substring_regex(text, _FILE_SEPARATORS)).as_py():
        text = pc.replace_substring_regex(text, _FILE_SEPARATORS, " ")  # a separator as well
    lists = pc.ascii_split_whitespace(text)
    pieces = pc.list_flatten(lists)
    # runs of separators count as one, but leading/trailing ones leave empty pieces
    kept = pc.greater(pc.binary_length(pieces), 0)
    rows = pc.list_parent_indices(lists).to_numpy()[kept.to_numpy(zero_copy_only=False)]
    return pieces.filter(kept), rows


#: The bytes around a word in ``MAPPED_TAG`` + ``pickle.dumps((word, 1), 5)`` (word < 256
#: bytes): protocol 5, a frame (its length follows: 8 bytes, little-endian), then
#: SHORT_BINUNICODE (its length: 1 byte), the word, MEMOIZE, BININT1 1, TUPLE2, MEMOIZE, STOP.
_PAIR_TAIL = b"\x94K\x01\x86\x94."
_PAIR_LENGTHS = np.dtype([("frame", "<u8"), ("opcode", "u1"), ("length", "u1")])
_TEXT_KEY, _NOTHING = pa.scalar(TEXT_TAG, pa.binary()), pa.scalar(b"", pa.binary())
#: An encoded trace suffix ``((0, child), (0, 0))``: 8 + 4 bytes per local time, big-endian.
_CHILD_SUFFIX = np.dtype([("zero", "S8"), ("child", ">u4"), ("map", "S12")])
#: The map's alone, ``((0, 0),)``.
_MAP_SUFFIX = np.dtype([("map", "S12")])


def _pickled_pairs(words: pa.Array) -> pa.Array | None:
    """``MAPPED_TAG + pickle.dumps((word, 1), 5)`` per word (binary); None if one is long.

    ``tests/unit/test_columnar.py`` checks the bytes against ``pickle``'s on random words.
    """
    lengths = pc.binary_length(words).to_numpy(zero_copy_only=False)
    if lengths.max() >= 256:  # pickled as BINUNICODE, a 4-byte length: the general path
        return None
    fixed = np.zeros(len(lengths), _PAIR_LENGTHS)
    fixed["frame"], fixed["opcode"], fixed["length"] = lengths + 8, 0x8C, lengths
    middle = _fixed_binary(fixed)
    head, tail = pa.scalar(PAIR_HEAD, pa.binary()), pa.scalar(_PAIR_TAIL, pa.binary())
    return pc.binary_join_element_wise(head, middle, words, tail, _NOTHING)


def _suffix_bytes(rows: np.ndarray, split: bool) -> pa.Array:
    """Each word's encoded trace: its row's is empty, then its suffix (see :func:`_suffixes`).

    ``rows``: each word's row (ascending), for the flat_map's child index; without a split
    only the map's ``(0, 0)``.
    """
    if not split:
        return _fixed_binary(np.zeros(len(rows), _MAP_SUFFIX))
    fixed = np.zeros(len(rows), _CHILD_SUFFIX)
    fixed["child"] = _children(rows)
    return _fixed_binary(fixed)


def _children(rows: np.ndarray) -> np.ndarray:
    """Each word's index among its row's words (``rows`` ascending, one per word)."""
    starts = np.flatnonzero(np.diff(rows, prepend=-1))  # each row's first word
    return np.arange(len(rows)) - np.repeat(starts, np.diff(np.append(starts, len(rows))))


def _fixed_binary(records: np.ndarray) -> pa.Array:
    """Each record's bytes as one binary value."""
    kind = pa.binary(records.dtype.itemsize)
    buffers = [None, pa.py_buffer(records.tobytes())]
    return pa.FixedSizeBinaryArray.from_buffers(kind, len(records), buffers).cast(pa.binary())


def _suffixes(children: np.ndarray | None, n: int) -> list[tuple[LocalTime, ...]]:
    """The trace suffixes the general path gives: flat_map's ``(0, child)``, map's ``(0, 0)``.

    Without a split (``children`` None) only the map's. Equal suffixes share one tuple, as the
    general path's do.
    """
    if children is None:
        return [(_L00,)] * n
    shared: dict[int, tuple[LocalTime, ...]] = {}
    out = []
    for child in children.tolist():
        suffix = shared.get(child)
        if suffix is None:
            suffix = shared[child] = (LocalTime(0, child), _L00)
        out.append(suffix)
    return out
