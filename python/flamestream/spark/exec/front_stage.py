"""A graph's first stage run inside a front's read tasks: rows leave Python once, as items.

Without it, a front's records leave its Python reader as front rows, become item rows in
Spark SQL, and enter Python again for the graph's first stage (or for their shuffle keys):
two crossings of the Python/JVM boundary per record, and a Python worker more per task.
``SparkGraph`` hands the fronts a ``FrontStage`` (in the internal ``graphStage`` option, see
:mod:`.shipping`) when ``apply`` is given readers; the front's ``read`` then yields the item
rows that stage sends on, ready for the shuffle. The rows are the same as the unfused path's:
the front rows are turned into items exactly as ``SparkGraph._items`` does in SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import ConfigError
from flamestream.spark.exec.blocks import blocked
from flamestream.spark.exec.items import BYTES_TAG, ITEM_SCHEMA, TEXT_TAG
from flamestream.spark.exec.shipping import ship, unship
from flamestream.spark.exec.stateless import StageRunner

#: A combining stage runs over this many front rows of a read task at once, at most ...
COMBINE_ROWS = 1_000_000
#: ... or this many bytes of them (whichever comes first). A stage that runs in Python makes
#: objects for every word of a run: 8 MiB of text is about 2 M words, some 0.4 GiB of them.
COMBINE_BYTES = 8 * 2**20


class FrontStage:
    """Front rows (meta + payload columns) to the item rows a graph's first stage sends on.

    ``runner`` is the stage's ``StageRunner`` (runs on executors, in the front's read task;
    its functions must be deterministic, as every step's are). ``entry`` is the step the
    source feeds, ``payload`` the front column that carries the payload. ``packs``: the rows
    leave packed (:mod:`.packed`; planned by ``ExecutionPlan.packed_into``). ``blocks``: the
    key partitions of the keyed stage the rows go to, when they leave in blocks, one per
    partition (:mod:`.blocks`; planned by ``ExecutionPlan.blocked_into``); 0: as rows.
    """

    def __init__(
        self, runner: StageRunner, entry: str, payload: str, packs: bool = False, blocks: int = 0
    ) -> None:
        self.runner = runner
        self.entry = entry
        self.payload = payload
        self.packs = packs
        self.blocks = blocks

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
        counted = self.runner.counted
        text = rows.column(self.payload)
        if counted is not None and pa.types.is_string(text.type):
            made = counted.of_front(rows, self.entry, text, packed)
            if made is not None:
                return made
        entering = self._entering(rows)
        return self.runner.packed(entering) if packed else self.runner.run(entering)

    def _entering(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        """Front rows as items entering the graph: empty trace, tagged payload, no flags."""
        n = rows.num_rows
        value = rows.column(self.payload)
        tag = TEXT_TAG if pa.types.is_string(value.type) else BYTES_TAG
        payload = pc.binary_join_element_wise(
            pa.scalar(tag, pa.binary()), value.cast(pa.binary()), pa.scalar(b"", pa.binary())
        )
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
            "value": pa.nulls(n, pa.string()),
        }
        return pa.RecordBatch.from_arrays(list(columns.values()), schema=ITEM_SCHEMA)

    def encode(self) -> str:
        """The stage as an option value."""
        return ship(self)

    @staticmethod
    def decode(value: str) -> FrontStage:
        """The stage an option value carries (made by :meth:`encode`, in ``apply``)."""
        stage = unship(value)
        assert isinstance(stage, FrontStage)  # noqa: S101
        return stage


class ShippedFrontStage:
    """A :class:`FrontStage` as its option value, unpacked only where it runs: a read task.

    A front's reader also travels to processes that only plan (Spark starts a new Python
    process per streaming query for the source's offsets): unpacking the stage there, its
    graph and every module it needs, was a sixth of the query's start. Pickled, it is the
    option value and the payload column's name; ``stage`` unpacks it once per process.
    """

    def __init__(self, value: str) -> None:
        self.value = value
        self._stage: FrontStage | None = FrontStage.decode(value)
        self.payload = self._stage.payload  #: known without unpacking, for ``check``
        self.packs = self._stage.packs  #: known without unpacking, for the schema
        self.blocks = self._stage.blocks  #: likewise

    @property
    def stage(self) -> FrontStage:
        """The stage, unpacked at the first use in this process."""
        if self._stage is None:
            self._stage = FrontStage.decode(self.value)
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

    def read(self, blocks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The stage's :meth:`FrontStage.read`."""
        return self.stage.read(blocks)

    def __getstate__(self) -> dict[str, Any]:
        """The option value, the payload column and how rows leave; not the stage."""
        return {
            "value": self.value,
            "payload": self.payload,
            "packs": self.packs,
            "blocks": self.blocks,
            "_stage": None,
        }
