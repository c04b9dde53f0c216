"""Packed item rows (``exec.shuffle.packed``): what packing keeps, and where the plan packs."""

from __future__ import annotations

from operator import add
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, count, map_reduce
from flamestream.spark.exec.general.items import ITEM_FIELDS, ITEM_SCHEMA
from flamestream.spark.exec.shuffle.packed import PACKED_SCHEMA, is_packed, pack, unpack
from flamestream.spark.plan.execution import plan_execution

from ..examples import examples

ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "ts": st.integers(0, 3),
            "front": st.integers(0, 1),
            "trace": st.binary(max_size=2),
            "flags": st.sampled_from([0, 1, 2]),
            "source": st.sampled_from(["a", "b", None]),
            "position": st.integers(0, 3) | st.none(),
            "to": st.sampled_from(["g", "h"]),
            "key": st.sampled_from([b"k", b"l", None]),
            "payload": st.sampled_from([b"p", b"q", None]),
            "value": st.sampled_from(["v", None]),
        }
    ),
    max_size=30,
)


def _rows(table: pa.Table | pa.RecordBatch) -> list[tuple[Any, ...]]:
    return [tuple(row[f.name] for f in ITEM_FIELDS) for row in table.to_pylist()]


@settings(max_examples=examples(200), deadline=None)
@given(rows=ROWS)
def test_unpacking_gives_back_every_row_once(rows: list[dict[str, Any]]) -> None:
    """Packed and unpacked, rows come back as they were (in another order): one packed row
    per distinct set of shared columns, its occurrences in their order in the batch."""
    batch = pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA)
    packed = pack(batch)
    assert packed.schema == PACKED_SCHEMA and is_packed(packed.schema)
    assert not is_packed(batch.schema)
    shared = [f.name for f in ITEM_FIELDS if f.name not in ("ts", "trace", "position")]
    assert packed.num_rows == len({tuple(row[c] for c in shared) for row in rows})
    back = unpack(packed)
    assert sorted(_rows(back), key=repr) == sorted(_rows(batch), key=repr)
    if packed.num_rows > 1:  # a slice of a batch unpacks to its own rows
        tail = unpack(packed.slice(1))
        assert sorted(_rows(tail), key=repr) == sorted(
            _rows(back)[len(packed["ts"][0]) :], key=repr
        )
    for row in packed.to_pylist():  # occurrences keep the batch's order
        mine = [r for r in rows if all(r[c] == row[c] for c in shared)]
        assert row["ts"] == [r["ts"] for r in mine]
        assert row["trace"] == [r["trace"] for r in mine]


def test_unpacking_repeats_other_columns_with_their_rows() -> None:
    """The key partition Spark SQL adds to the shuffled rows stays with each occurrence."""
    batch = pa.RecordBatch.from_pylist(
        [
            {"ts": t, "front": 0, "trace": b"", "flags": 0, "to": "g", "key": k, "payload": k}
            for t, k in [(1, b"a"), (2, b"b"), (3, b"a")]
        ],
        schema=ITEM_SCHEMA,
    )
    packed = pack(batch)
    packed = packed.append_column("part", pa.array([7, 9], pa.int32()))
    back = unpack(packed)
    assert [(r["ts"], r["key"], r["part"]) for r in back.to_pylist()] == [
        (1, b"a", 7), (3, b"a", 7), (2, b"b", 9)
    ]  # fmt: skip


def _graph(*, sink_too: bool = False, opaque: bool = False) -> Any:
    flow = Dataflow("packing")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    if sink_too:  # the first stage also sends its words to a sink
        words, copies = flow.broadcast("both", words, 2)
        flow.sink("words", flow.map("copy", copies, str))
    if opaque:
        counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=add)
    else:
        counts = count(flow, "count", words)
    flow.sink("out", flow.map("render", counts, str))
    return flow.build()


def test_the_plan_packs_only_what_goes_to_one_keyed_stage_and_nothing_else() -> None:
    every = plan_execution(_graph(), release="every")
    keyed = next(s for s in every.stages if s.grouping is not None)
    assert every.packed_into() == keyed.index
    assert plan_execution(_graph(opaque=True), release="every").packed_into() == keyed.index
    # combined before the shuffle: nothing left to pack
    assert plan_execution(_graph(), release="latest").packed_into() is None
    # the fronts' stage feeds a sink as well: its rows must stay item rows
    assert plan_execution(_graph(sink_too=True), release="every").packed_into() is None
    # an elastic layout routes the rows before the shuffle (a pass that reads item rows)
    assert plan_execution(_graph(), release="every", elastic=True).packed_into() is None
    # the fronts run nothing: their rows are front rows
    assert plan_execution(_graph(), release="every", fusion=False).packed_into() is None


@settings(max_examples=examples(100), deadline=None)
@given(rows=ROWS, data=st.data())
def test_a_keyed_task_unpacks_the_columns_it_reads_as_they_are_unpacked_whole(
    rows: list[dict[str, Any]], data: st.DataObject
) -> None:
    """``_items_of`` with the columns a keyed task reads gives those columns of the rows
    all columns unpacked give, in the same order."""
    from flamestream.spark.exec.general.keyed import _INPUT_COLUMNS, _items_of

    if not rows:
        return
    packed = pack(pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA))
    columns = [*_INPUT_COLUMNS, *data.draw(st.sampled_from([[], ["key"]]))]
    (some,) = _items_of([packed], columns)
    (whole,) = _items_of([packed])
    assert some.schema.names == columns
    assert some.to_pylist() == whole.select(columns).to_pylist()
