"""A graph's first stage run inside a front's read tasks: rows leave Python once, as items.

Without it, a front's records leave its Python reader as front rows, become item rows in
Spark SQL, and enter Python again for the graph's first stage (or for their shuffle keys):
two crossings of the Python/JVM boundary per record, and a Python worker more per task.
``SparkGraph`` hands the fronts a ``FrontStage`` (in the internal ``graphStage`` option, see
:mod:`.shipping`) when ``apply`` is given readers; the front's ``read`` then yields the item
rows that stage sends on, ready for the shuffle. The rows are the same as the unfused path's:
the front rows are turned into items exactly as ``SparkGraph._items`` does in SQL.

What a front runs in its reads is a :class:`FrontWork`, of two kinds: a :class:`FrontStage`
(a graph's first stage, or the keying for its first grouping, run by the stage's
``StageRunner``) and the empty graph's render, which has no stage to run
(:class:`~flamestream.spark.exec.general.passthrough.PassthroughFront`). ``apply`` picks the
kind from the plan (``ExecutionPlan.passthrough`` and ``in_front``); a stage's path is the
plan's too (:mod:`flamestream.spark.plan.paths`), never the front's to decide.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import ConfigError
from flamestream.spark.exec.general.items import BYTES_TAG, ITEM_SCHEMA, TEXT_TAG
from flamestream.spark.exec.general.shipping import ship, unship
from flamestream.spark.exec.general.stateless import StageRunner
from flamestream.spark.exec.shuffle.blocks import BLOCK_SCHEMA, blocked
from flamestream.spark.exec.shuffle.packed import PACKED_SCHEMA
from flamestream.spark.plan.paths import DECLARED_COUNT

#: The column a fused front adds to the rows it sends: how many front records they account
#: for (on the first row sent after those records were read, 0 on the others). Spark counts
#: the rows a source sends as its ``numInputRows``, and those are items, packed rows or
#: blocks here; ``apply`` sums this column into the query's observed metrics and drops it.
RECORDS = "records"

#: A combining stage runs over this many front rows of a read task at once, at most ...
COMBINE_ROWS = 1_000_000
#: ... or this many bytes of them (whichever comes first). A stage that runs in Python makes
#: objects for every word of a run: 8 MiB of text is about 2 M words, some 0.4 GiB of them.
COMBINE_BYTES = 8 * 2**20


class FrontWork:
    """What a front runs in its read tasks: front rows (meta + payload columns) to item rows.

    ``entry`` is the step the source feeds, ``payload`` the front column that carries the
    payload. ``packs``: the rows leave packed (:mod:`.packed`); ``blocks``: in blocks (see
    each kind), 0: as rows. The kinds say what :meth:`read` makes of the front rows; what a
    read task sends (:meth:`sent`) and how front rows enter the graph (:meth:`_entering`) are
    the same for both.
    """

    def __init__(self, entry: str, payload: str, packs: bool = False, blocks: int = 0) -> None:
        self.entry = entry
        self.payload = payload
        self.packs = packs
        self.blocks = blocks

    def read(self, blocks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The rows a read task's blocks of front rows become (the kinds say how)."""
        raise NotImplementedError

    def sent(self, blocks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """What the front's read task sends: :meth:`read`'s rows and the :data:`RECORDS` column.

        Each batch carries the front records read since the previous batch sent, on its first
        row. Records that send no rows at all (a filter dropped every one) are counted by one
        last row that no step reads (``to`` is "").
        """
        records = _Counted(blocks)
        schema: pa.Schema | None = None
        for rows in self.read(iter(records)):
            schema = rows.schema
            yield _with_records(rows, records.take())
        left = records.take()
        if left:
            yield _carrier(schema or self.schema(), left)

    def schema(self) -> pa.Schema:
        """The rows this work sends (without :data:`RECORDS`)."""
        if self.blocks:
            return BLOCK_SCHEMA
        return PACKED_SCHEMA if self.packs else ITEM_SCHEMA

    def _entering(self, rows: pa.RecordBatch, rendered: pa.Array | None = None) -> pa.RecordBatch:
        """Front rows as items entering the graph: empty trace, tagged payload, no flags.

        ``rendered``: the rows' values as a sink gets them (the empty graph's text), which
        they then carry instead of a payload.
        """
        n = rows.num_rows
        if rendered is None:
            value = rows.column(self.payload)
            tag = TEXT_TAG if pa.types.is_string(value.type) else BYTES_TAG
            payload = pc.binary_join_element_wise(
                pa.scalar(tag, pa.binary()), value.cast(pa.binary()), pa.scalar(b"", pa.binary())
            )
        else:
            payload = pa.nulls(n, pa.binary())
        columns = {
            "ts": rows.column("ts"),
            "front": rows.column("front"),
            "trace": pa.repeat(pa.scalar(b"", pa.binary()), n),
            "flags": pa.repeat(pa.scalar(0, pa.int8()), n),
            "source": rows.column("source"),
            "position": rows.column("position"),
            "to": pa.repeat(pa.scalar(self.entry, pa.string()), n),
            "key": pa.nulls(n, pa.binary()),
            "payload": payload,
            "value": pa.nulls(n, pa.string()) if rendered is None else rendered,
        }
        return pa.RecordBatch.from_arrays(list(columns.values()), schema=ITEM_SCHEMA)

    def encode(self) -> str:
        """The work as an option value."""
        return ship(self)

    @staticmethod
    def decode(value: str) -> FrontWork:
        """The work an option value carries (made by :meth:`encode`, in ``apply``)."""
        work = unship(value)
        assert isinstance(work, FrontWork)  # noqa: S101
        return work


class FrontStage(FrontWork):
    """A graph's first stage in a front's read tasks: front rows to the item rows it sends on.

    ``runner`` is the stage's ``StageRunner`` (runs on executors, in the front's read task;
    its functions must be deterministic, as every step's are). ``entry`` and ``payload`` as
    for :class:`FrontWork`. ``packs``: the rows leave packed (:mod:`.packed`; planned by
    ``ExecutionPlan.packed_into``). ``blocks``: the key partitions of the keyed stage the rows
    go to, when they leave in blocks, one per partition (:mod:`.blocks`; planned by
    ``ExecutionPlan.blocked_into``); 0: as rows.
    """

    def __init__(
        self, runner: StageRunner, entry: str, payload: str, packs: bool = False, blocks: int = 0
    ) -> None:
        super().__init__(entry, payload, packs, blocks)
        self.runner = runner

    def items(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        """The item rows leaving the stage for a batch of front rows (may be empty)."""
        return self._leaving(rows, packed=False)

    def read(self, blocks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The item rows leaving the stage for a read task's blocks of front rows.

        A stage that combines per key before the shuffle (``release="latest"``) runs over up
        to :data:`COMBINE_ROWS` rows (or :data:`COMBINE_BYTES` bytes) of blocks at once, not
        block by block: a key then leaves the task once per run instead of once per read
        block, and the keyed stage gets that many fewer rows. The blocks come in meta order,
        so the rows run together are too. Other stages run block by block (a packing one
        too: packed over a whole read task, word count's rows were a third as many, but its
        biggest worker peaked at 1.03 instead of 0.89 GiB, and the run took no less time).
        """
        if not self.runner.precombine:
            for block in blocks:
                yield from self._combined([block])
            return
        held: list[pa.RecordBatch] = []
        rows = size = 0
        for block in blocks:
            held.append(block)
            rows, size = rows + block.num_rows, size + block.nbytes
            if rows >= COMBINE_ROWS or size >= COMBINE_BYTES:
                yield from self._combined(held)
                held, rows, size = [], 0, 0
        yield from self._combined(held)

    def _combined(self, blocks: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The stage's item rows for ``blocks`` run as one batch (none for no rows)."""
        if blocks:
            rows = blocks[0] if len(blocks) == 1 else pa.concat_batches(blocks)
            items = self._leaving(rows, self.packs)
            if items.num_rows:
                yield blocked(items, self.blocks) if self.blocks else items

    def _leaving(self, rows: pa.RecordBatch, packed: bool) -> pa.RecordBatch:
        """The rows the stage sends for a batch of front rows, ``packed`` or not.

        A declared count of text (:mod:`.columnar`) makes them straight from the front's
        text; other stages, and batches the count does not take, get :meth:`_entering`'s
        item rows.
        """
        # a batch with swapped steps runs the general way (the count compiled the old split)
        declared = self.runner.path.in_batch(self.runner.swapped()) == DECLARED_COUNT
        counted = self.runner.counted if declared else None
        text = rows.column(self.payload)
        if counted is not None and pa.types.is_string(text.type):
            made = counted.of_front(rows, self.entry, text, packed)
            if made is not None:
                return made
        entering = self._entering(rows)
        return self.runner.packed(entering) if packed else self.runner.run(entering)


def sent_schema(rows: pa.Schema) -> pa.Schema:
    """What a front running a stage sends: the stage's ``rows`` and the :data:`RECORDS` column."""
    return rows.append(pa.field(RECORDS, pa.int64(), nullable=False))


class _Counted:
    """An iterator of front rows that counts them; :meth:`take` says how many since last."""

    def __init__(self, blocks: Iterator[pa.RecordBatch]) -> None:
        self._blocks = blocks
        self._seen = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for block in self._blocks:
            self._seen += block.num_rows
            yield block

    def take(self) -> int:
        """The records read since the last call."""
        seen, self._seen = self._seen, 0
        return seen


def _with_records(rows: pa.RecordBatch, records: int) -> pa.RecordBatch:
    """``rows`` with :data:`RECORDS`: ``records`` on the first row, 0 on the others."""
    counts = np.zeros(rows.num_rows, np.int64)
    counts[0] = records
    return pa.RecordBatch.from_arrays(
        [*rows.columns, pa.array(counts)], schema=sent_schema(rows.schema)
    )


def _carrier(schema: pa.Schema, records: int) -> pa.RecordBatch:
    """One row of ``schema`` that carries only a count of ``records``.

    No step is called ``""``, so the plan's filters on ``to`` drop it; every other non-null
    column gets an empty value (0, empty text, bytes or list).
    """
    empty = {"string": "", "binary": b""}
    columns = []
    for field in schema:
        if field.nullable:
            columns.append(pa.nulls(1, field.type))
        elif pa.types.is_list(field.type):
            columns.append(pa.array([[]], field.type))
        else:
            value = empty.get(str(field.type), 0)
            columns.append(pa.array([value], field.type))
    return _with_records(pa.RecordBatch.from_arrays(columns, schema=schema), records)


class ShippedFrontStage:
    """A :class:`FrontWork` as its option value, unpacked only where it runs: a read task.

    A front's reader also travels to processes that only plan (Spark starts a new Python
    process per streaming query for the source's offsets): unpacking the stage there, its
    graph and every module it needs, was a sixth of the query's start. Pickled, it is the
    option value and the payload column's name; ``stage`` unpacks it once per process.
    """

    def __init__(self, value: str) -> None:
        self.value = value
        self._stage: FrontWork | None = FrontWork.decode(value)
        self.payload = self._stage.payload  #: known without unpacking, for ``check``
        self.packs = self._stage.packs  #: known without unpacking, for the schema
        self.blocks = self._stage.blocks  #: likewise

    @property
    def stage(self) -> FrontWork:
        """The stage (or the empty graph's render), unpacked at the first use in this process."""
        if self._stage is None:
            self._stage = FrontWork.decode(self.value)
        return self._stage

    def check(self, fields: list[pa.Field], step: str) -> None:
        """At query start: the payload column exists and is text or bytes."""
        kinds = {f.name: f.type for f in fields}
        kind = kinds.get(self.payload)
        if kind is None or not (pa.types.is_string(kind) or pa.types.is_binary(kind)):
            found = f"{self.payload} {kind}" if kind is not None else ", ".join(kinds)
            raise ConfigError(
                step, "payload", found, "a string or binary payload column of the front"
            )

    def sent_schema(self) -> pa.Schema:
        """What the front sends: the stage's rows (items, packed, blocks) and :data:`RECORDS`."""
        rows = BLOCK_SCHEMA if self.blocks else PACKED_SCHEMA if self.packs else ITEM_SCHEMA
        return sent_schema(rows)  # known without unpacking the stage

    def read(self, blocks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The stage's :meth:`FrontWork.read`."""
        return self.stage.read(blocks)

    def sent(self, blocks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The stage's :meth:`FrontWork.sent`: what the front's read task sends."""
        return self.stage.sent(blocks)

    def __getstate__(self) -> dict[str, Any]:
        """The option value, the payload column and how rows leave; not the stage."""
        return {
            "value": self.value,
            "payload": self.payload,
            "packs": self.packs,
            "blocks": self.blocks,
            "_stage": None,
        }
