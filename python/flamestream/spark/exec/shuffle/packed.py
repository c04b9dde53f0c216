"""Item rows packed for the shuffle: one row per distinct item, its occurrences as lists.

Releasing every update, word count's first stage sends one item row per word occurrence to
the shuffle: 4.8 M rows for 4.8 M words, each row crossing into the JVM, through the
shuffle and out to Python again, column by column. The JVM's part alone (the rows through
one shuffle into a Python task that only counts them) took 5.3 s there, against 1.1 s for
plain PySpark's whole word count. Most of those rows differ only in their meta: the same
word, key, destination and front, at another time and place. Packed, the rows of a read
block that agree on everything but ``ts``, ``trace`` and ``position`` become one row holding
those three as lists: 427k rows for the 4.8 M words (packed per whole read task, 176,598
rows went through that shuffle in 1.5 s).

The keyed task unpacks them before anything else; it sorts its rows by meta anyway, so the
order packing changes does not matter. Packing is planned (``ExecutionPlan.packed_into``)
when the fronts' rows all go to one keyed stage that reads nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.spark.exec.general.items import ITEM_FIELDS, stable_order

#: The columns that differ between the occurrences of one item (lists in a packed row).
OCCURRENCE_COLUMNS = ("ts", "trace", "position")

#: What packed rows look like: item rows with the occurrence columns as lists.
PACKED_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.list_(f.type), nullable=False) if f.name in OCCURRENCE_COLUMNS else f
        for f in ITEM_FIELDS
    ]
)

#: The shared columns an unpacked row holds as dictionary indices into the packed rows'.
DICTIONARY_ENCODED = ("payload", "source")

_SHARED = [f.name for f in ITEM_FIELDS if f.name not in OCCURRENCE_COLUMNS]


def is_packed(schema: pa.Schema) -> bool:
    """Whether rows of ``schema`` are packed (their ``ts`` is a list)."""
    return bool(pa.types.is_list(schema.field("ts").type))


def pack(rows: pa.RecordBatch) -> pa.RecordBatch:
    """``rows`` (item rows) packed: a row per distinct set of the shared columns.

    A packed row's occurrences come in the order they have in ``rows``; the packed rows in
    the order :func:`group` gives them. Grouped by sorting numbers, not with Arrow's
    ``group_by``: its hash aggregation into lists took 27 ms for a read block of word count
    (120k words), this 19 ms.
    """
    if not rows.num_rows:
        return pa.RecordBatch.from_pylist([], schema=PACKED_SCHEMA)
    order, starts = group([rows.column(name) for name in _SHARED])
    firsts = pa.array(order[starts])
    everyone = pa.array(order)
    return packed_rows(
        {name: rows.column(name).take(firsts) for name in _SHARED},
        {name: rows.column(name).take(everyone) for name in OCCURRENCE_COLUMNS},
        starts,
    )


def group(columns: Sequence[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """Rows that agree on all ``columns`` (nulls agreeing), brought together.

    The order that lists the rows group by group, each group's rows in their order, and where
    each group starts in it. Groups come in the order of their values' first occurrences,
    compared column by column: each column's dictionary codes (first occurrence first) are
    the digits of one number per row, which a stable sort orders. A column with one value
    adds nothing.
    """
    ids = np.zeros(len(columns[0]), np.int64)
    count = 1
    for column in columns:
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        size = len(encoded.dictionary)
        if size > 1:
            if count * size >= 2**62:  # keep the digits' product in an int64: renumber
                distinct, ids = np.unique(ids, return_inverse=True)
                count = len(distinct)
            ids = ids * size + encoded.indices.to_numpy(zero_copy_only=False)
            count *= size
    order = stable_order(ids, count)
    ordered = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return order, starts


def packed_rows(
    shared: Mapping[str, pa.Array], occurrences: Mapping[str, pa.Array], starts: np.ndarray
) -> pa.RecordBatch:
    """Packed rows of ``shared`` columns and ``occurrences`` lists.

    ``shared``: a value per packed row. ``occurrences``: a value per occurrence, row by row:
    row ``i``'s from ``starts[i]`` up to the next row's start.
    """
    ends = len(occurrences[OCCURRENCE_COLUMNS[0]])
    offsets = pa.array(np.append(starts, ends).astype(np.int32))
    columns = [
        pa.ListArray.from_arrays(offsets, occurrences[name])
        if name in OCCURRENCE_COLUMNS
        else shared[name]
        for name in PACKED_SCHEMA.names
    ]
    return pa.RecordBatch.from_arrays(columns, schema=PACKED_SCHEMA)


def unpack(rows: pa.RecordBatch) -> pa.RecordBatch:
    """Packed ``rows`` as the item rows they hold (occurrences of a row next to each other).

    Columns besides the item's (the key partition Spark SQL adds) are repeated likewise. The
    payload and the source come dictionary-encoded (their dictionaries the packed rows'
    values, without a null), so that the keyed stage's sort moves indices, and a summing
    cycle reads each distinct payload once (:mod:`.summed`); any other reader gets the same
    values. (A source is a file's path or a topic's partition, repeated in every row:
    as text, word count's 1.75 M rows of a task took 0.11 s to sort and as long to unpack.)
    """
    owners = pc.list_parent_indices(rows.column("ts"))
    names = rows.schema.names
    arrays = [
        _repeated(name, column, owners) for name, column in zip(names, rows.columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _repeated(name: str, column: pa.Array, owners: pa.Array) -> pa.Array:
    """``column`` of the packed rows, one value per occurrence."""
    if name in OCCURRENCE_COLUMNS:
        return pc.list_flatten(column)
    if name in DICTIONARY_ENCODED and not column.null_count:
        return pa.DictionaryArray.from_arrays(owners.cast(pa.int32()), column)
    return column.take(owners)
