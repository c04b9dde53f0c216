"""Stateless stages run in a keyed stage's tasks, on its output, without a pass of their own.

The plan (:func:`flamestream.spark.plan.execution.tails_of_keyed`) names the stateless stages
that read only a keyed stage's output. Run as their own ``mapInArrow`` they would cost each
row two more crossings of the Python/JVM boundary; here the keyed stage's output batches go
straight through them in the same Python worker. Rows for other destinations pass untouched.

The keyed stage hands the tails its payloads as the objects it made (its exits'
``handed`` destinations): encoding them for the rows and decoding them again a moment later
was a third of the tails' time. Payloads are values: no step may change its input in place,
here or anywhere in a graph (the reference runtime passes objects on the same way).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from flamestream.spark.exec.declared.rendered import ReducedColumns
from flamestream.spark.exec.general.keyed import KeyedRunner
from flamestream.spark.exec.general.stateless import Handed, StageRunner

#: Rows and, when the keyed stage handed them, their payload objects (by row).
_Rows = tuple[pa.RecordBatch, Handed | None]


class WithTails:
    """A keyed stage's function (``mapInArrow``'s), then its tails on what it yields."""

    def __init__(self, keyed: KeyedRunner, tails: Sequence[StageRunner]) -> None:
        self.keyed = keyed
        self.tails = list(tails)
        #: per tail, the steps whose rows it takes (its entries), as an Arrow value set
        self._entries = [pa.array(tail.stage.entries, pa.string()) for tail in self.tails]
        # every row for a tail's entry goes through that tail here: hand it the objects
        keyed.exits.handed = frozenset(e for tail in self.tails for e in tail.stage.entries)
        keyed.exits.suffixes = {
            entry: tail.rendered.suffix
            for tail in self.tails
            if tail.rendered is not None
            for entry in tail.stage.entries
        }

    def keep_only(self, columns: Collection[str]) -> None:
        """The rows yielded are read for ``columns`` only (``KeyedRunner.keep_only``)."""
        self.keyed.keep_only(columns)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The keyed stage's output with every tail's rows run through the tail."""
        for batch in self.keyed(batches):
            yield from self.through_tails(batch, self.keyed.handed_payloads)

    def through_tails(
        self, batch: pa.RecordBatch, payloads: Handed | None = None
    ) -> Iterator[pa.RecordBatch]:
        """``batch``'s rows for no tail as they are, then each tail's output, in stage order.

        A tail's output may feed a later tail (stages come producers first), never an earlier.
        ``payloads``: the rows' payloads where the keyed stage handed them (by row).
        """
        pending: list[_Rows] = [(batch, payloads)]
        for tail, entries in zip(self.tails, self._entries, strict=True):
            kept: list[_Rows] = []
            for rows, objects in pending:
                mine = pc.is_in(rows.column("to"), value_set=entries)
                if not pc.any(mine).as_py():
                    kept.append((rows, objects))
                    continue
                if pc.all(mine).as_py():  # the usual case: no copy of the rows
                    out = tail.run(rows, objects)
                else:
                    others = rows.filter(pc.invert(mine))
                    if others.num_rows:
                        kept.append((others, _where(objects, pc.invert(mine))))
                    out = tail.run(rows.filter(mine), _where(objects, mine))
                if out.num_rows:
                    kept.append((out, None))
            pending = kept
        yield from (rows for rows, _ in pending if rows.num_rows)


def _where(objects: Handed | None, mask: pa.Array) -> Handed | None:
    """The payloads of the rows ``mask`` selects (None: none handed)."""
    if objects is None:
        return None
    if isinstance(objects, ReducedColumns):
        return objects.filter(mask)
    return [objects[i] for i in pc.indices_nonzero(mask).to_pylist()]
