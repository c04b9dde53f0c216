"""The empty graph (a source straight to its sink): front rows released as they are, rendered.

A graph whose source feeds its sink directly runs no stage: its rows' only work is the
render of their payloads. The plan says so (``ExecutionPlan.passthrough``), and ``apply``
runs that work where the rows already are in Python:

* given readers, the fronts render their rows in their read tasks
  (:class:`PassthroughFront`): the item rows they send are the released rows;
* with ``write_stream`` too, they send them in blocks (:mod:`..shuffle.blocks`), one row
  holding a read range's rows as an Arrow IPC stream, and the sink's write task opens them
  (:class:`OpenedBlocks`). Without blocks, the JVM turned every row's columns into a Spark
  row out of the reader and back into Arrow for the writer, value by value: the passthrough
  benchmark's read tasks spent most of their JVM time there;
* given a loaded DataFrame, one ``mapInArrow`` pass renders its item rows (:class:`RenderPass`).

The released rows are the reference runtime's: the payload rendered by the graph's render,
an empty trace, no flags, the record's determinant.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.spark.exec.general.front_stage import FrontWork
from flamestream.spark.exec.general.items import ITEM_SCHEMA, TEXT_TAG, decode_payload
from flamestream.spark.exec.shuffle.blocks import in_blocks, opened

#: A block sent to the sink ends once its rows take this many bytes (or the range ends): big
#: enough that the JVM handles few rows, small enough that the writer starts on the first
#: block while the read goes on (blocks are written as they come, ``release=tasks``).
PASSTHROUGH_BLOCK_BYTES = 16 * 2**20

Render = Callable[[Any], str]

#: The most bytes a (32-bit offset) binary value may take.
_MOST_BYTES = 2**31 - 1


def rendered_values(payloads: pa.Array, render: Render | None) -> pa.Array:
    """The ``value`` column of released rows for encoded ``payloads`` (tagged binary).

    ``render`` None is the default render (``render_default``): text is its own value, so a
    column of text payloads is sliced, not decoded; bytes are decoded with bad bytes escaped.
    """
    if render is None and len(payloads) and _all_text(payloads):
        # an explicit stop: without one, pyarrow 26 fails on a sliced array
        return pc.binary_slice(payloads, 1, _MOST_BYTES).cast(pa.string())
    from flamestream.spark.exec.general.stateless import render_default

    how = render or render_default
    return pa.array([how(decode_payload(p)) for p in payloads.to_pylist()], pa.string())


def _all_text(payloads: pa.Array) -> bool:
    """Whether every encoded payload is text (its tag)."""
    tags = pc.binary_slice(payloads, 0, 1)
    return bool(pc.all(pc.equal(tags, pa.scalar(TEXT_TAG, pa.binary()))).as_py())


def released_items(items: pa.RecordBatch, render: Render | None) -> pa.RecordBatch:
    """Item rows on their way to the sink with their ``value`` rendered and no payload.

    A column ``items`` lack (the ``key`` of front rows made items in SQL) is null.
    """
    value = rendered_values(items.column("payload"), render)
    n = items.num_rows
    columns = {
        f.name: items.column(f.name) if f.name in items.schema.names else pa.nulls(n, f.type)
        for f in ITEM_SCHEMA
    }
    columns["payload"] = pa.nulls(n, pa.binary())
    columns["value"] = value
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=ITEM_SCHEMA)


class PassthroughFront(FrontWork):
    """The empty graph's work in a front's read tasks: its rows as released item rows.

    The kind of :class:`FrontWork` with no stage to run: the render is all there is.

    Runs on executors, in the front's read task; ``render`` (None: the default render) must
    be deterministic, as every step's function. ``in_blocks``: the rows leave as block rows
    (``write_stream``, whose sink opens them), else as item rows.
    """

    def __init__(self, sink: str, payload: str, render: Render | None, in_blocks: bool) -> None:
        super().__init__(entry=sink, payload=payload, blocks=int(in_blocks))
        self.render = render

    def read(self, blocks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The released item rows of a read range's front rows, in blocks if asked."""
        if not self.blocks:
            for rows in blocks:
                if rows.num_rows:
                    yield self.items(rows)
            return
        held: list[pa.RecordBatch] = []
        size = 0
        for rows in blocks:
            if not rows.num_rows:
                continue
            held.append(self.items(rows))
            size += held[-1].nbytes
            if size >= PASSTHROUGH_BLOCK_BYTES:
                yield in_blocks(held, self.entry)
                held, size = [], 0
        if held:
            yield in_blocks(held, self.entry)

    def items(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        """Front rows as the item rows the sink releases (text payloads are not copied)."""
        value = rows.column(self.payload)
        if self.render is None and pa.types.is_string(value.type):
            return self._entering(rows, rendered=value)
        return released_items(self._entering(rows), self.render)


class OpenedBlocks:
    """The sink's task for the empty graph's blocks: the item rows they hold, block by block.

    Runs in the sink's write tasks (executors); the rows share the blocks' memory.
    """

    def keep_only(self, columns: Collection[str]) -> None:
        """Nothing to spare: the fronts made the rows (the sink drops what it does not write)."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The item rows of each batch of block rows, in the order they were read."""
        for batch in batches:
            yield from opened([batch])


class RenderPass:
    """A loaded DataFrame's item rows rendered for the sink: one ``mapInArrow`` pass.

    Runs in executors' Python workers; ``render`` as for :class:`PassthroughFront`.
    """

    def __init__(self, render: Render | None) -> None:
        self.render = render

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each batch's rows with their value rendered."""
        for batch in batches:
            yield released_items(batch, self.render)
