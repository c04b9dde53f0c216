"""Data items as Arrow rows: how a graph's items travel between Spark stages.

An item row carries its meta and the replay determinant of the front record it descends from:

======================  ==========  ====================================================
column                  type        meaning
======================  ==========  ====================================================
``ts``, ``front``       long, int   the global time
``trace``               binary      the trace, 12 bytes per local time (see below)
``flags``               tinyint     bit 0: may invalidate, bit 1: tombstone
``source``, ``position``            the front record's determinant
``to``                  string      the step the item goes to next
``key``                 binary      the grouping key (encoded) when ``to`` leads to one
``payload``             binary      the payload, encoded (between stages, see below)
``value``               string      the payload rendered as text (rows going to a sink)
======================  ==========  ====================================================

Payloads are encoded with a one-byte tag: ``s`` + UTF-8 for text, ``b`` + the bytes for
bytes, ``m`` / ``r`` + a pickled ``(key, value)`` for map_reduce's mapped and reduced items,
``p`` + a pickle for anything else. Front rows become items in Spark SQL (tag and column
concatenated, no Python), and text, the common case, never goes through pickle. Mapped and
reduced items are what map_reduce's stages exchange, one per word of a word count: a pickled
pair is about 10x cheaper to write and read than a pickled frozen dataclass. Grouping keys
(the shuffle's ``key`` column) keep the text/bytes/pickle encoding (:func:`encode_key`), so
a key always lands in the partition that holds its state.

A local time ``(logical, child)`` is encoded as 8 + 4 big-endian unsigned bytes, so comparing
two encoded traces as bytes is comparing the traces as tuples (a proper prefix first): Arrow
and Spark can sort items by meta with ``(ts, front, trace)``.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.graph.mapreduce import Mapped, Reduced
from flamestream.model import LocalTime, Trace
from flamestream.model.keys import BYTES_TAG as BYTES_TAG  # the key encoding lives below
from flamestream.model.keys import PICKLE_PROTOCOL as PICKLE_PROTOCOL
from flamestream.model.keys import PICKLE_TAG as PICKLE_TAG
from flamestream.model.keys import TEXT_TAG as TEXT_TAG
from flamestream.model.keys import encode_key as encode_key

_LOCAL = struct.Struct(">QI")


#: Bytes per local time in an encoded trace.
LOCAL_BYTES = _LOCAL.size


#: The columns of an item row between stages.
ITEM_FIELDS = [
    pa.field("ts", pa.int64(), nullable=False),
    pa.field("front", pa.int32(), nullable=False),
    pa.field("trace", pa.binary(), nullable=False),
    pa.field("flags", pa.int8(), nullable=False),
    pa.field("source", pa.string()),
    pa.field("position", pa.int64()),
    pa.field("to", pa.string(), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("payload", pa.binary()),
    pa.field("value", pa.string()),
]


ITEM_SCHEMA = pa.schema(ITEM_FIELDS)


ITEM_DDL = (
    "ts long, front int, trace binary, flags tinyint, source string, position long, "
    "to string, key binary, payload binary, value string"
)


#: The columns of the rows a graph releases to its sinks (what ``apply`` returns): an item
#: row's meta and determinant, ``to`` named ``sink``, and the rendered ``value``.
RELEASED_COLUMNS = ("ts", "front", "trace", "flags", "source", "position", "sink", "value")

MAY_INVALIDATE = 1


TOMBSTONE = 2


def values_of(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A column's values as Python objects, a dictionary-encoded one without its slow path.

    Unpacked rows (``packed.unpack``) carry payloads and sources dictionary-encoded, and
    ``to_pylist`` on a dictionary array costs about a microsecond a value (30x a plain one):
    the dictionary's values are converted once and picked by index instead.

    >>> values_of(pa.array(["a", "b", "a"]).dictionary_encode())
    ['a', 'b', 'a']
    """
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return values_of(column.chunk(0))
        return [value for chunk in column.chunks for value in values_of(chunk)]
    if not isinstance(column, pa.DictionaryArray):
        values: list[Any] = column.to_pylist()
        return values
    dictionary = column.dictionary.to_pylist()
    if column.null_count:
        return [None if i is None else dictionary[i] for i in column.indices.to_pylist()]
    return list(map(dictionary.__getitem__, column.indices.to_numpy().tolist()))


def encode_trace(trace: Trace) -> bytes:
    """The bytes of ``trace``, ordered as the trace is.

    >>> encode_trace((LocalTime(0, 1),)) < encode_trace((LocalTime(0, 1), LocalTime(0, 0)))
    True
    >>> encode_trace((LocalTime(2, 0),)) > encode_trace((LocalTime(1, 9),))
    True
    """
    return b"".join(_LOCAL.pack(local.logical, local.child) for local in trace)


def decode_trace(data: bytes) -> Trace:
    """The trace ``data`` encodes.

    >>> decode_trace(encode_trace((LocalTime(3, 0), LocalTime(0, 2))))
    (LocalTime(logical=3, child=0), LocalTime(logical=0, child=2))
    """
    return tuple(LocalTime(*_LOCAL.unpack_from(data, i)) for i in range(0, len(data), LOCAL_BYTES))


#: A local time's three 32-bit words kept by :func:`lineage_column`: only the child index's.
_CHILD = np.array([0, 0, 0xFFFFFFFF], np.uint32)


def _by_local(data: np.ndarray) -> np.ndarray:
    """Encoded traces' bytes as rows of three 32-bit words, one row a local time."""
    return data.view(np.uint32).reshape(-1, 3)


def lineage_column(traces: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Encoded traces as a sink releases them: each one's :func:`~flamestream.model.lineage`.

    Every local time's logical part (its first 8 bytes) set to 0, in one pass over the
    column's bytes; a dictionary-encoded column has its dictionary done (a key partition's
    traces are mostly a few distinct ones). Nulls stay null.

    >>> trace = (LocalTime(0, 2), LocalTime(5, 0))
    >>> [decode_trace(t) for t in lineage_column(pa.array([encode_trace(trace)])).to_pylist()]
    [(LocalTime(logical=0, child=2), LocalTime(logical=0, child=0))]
    """
    if isinstance(traces, pa.ChunkedArray):
        return pa.chunked_array([lineage_column(c) for c in traces.chunks], type=traces.type)
    if isinstance(traces, pa.DictionaryArray):
        dictionary = lineage_column(traces.dictionary)
        return pa.DictionaryArray.from_arrays(traces.indices, dictionary)
    if pa.types.is_large_binary(traces.type):
        offsets = np.frombuffer(traces.buffers()[1], np.int64)
    else:
        offsets = np.frombuffer(traces.buffers()[1], np.int32)
    offsets = offsets[traces.offset : traces.offset + len(traces) + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    if (end - start) % LOCAL_BYTES:
        msg = f"encoded traces of {end - start} bytes: not a whole number of local times"
        raise ValueError(msg)
    # as 32-bit words, 3 a local time: the logical time's 2 cleared, the child index's kept,
    # in one pass that reads the old bytes and writes the new (no copy, then a strided write)
    words = np.frombuffer(traces.buffers()[2] or b"", np.uint8)[start:end]
    data = np.empty(end - start, np.uint8)
    np.bitwise_and(_by_local(words.copy() if start % 4 else words), _CHILD, out=_by_local(data))
    # a validity bitmap from offset 0, as the new offsets are (the column may be a slice)
    valid = traces.is_valid().buffers()[1] if traces.null_count else None
    return pa.Array.from_buffers(
        traces.type,
        len(traces),
        [valid, pa.py_buffer(offsets - start), pa.py_buffer(data)],
        null_count=traces.null_count,
    )


MAPPED_TAG, REDUCED_TAG = b"m", b"r"


#: How a mapped pair's payload starts when its key is text under 256 bytes (what
#: :func:`encode_payload` makes of ``Mapped(text, value)``): the tag, pickle protocol 5 and
#: a frame opcode (its 8-byte length follows), then SHORT_BINUNICODE with the text. The
#: columnar paths write (``columnar``) and read (``summed``) such pairs in Arrow.
PAIR_HEAD = MAPPED_TAG + b"\x80\x05\x95"


def encode_payload(payload: Any) -> bytes:
    """The tagged bytes of ``payload``.

    >>> [decode_payload(encode_payload(p)) for p in ("word", b"raw", (1, "x"))]
    ['word', b'raw', (1, 'x')]
    >>> decode_payload(encode_payload(Mapped("cat", 1)))
    Mapped(key='cat', value=1)
    """
    if type(payload) is str:
        return TEXT_TAG + payload.encode()
    if type(payload) is bytes:
        return BYTES_TAG + payload
    kind = type(payload)
    if kind is Mapped:
        return MAPPED_TAG + pickle.dumps((payload.key, payload.value), PICKLE_PROTOCOL)
    if kind is Reduced:
        return REDUCED_TAG + pickle.dumps((payload.key, payload.value), PICKLE_PROTOCOL)
    return PICKLE_TAG + pickle.dumps(payload, protocol=PICKLE_PROTOCOL)


#: Key and value types whose equal pairs pickle alike (``1 == True``, ``0.0 == -0.0``: not
#: these): :func:`encode_pairs` encodes each distinct pair of them once.
_PLAIN_KEYS = frozenset({str, bytes})
_PLAIN_VALUES = frozenset({int, str, bytes})


def encode_pairs(
    pairs: Sequence[tuple[Any, Any]], *, repeated: bool = True
) -> tuple[list[bytes], list[bytes]]:
    """Each pair's grouping key and ``Mapped`` payload (``encode_key``, ``encode_payload``).

    The bytes are ``encode_key(key)`` and ``encode_payload(Mapped(key, value))``'s. When every
    key is text or bytes and every value an int, text or bytes (word count's ``(word, 1)``),
    equal pairs have equal bytes: each distinct pair is encoded once and its bytes shared (a
    repeated word costs two dict lookups, not a pickle). Other pairs (``True == 1``,
    ``0.0 == -0.0``) are encoded one by one, and so are pairs known not to repeat
    (``repeated=False``: a map-side combine's, one per key), where finding the distinct ones
    would double the cost. Raises what ``encode_key`` raises for a key that cannot key a
    bucket.

    >>> keys, payloads = encode_pairs([("a", 1), ("b", 2), ("a", 1)])
    >>> keys[0] is keys[2], payloads[0] is payloads[2], [decode_payload(p) for p in payloads]
    (True, True, [Mapped(key='a', value=1), Mapped(key='b', value=2), Mapped(key='a', value=1)])
    >>> [decode_payload(p).value for p in encode_pairs([("a", 1), ("a", True)])[1]]
    [1, True]
    """
    plain = (
        repeated
        and set(map(type, map(itemgetter(0), pairs))) <= _PLAIN_KEYS
        and set(map(type, map(itemgetter(1), pairs))) <= _PLAIN_VALUES
    )
    if not plain:
        return (
            [encode_key(key) for key, _ in pairs],
            [MAPPED_TAG + pickle.dumps(pair, PICKLE_PROTOCOL) for pair in pairs],
        )
    # equal pairs of these types are the same key and value, of the same types
    distinct = dict.fromkeys(pairs)
    keys = {pair: encode_key(pair[0]) for pair in distinct}
    payloads = {pair: MAPPED_TAG + pickle.dumps(pair, PICKLE_PROTOCOL) for pair in distinct}
    return [keys[pair] for pair in pairs], [payloads[pair] for pair in pairs]


def decode_payload(data: bytes | None) -> Any:
    """The payload ``data`` encodes (None for a tombstone's missing payload)."""
    if data is None:
        return None
    tag = data[:1]
    if tag == TEXT_TAG:
        return data[1:].decode()
    if tag == MAPPED_TAG:
        return Mapped(*pickle.loads(data[1:]))  # noqa: S301  (our own stages wrote it)
    if tag == REDUCED_TAG:
        return Reduced(*pickle.loads(data[1:]))  # noqa: S301
    if tag == BYTES_TAG:
        return data[1:]
    return pickle.loads(data[1:])  # noqa: S301  (our own stages wrote it)


def sorted_by_meta(table: pa.Table, coded_traces: bool = False) -> pa.Table:
    """``table``'s rows sorted by meta: ``(ts, front)``, then ``trace`` as bytes if present.

    What the stable ``table.sort_by`` on those columns gives, for less: rows already in
    order come back as they are (a stage yields its rows in meta order); traces, of which an
    unsorted batch (a shuffle's) holds a handful of distinct ones, are compared as the ranks
    of their dictionary instead of byte by byte (a third of the cost); the three keys are
    packed into one integer where they fit, sorted 16 bits at a time (``stable_order``;
    3 M rows: 0.32 -> 0.16 s and less); and a column holding one value (a stage's target,
    say) is not moved.

    ``coded_traces``: a sorted trace column comes dictionary-encoded (the same values): its
    indices move instead of every trace's bytes, for a reader that copies the traces anyway
    (a keyed stage's: ``values_of`` and :mod:`.summed` read either; 1.75 M rows of 24-byte
    traces: 0.11 -> 0.01 s).
    """
    names = [name for name in ("ts", "front", "trace") if name in table.column_names]
    columns = [table.column(name).combine_chunks() for name in names]
    if table.num_rows < 2 or any(column.null_count for column in columns):
        return table.sort_by([(name, "ascending") for name in names])
    if ascending(columns):
        return table
    traces = None
    if len(columns) == 3:
        traces = pc.dictionary_encode(columns[2])
        ranks = pc.rank(traces.dictionary, "ascending")  # distinct values: no ties
        columns[2] = pc.take(ranks, traces.indices)
    order = _packed_order(columns)
    if order is None:
        keys = pa.table({str(nth): column for nth, column in enumerate(columns)})
        order = pc.sort_indices(keys, [(str(nth), "ascending") for nth in range(len(columns))])
    if not coded_traces or traces is None:
        moved = {name: _taken(table.column(name), order) for name in table.column_names}
        return pa.table(moved, schema=table.schema)
    coded = pa.DictionaryArray.from_arrays(traces.indices.take(order), traces.dictionary)
    columns = [
        coded if name == "trace" else _taken(table.column(name), order)
        for name in table.column_names
    ]
    at = table.schema.get_field_index("trace")
    schema = table.schema.set(at, table.schema.field(at).with_type(coded.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _packed_order(columns: list[pa.Array]) -> pa.Array | None:
    """The stable ascending order of rows by integer ``columns``, most significant first.

    Sorted as one unsigned 64-bit number per row; None if the columns' ranges need more bits.
    """
    values = [column.to_numpy().astype(np.int64) for column in columns]
    lows = [int(v.min()) for v in values]
    widths = [(int(v.max()) - low).bit_length() for v, low in zip(values, lows, strict=True)]
    if sum(widths) > 64:
        return None
    key = np.zeros(len(values[0]), np.uint64)
    for v, low, width in zip(values, lows, widths, strict=True):
        key = (key << np.uint64(width)) | (v - low).astype(np.uint64)
    return pa.array(stable_order(key, 1 << sum(widths)))


def stable_order(values: np.ndarray, bound: int) -> np.ndarray:
    """The stable ascending order of ``values``, non-negative integers below ``bound``.

    numpy sorts 16-bit integers stably by radix, in one pass: 3 M word numbers 0.03 s, where
    as 64-bit integers they took 0.26-0.34 s (and as 32-bit ones 0.2 s). Wider values are
    sorted 16 bits at a time, least significant first (a stable pass per digit keeps the
    order of the digits below): 2 M keys of 24 bits 0.18 -> 0.05 s.
    """
    if bound <= 1 << 16:  # one digit: no 64-bit copy to take it from (250k rows: 4.5 -> 2 ms)
        single: np.ndarray = np.argsort(values.astype(np.uint16), kind="stable")
        return single
    wide = values.astype(np.uint64, copy=False)
    order: np.ndarray = np.argsort((wide & np.uint64(0xFFFF)).astype(np.uint16), kind="stable")
    for shift in range(16, (max(bound, 1) - 1).bit_length(), 16):
        digit = ((wide[order] >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    return order


def _taken(column: pa.ChunkedArray, order: pa.Array) -> pa.ChunkedArray:
    """``column`` in ``order``; as it is when all its values are equal.

    Checked for text and bytes only, where a move is dear (a check costs a quarter of one),
    and only when the first and the last value already agree.
    """
    if (
        (pa.types.is_string(column.type) or pa.types.is_binary(column.type))
        and len(column)
        and not column.null_count
        and column[0] == column[-1]
        and pc.all(pc.equal(column, column[0])).as_py()  # (a third of a count_distinct)
    ):
        return column
    return column.take(order)


def _extended_matrix(traces: pa.Array, start: int, length: int, suffixes: np.ndarray) -> pa.Array:
    """``extended_traces`` for ``traces`` all ``length`` bytes long, their data from ``start``.

    Each row is copied as one opaque (void) value, not byte by byte: numpy copies a matrix
    of 24-byte uint8 rows row by row, a void column in one loop (3 M traces: 0.06 -> 0.04 s).
    """
    rows, width = len(traces), suffixes.shape[1]
    data = np.frombuffer(traces.buffers()[2], np.uint8, rows * length, start)
    out = np.empty(rows * (length + width), np.uint8)
    halves = out.view(np.dtype([("trace", f"V{length}"), ("suffix", f"V{width}")]))
    halves["trace"] = data.view(f"V{length}")
    halves["suffix"] = np.ascontiguousarray(suffixes).view(f"V{width}").reshape(-1)  # or 1 row
    bounds = np.arange(0, (rows + 1) * (length + width), length + width, dtype=np.int32)
    buffers = [None, pa.py_buffer(bounds), pa.py_buffer(out)]
    return pa.BinaryArray.from_buffers(pa.binary(), rows, buffers)


def time_starts(ts: np.ndarray, fronts: np.ndarray) -> np.ndarray:
    """Per row (rows in meta order), whether a global time starts there."""
    starts = np.ones(len(ts), bool)
    starts[1:] = (ts[1:] != ts[:-1]) | (fronts[1:] != fronts[:-1])
    return starts


def ascending(columns: list[pa.Array]) -> bool:
    """Whether the rows' keys (columns without nulls, most significant first) never fall."""
    rows = len(columns[0])
    first, later = columns[0].slice(0, rows - 1), columns[0].slice(1)
    if len(columns) > 1 and pc.any(pc.less(later, first)).as_py():
        return False  # the most significant key falls: a shuffle's rows, found at once
    after_all: Any = True  # rows whose later keys tie: so far none decides
    for column in reversed(columns):
        before, after = column.slice(0, rows - 1), column.slice(1)
        tie = pc.and_(pc.equal(after, before), after_all)
        after_all = pc.or_(pc.greater(after, before), tie)
    return bool(pc.all(after_all).as_py())


def extended_traces(traces: pa.Array, suffixes: np.ndarray) -> pa.Array:
    """Each trace with its row of ``suffixes`` (encoded local times, uint8) appended.

    ``suffixes`` has one row per trace, or one row for all. Traces of one length (rows at one
    point of a graph) are extended as a matrix; others are joined value by value.
    """
    rows, width = len(traces), suffixes.shape[1]
    offsets = np.frombuffer(traces.buffers()[1], np.int32, rows + 1, traces.offset * 4)
    lengths = np.diff(offsets)
    if rows and width and lengths[0] and not traces.null_count and (lengths == lengths[0]).all():
        return _extended_matrix(traces, int(offsets[0]), int(lengths[0]), suffixes)
    if suffixes.shape[0] != rows:
        suffixes = np.broadcast_to(suffixes, (rows, width))
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), rows, [None, pa.py_buffer(np.ascontiguousarray(suffixes))]
    )
    return pc.binary_join_element_wise(traces, fixed.cast(pa.binary()), b"")
