"""A sum's reduced items as Arrow columns, and ``Template`` tails that render them in Arrow.

A keyed stage hands the stateless stages after it (its tails, :mod:`.tails`) the payloads it
made. :class:`~.summed.SummedCycle` knows each leaving row's ``Reduced(key, value)`` as two
columns (the key's text, the sum): it hands them as :class:`ReducedColumns`, which become
Python objects only for a tail that asks for them.

A tail that is one ``Template`` map into a sink, with plain ``{key}`` and ``{value}`` fields
(:meth:`~flamestream.graph.template.Template.plain_parts`) and the default render, needs no
object: :class:`RenderedTail` joins the template's literals, the keys and the sums cast to
text (Arrow's decimal text of an int64 is ``str`` of the int). Its rows are those the Python
path makes, byte for byte: ``tests/unit/test_fastpath.py`` compares them on random batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import InvariantError
from flamestream.graph.mapreduce import Reduced
from flamestream.model import LocalTime
from flamestream.spark.exec.general.items import ITEM_SCHEMA, encode_trace, extended_traces
from flamestream.spark.plan.paths import TemplateRender

#: What a stateless step appends to the trace of its only output: ``(0, 0)``.
_MAP_SUFFIX = np.frombuffer(encode_trace((LocalTime(0, 0),)), np.uint8).reshape(1, -1)


class ReducedColumns:
    """The ``Reduced(key, value)`` payloads of rows: a text column and an int64 column.

    The keys may come as ``codes`` into a ``dictionary`` of distinct keys (a sum's rows:
    :meth:`coded`), made into a column only when read (``keys``): a render joins the
    template's text around a key once per distinct key.

    ``traced``: the trace suffix the rows' traces already end with, appended for the tail
    that takes them (``Exits.suffixes``); empty if none.
    """

    def __init__(self, keys: pa.Array | None, values: pa.Array, traced: bytes = b"") -> None:
        self._keys = keys
        self.values = values
        self.traced = traced
        self._objects: list[Any] | None = None
        #: the keys as a dictionary and each row's index in it (``coded``), else None
        self.coding: tuple[pa.Array, np.ndarray] | None = None

    @classmethod
    def coded(
        cls, dictionary: pa.Array, codes: np.ndarray, values: pa.Array, traced: bytes = b""
    ) -> ReducedColumns:
        """Payloads whose keys are ``dictionary[codes]``."""
        made = cls(None, values, traced)
        made.coding = (dictionary, codes)
        return made

    @property
    def keys(self) -> pa.Array:
        """The keys, a text column (taken from the dictionary once, if coded)."""
        if self._keys is None:
            assert self.coding is not None  # noqa: S101
            dictionary, codes = self.coding
            self._keys = dictionary.take(pa.array(codes))
        return self._keys

    def __len__(self) -> int:
        return len(self.values)

    def filter(self, mask: pa.Array) -> ReducedColumns:
        """The payloads of the rows ``mask`` selects."""
        values = self.values.filter(mask)
        if self.coding is not None and self._keys is None:
            dictionary, codes = self.coding
            picked = mask.to_numpy(zero_copy_only=False).astype(bool)
            return ReducedColumns.coded(dictionary, codes[picked], values, self.traced)
        return ReducedColumns(self.keys.filter(mask), values, self.traced)

    def objects(self) -> list[Any]:
        """The payloads as ``Reduced`` objects (made once)."""
        if self._objects is None:
            self._objects = list(map(Reduced, self.keys.to_pylist(), self.values.to_pylist()))
        return self._objects


def item_rows(meta: list[pa.Array], to: str, value: pa.Array | None = None) -> pa.RecordBatch:
    """Item rows from ``meta`` (ts, front, trace, flags, source, position), all going ``to``.

    No key and no payload; ``value`` the rendered text (rows going to a sink) or none.
    """
    rows = len(meta[0])
    columns = [
        *meta,
        pa.repeat(pa.scalar(to, pa.string()), rows),
        pa.nulls(rows, pa.binary()),
        pa.nulls(rows, pa.binary()),
        value if value is not None else pa.nulls(rows, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ITEM_SCHEMA)


class RenderedTail:
    """A tail stage that is one plain ``Template`` map into a sink, run on reduced columns."""

    #: what the map appends to each trace
    suffix = _MAP_SUFFIX.tobytes()

    def __init__(self, shape: TemplateRender) -> None:
        self.parts = shape.parts  #: the template's (literal, field) pairs
        self.sink = shape.sink

    def run(self, batch: pa.RecordBatch, payloads: ReducedColumns) -> pa.RecordBatch | None:
        """The rows the stage sends its sink for ``batch``; None if a row is flagged.

        Traces already ending with the map's suffix (``payloads.traced``) are kept as they are.
        """
        flags = batch.column("flags")
        flagged = pc.any(pc.not_equal(flags, 0)).as_py()
        if payloads.traced not in (b"", self.suffix) or (flagged and payloads.traced):
            # only a sum's plain rows come traced; the Python path would extend them again
            msg = f"rows handed to {self.sink!r}'s render traced with {payloads.traced!r}"
            raise InvariantError(msg)
        if flagged:
            return None  # tombstones and replays: the Python path's rules
        texts = self.rendered(payloads)
        traces = batch.column("trace")
        if not payloads.traced:
            traces = extended_traces(traces, _MAP_SUFFIX)
        meta = [batch.column("ts"), batch.column("front"), traces, flags]
        meta += [batch.column("source"), batch.column("position")]
        return item_rows(meta, self.sink, texts)

    def rendered(self, payloads: ReducedColumns) -> pa.Array:
        """Each payload's text, as ``Template.__call__`` renders it.

        The pieces between two ``{value}`` fields hold keys and literals only: with the keys
        coded, such a run is joined once per distinct key and taken by row, one piece.
        """
        pieces: list[Any] = []
        run: list[Any] = []  # the pieces since the last value: literals and keys
        for literal, field in self.parts:
            if literal:
                run.append(pa.scalar(literal, pa.string()))
            if field == "key":
                run.append(_KEY)
            elif field == "value":
                pieces += _keyed_run(run, payloads)
                run = []
                pieces.append(pc.cast(payloads.values, pa.string()))
            elif field is not None:
                msg = f"a plain template's field {field!r}: key or value"
                raise InvariantError(msg)
        pieces += _keyed_run(run, payloads)
        if not any(isinstance(piece, pa.Array) for piece in pieces):  # no field at all
            pieces.append(pa.array([""] * len(payloads), pa.string()))
        return pc.binary_join_element_wise(*pieces, _EMPTY)


#: A ``{key}`` field in a run of pieces (``RenderedTail.rendered``).
_KEY = object()
_EMPTY = pa.scalar("", pa.string())


def _keyed_run(run: list[Any], payloads: ReducedColumns) -> list[Any]:
    """A run of literals and ``{key}`` fields as pieces to join: joined per distinct key."""
    if not any(piece is _KEY for piece in run):
        return run
    if payloads.coding is None or len(run) == 1:
        return [payloads.keys if piece is _KEY else piece for piece in run]
    dictionary, codes = payloads.coding
    joined = [dictionary if piece is _KEY else piece for piece in run]
    return [pc.binary_join_element_wise(*joined, _EMPTY).take(pa.array(codes))]
