"""A fused front's sent rows count the records they stand for (``FrontStage.sent``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from flamestream import Dataflow, map_reduce
from flamestream.spark import SparkGraph
from flamestream.spark.exec.general.front_stage import RECORDS, ShippedFrontStage


def lines(start: int, texts: list[str]) -> pa.RecordBatch:
    n = len(texts)
    return pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(range(start, start + n), pa.int64()),
            "front": pa.array([0] * n, pa.int32()),
            "source": pa.array(["in.txt"] * n),
            "position": pa.array(range(start, start + n), pa.int64()),
            "value": pa.array(texts, pa.string()),
        }
    )


def counting() -> Dataflow:
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=int.__add__))
    return flow


def dropping() -> Dataflow:
    flow = Dataflow("none")
    flow.sink("out", flow.filter("none", flow.source("lines"), lambda line: line == "x"))
    return flow


@pytest.mark.parametrize("partitions", [0, 3])
@pytest.mark.parametrize("release", ["every", "latest"])
def test_sent_rows_count_every_record_once(partitions: int, release: str):
    stage = SparkGraph(counting(), release=release)._front_stage("value", partitions)
    blocks = [lines(0, ["a b", "", "b c a"]), lines(3, ["   "]), lines(4, ["c", "d d"])]
    sent = list(stage.sent(iter(blocks)))
    shipped = ShippedFrontStage(stage.encode())
    assert all(b.schema == shipped.sent_schema() for b in sent)
    assert sum(pc.sum(b.column(RECORDS)).as_py() for b in sent) == 6
    # the same rows as the stage's read, the count aside
    read = list(stage.read(iter(blocks)))
    assert [b.drop_columns([RECORDS]).to_pylist() for b in sent] == [b.to_pylist() for b in read]


def test_records_that_send_nothing_are_counted_by_a_row_no_step_reads():
    stage = SparkGraph(dropping())._front_stage("value")
    sent = list(stage.sent(iter([lines(0, ["a", "b"]), lines(2, ["c"])])))
    assert [b.column("to").to_pylist() for b in sent] == [[""]]
    assert sent[0].column(RECORDS).to_pylist() == [3]
    assert sent[0].schema == ShippedFrontStage(stage.encode()).sent_schema()
