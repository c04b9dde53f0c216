"""The empty graph's rows: rendered as the reference runtime renders, the same in blocks."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from flamestream import Dataflow
from flamestream.spark import SparkGraph
from flamestream.spark.exec.general.front_stage import RECORDS
from flamestream.spark.exec.general.items import ITEM_SCHEMA, encode_payload
from flamestream.spark.exec.general.passthrough import (
    OpenedBlocks,
    PassthroughFront,
    RenderPass,
    rendered_values,
)
from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order

texts = st.lists(st.text(max_size=12), max_size=30)
payloads = st.lists(st.one_of(st.text(max_size=8), st.binary(max_size=8)), max_size=30)


def front_rows(values: list[Any], start: int = 0) -> pa.RecordBatch:
    """Files-front rows of ``values`` (text or bytes), ts from ``start``."""
    n = len(values)
    kind = pa.binary() if values and isinstance(values[0], bytes) else pa.string()
    return pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(range(start, start + n), pa.int64()),
            "front": pa.array([0] * n, pa.int32()),
            "source": pa.array(["in.txt"] * n, pa.string()),
            "position": pa.array(range(start, start + n), pa.int64()),
            "value": pa.array(values, kind),
        }
    )


@given(payloads, st.integers(0, 3))
def test_rendered_values_are_the_default_render_of_each_payload(values: list[Any], cut: int):
    """Text sliced in Arrow, bytes decoded with bad bytes escaped: as ``render_default``."""
    encoded = pa.array([encode_payload(v) for v in values], pa.binary())
    encoded = encoded.slice(min(cut, len(values)))  # a Spark batch may be a slice
    want = [render_default(v) for v in values[min(cut, len(values)) :]]
    assert rendered_values(encoded, None).to_pylist() == want
    assert rendered_values(encoded, repr).to_pylist() == [repr(v) for v in values[cut:]]


@given(st.lists(texts, max_size=4), st.booleans())
def test_front_rows_sent_in_blocks_are_the_reference_runtimes_release(
    batches: list[list[str]], upper: bool
):
    """Whatever the batches, the opened blocks hold the released rows, in order, with the
    values the reference runtime renders, and the records counted once."""
    flow = Dataflow("passthrough")
    flow.sink("out", flow.source("lines"))
    render = str.upper if upper else None
    rows, start = [], 0
    for values in batches:
        rows.append(front_rows(values, start))
        start += len(values)
    sent = list(PassthroughFront("out", "value", render, in_blocks=True).sent(iter(rows)))
    assert sum(b.column(RECORDS).to_numpy().sum() for b in sent) == start
    blocks = [b.drop_columns([RECORDS]) for b in sent]
    opened = [r for b in blocks for r in OpenedBlocks()(iter([b]))]
    got = pa.Table.from_batches(opened, ITEM_SCHEMA).to_pylist()
    every = [v for values in batches for v in values]
    result = run_in_order(flow, {0: list(enumerate(every))})
    want = [(render or render_default)(r.payload) for r in result.released("out")]
    assert [r["value"] for r in got] == want
    assert [(r["ts"], r["position"], r["to"], r["trace"], r["flags"]) for r in got] == [
        (n, n, "out", b"", 0) for n in range(start)
    ]
    plain = PassthroughFront("out", "value", render, in_blocks=False)
    unblocked = [r for b in plain.sent(iter(rows)) for r in b.drop_columns([RECORDS]).to_pylist()]
    assert unblocked == got


@given(payloads)
def test_a_loaded_dataframes_items_get_the_same_values(values: list[Any]):
    """The render pass over item rows made in SQL (no key column) renders as the front does."""
    n = len(values)
    items = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(range(n), pa.int64()),
            "front": pa.array([0] * n, pa.int32()),
            "trace": pa.array([b""] * n, pa.binary()),
            "flags": pa.array([0] * n, pa.int8()),
            "source": pa.array([None] * n, pa.string()),
            "position": pa.array([None] * n, pa.int64()),
            "to": pa.array(["out"] * n, pa.string()),
            "payload": pa.array([encode_payload(v) for v in values], pa.binary()),
            "value": pa.array([None] * n, pa.string()),
        }
    )
    (rendered,) = RenderPass(None)(iter([items]))
    assert rendered.schema == ITEM_SCHEMA
    assert rendered.column("value").to_pylist() == [render_default(v) for v in values]


def test_the_plan_names_the_passthrough():
    flow = Dataflow("passthrough")
    flow.sink("out", flow.source("lines"))
    plan = SparkGraph(flow).plan
    assert plan.passthrough and "path passthrough" in plan.describe()
    assert plan.crossings() == 4 and plan.crossings(front=True, sink=True) == 2
    other = Dataflow("one-step")
    other.sink("out", other.map("m", other.source("lines"), str.upper))
    assert not SparkGraph(other).plan.passthrough
