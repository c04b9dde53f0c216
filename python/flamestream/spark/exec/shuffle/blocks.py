"""Item rows through the shuffle in Arrow blocks: one row per key partition, not per item.

Rows a front's read task sends to a keyed stage cross into the JVM column by column, row by
row (Arrow to Spark's rows), go through the shuffle as rows, and cross back the same way
(rows to Arrow) in the keyed task. For word count releasing the latest counts that was
176,598 rows per batch of the comparison corpus: the keyed tasks waited 0.25 s of their
0.4 s for their 88k rows to arrive, and the read tasks' JVM side spent 0.1-0.15 s of CPU
on them (0.05 s with blocks). The rows do not need Spark to look inside them: the fronts
can compute each row's key partition themselves (:func:`~.partitioning.partitions_of`,
Spark's own hash), so they send, per destination and key partition, one row holding all
those item rows as an Arrow IPC stream.
The shuffle moves a few large values, the keyed task reads the items back without copying.

A block row has the columns ``to`` (the destination step, which the plan filters on),
``key`` (a value Spark's ``repartition(n, "key")`` puts in the block's partition, see
:func:`block_keys`) and ``block`` (the IPC stream of item rows, or of packed rows, see
:mod:`.packed`). Blocking is planned (``ExecutionPlan.blocked_into``) when the fronts' rows
all go to one keyed stage that reads nothing else: then no other consumer meets them.
"""

from __future__ import annotations

from functools import cache
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.spark.exec.general.partitioning import landing_keys, partitions_of

#: What block rows look like.
BLOCK_SCHEMA = pa.schema(
    [
        pa.field("to", pa.string()),
        pa.field("key", pa.binary()),
        pa.field("block", pa.binary()),
    ]
)

#: A block is cut into several when its rows take more bytes than this: a Spark row, and the
#: Arrow batch that carries a keyed task's rows to Python, hold at most 2 GiB. Spark ends
#: such a batch after the row that takes it past ``spark.sql.execution.arrow.maxBytesPerBatch``
#: (64 MB by default: 8 rows of 10 MB came as 7 and 1), so a batch of blocks stays far below.
BLOCK_BYTES = 64 * 2**20

#: Block rows' keys start with a byte no encoded key starts with (nor a salt, ``\x00``).
BLOCK_PREFIX = b"\x01"


def is_blocked(schema: pa.Schema) -> bool:
    """Whether rows of ``schema`` are block rows."""
    return "block" in schema.names


@cache
def block_keys(partitions: int) -> tuple[bytes, ...]:
    """One key per partition that Spark's hash partitioning puts there."""
    return landing_keys(BLOCK_PREFIX, partitions)


def blocked(rows: pa.RecordBatch, partitions: int) -> pa.RecordBatch:
    """``rows`` (item or packed rows, with keys) as block rows for ``partitions`` partitions.

    One block per destination and key partition that has rows (more if it is bigger than
    :data:`BLOCK_BYTES`), the rows of each in the order they have in ``rows``.
    """
    destinations = pc.dictionary_encode(rows.column("to"))
    codes = destinations.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    groups = codes * partitions + partitions_of(rows.column("key"), partitions)
    order = np.argsort(groups, kind="stable")
    ordered = groups[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    ends = np.append(starts[1:], len(order))
    grouped = rows.take(pa.array(order))
    keys = block_keys(partitions)
    to, key, pieces = [], [], []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        group = int(ordered[start])
        for piece in _pieces(grouped.slice(start, end - start)):
            to.append(destinations.dictionary[group // partitions].as_py())
            key.append(keys[group % partitions])
            pieces.append([piece])
    return pa.RecordBatch.from_arrays(
        [pa.array(to, pa.string()), pa.array(key, pa.binary()), _streams(pieces)],
        schema=BLOCK_SCHEMA,
    )


def in_blocks(rows: list[pa.RecordBatch], to: str) -> pa.RecordBatch:
    """Batches of item rows (one schema) for ``to`` as block rows that no shuffle moves.

    One block holds them all, in order (more blocks when they take more than
    :data:`BLOCK_BYTES`); the key is empty. The empty graph's fronts send their rows to the
    sink so (:mod:`flamestream.spark.exec.general.passthrough`).
    """
    groups: list[list[pa.RecordBatch]] = [[]]
    size = 0
    for batch in rows:
        for piece in _pieces(batch):
            if groups[-1] and size + piece.nbytes > BLOCK_BYTES:
                groups.append([])
                size = 0
            groups[-1].append(piece)
            size += piece.nbytes
    n = len(groups)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(to, pa.string()), n),
            pa.repeat(pa.scalar(b"", pa.binary()), n),
            _streams(groups),
        ],
        schema=BLOCK_SCHEMA,
    )


def opened(rows: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The item (or packed) rows the block rows hold; they share the blocks' memory."""
    found: list[pa.RecordBatch] = []
    for batch in rows:
        for block in batch.column("block"):
            with pa.ipc.open_stream(block.as_buffer()) as reader:
                found.extend(part for part in reader if part.num_rows)
    return found


def _pieces(rows: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``rows`` cut into pieces of about :data:`BLOCK_BYTES` at most."""
    count = -(-rows.nbytes // BLOCK_BYTES)
    if count <= 1:
        return [rows]
    bounds = np.linspace(0, rows.num_rows, count + 1).astype(np.int64).tolist()
    return [rows.slice(a, b - a) for a, b in pairwise(bounds) if b > a]


#: The most bytes a binary array's values may take.
_MOST_BYTES = 2**31 - 1


def _streams(pieces: list[list[pa.RecordBatch]]) -> pa.Array:
    """Each piece (batches of one schema) as an IPC stream: a binary array, written in place.

    Each stream's size is found first (a mock stream counts the bytes, it copies none), then
    all are written into one buffer that becomes the array's data. Written into a growing
    buffer, copied out as bytes and into an array, they took 3-7 times as long (word count's
    every-update blocks: 65-73 ms a file of the compare corpus, a fifth of a read task).
    """
    sizes = [_stream(pa.MockOutputStream(), piece) for piece in pieces]
    offsets = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] > _MOST_BYTES:  # a binary array's offsets are 32-bit
        msg = f"a read run's blocks take {offsets[-1]} bytes, more than a binary array holds"
        raise OverflowError(msg)
    data = pa.allocate_buffer(int(offsets[-1]))
    out = pa.FixedSizeBufferWriter(data)
    for piece in pieces:
        _stream(out, piece)
    bounds = pa.py_buffer(offsets.astype(np.int32))
    return pa.Array.from_buffers(pa.binary(), len(pieces), [None, bounds, data])


def _stream(out: Any, rows: list[pa.RecordBatch]) -> int:
    """Write ``rows`` (at least one batch) to ``out`` as an Arrow IPC stream; the bytes it took."""
    start = out.tell()
    with pa.ipc.new_stream(out, rows[0].schema) as writer:
        for batch in rows:
            writer.write_batch(batch)
    size: int = out.tell() - start
    return size
