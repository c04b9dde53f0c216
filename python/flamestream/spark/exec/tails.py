"""Stateless stages run in a keyed stage's tasks, on its output, without a pass of their own.

The plan (:func:`flamestream.spark.plan.execution.tails_of_keyed`) names the stateless stages
that read only a keyed stage's output. Run as their own ``mapInArrow`` they would cost each
row two more crossings of the Python/JVM boundary; here the keyed stage's output batches go
straight through them in the same Python worker. Rows for other destinations pass untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.spark.exec.stateless import StageRunner


class WithTails:
    """A keyed stage's function (``mapInArrow``'s), then its tails on what it yields."""

    def __init__(
        self,
        keyed: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
        tails: Sequence[StageRunner],
    ) -> None:
        self.keyed = keyed
        self.tails = list(tails)
        #: per tail, the steps whose rows it takes (its entries), as an Arrow value set
        self._entries = [pa.array(tail.stage.entries, pa.string()) for tail in self.tails]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The keyed stage's output with every tail's rows run through the tail."""
        for batch in self.keyed(batches):
            yield from self.through_tails(batch)

    def through_tails(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """``batch``'s rows for no tail as they are, then each tail's output, in stage order.

        A tail's output may feed a later tail (stages come producers first), never an earlier.
        """
        pending = [batch]
        for tail, entries in zip(self.tails, self._entries, strict=True):
            kept: list[pa.RecordBatch] = []
            for rows in pending:
                mine = pc.is_in(rows.column("to"), value_set=entries)
                if not pc.any(mine).as_py():
                    kept.append(rows)
                    continue
                others = rows.filter(pc.invert(mine))
                if others.num_rows:
                    kept.append(others)
                out = tail.run(rows.filter(mine))
                if out.num_rows:
                    kept.append(out)
            pending = kept
        yield from (rows for rows in pending if rows.num_rows)
