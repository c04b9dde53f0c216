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

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.spark.exec.items import ITEM_FIELDS

#: The columns that differ between the occurrences of one item (lists in a packed row).
OCCURRENCE_COLUMNS = ("ts", "trace", "position")

#: What packed rows look like: item rows with the occurrence columns as lists.
PACKED_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.list_(f.type), nullable=False) if f.name in OCCURRENCE_COLUMNS else f
        for f in ITEM_FIELDS
    ]
)

_SHARED = [f.name for f in ITEM_FIELDS if f.name not in OCCURRENCE_COLUMNS]


def is_packed(schema: pa.Schema) -> bool:
    """Whether rows of ``schema`` are packed (their ``ts`` is a list)."""
    return bool(pa.types.is_list(schema.field("ts").type))


def pack(rows: pa.RecordBatch) -> pa.RecordBatch:
    """``rows`` (item rows) packed: a row per distinct set of the shared columns.

    A packed row's occurrences come in the order they have in ``rows``.
    """
    if not rows.num_rows:
        return pa.RecordBatch.from_pylist([], schema=PACKED_SCHEMA)
    table = pa.Table.from_batches([rows])
    aggregates = [(name, "list") for name in OCCURRENCE_COLUMNS]
    grouped = table.group_by(_SHARED, use_threads=False).aggregate(aggregates)
    columns = [
        grouped.column(f"{f.name}_list" if f.name in OCCURRENCE_COLUMNS else f.name)
        for f in ITEM_FIELDS
    ]
    return pa.Table.from_arrays(columns, schema=PACKED_SCHEMA).combine_chunks().to_batches()[0]


def unpack(rows: pa.RecordBatch) -> pa.RecordBatch:
    """Packed ``rows`` as the item rows they hold (occurrences of a row next to each other).

    Columns besides the item's (the key partition Spark SQL adds) are repeated likewise.
    """
    owners = pc.list_parent_indices(rows.column("ts"))
    names = rows.schema.names
    arrays = [
        pc.list_flatten(column) if name in OCCURRENCE_COLUMNS else column.take(owners)
        for name, column in zip(names, rows.columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, names=names)
