"""Rows leaving a keyed stage (``exec.general.leaving``): what ``release="latest"`` keeps, and
what no record batch can hold."""

from __future__ import annotations

import pyarrow as pa
import pytest

from flamestream import Dataflow
from flamestream.errors import OversizedBatchError
from flamestream.model import DataItem, GlobalTime, LocalTime, Meta
from flamestream.spark.exec.general.items import MAY_INVALIDATE, TOMBSTONE
from flamestream.spark.exec.general.leaving import Leaving
from flamestream.spark.exec.general.stateless import Exits


def item(ts: int, payload: str, logical: int, *, replayed: bool = False) -> DataItem:
    return DataItem(payload, Meta(GlobalTime(ts, 0), (LocalTime(logical, 0),)), replayed)


def test_latest_keeps_each_keys_last_row_and_voids_the_replays_before_it():
    """A late item changed key a's value at ts 3 (a replay, flagged) and ts 5 came after it
    in the same batch: a=5 is a's latest; the replayed a=3 goes on as a tombstone, which drops
    the older version an earlier batch left with the barrier; b's first-time row at ts 2 is
    left out, as nothing of it was sent before."""
    leaving = Leaving()
    for it in (
        item(2, "b=1", 1),
        item(3, "a=2", 7, replayed=True),
        item(4, "b=2", 2),
        item(5, "a=3", 8, replayed=True),
    ):
        leaving.add_item("out", it)
    kept = leaving.latest(lambda payload: payload[0])
    rows = list(zip(kept.times, kept.flags, kept.payloads, strict=True))
    assert rows == [
        (3, MAY_INVALIDATE | TOMBSTONE, None),  # the voided replay, as a tombstone
        (4, 0, "b=2"),  # then each key's latest, keys in order of first sight
        (5, MAY_INVALIDATE, "a=3"),
    ]
    assert kept.traces[0] == leaving.traces[1]  # the replay's own meta: it invalidates


def test_rows_past_an_arrow_columns_2_gib_raise_a_named_error_not_a_type_error():
    """``pa.array`` makes a binary column past 2 GiB a ChunkedArray, which no record batch
    holds (a cycle's traces grow with its rounds): the error names the column, the rows and
    their destinations, and what to do. A 2 GiB column is not built here: the chunked column
    is what ``pa.array`` returns for one."""
    flow = Dataflow("sized")
    flow.sink("out", flow.map("m", flow.source("records"), str))
    exits = Exits(flow.build(), {}, str)
    rows = exits.builder()
    for n in range(3):
        rows.add("out", n, 0, lambda: (GlobalTime(1, 0), None))
    meta = [
        pa.array([1, 1, 1], pa.int64()),
        pa.array([0, 0, 0], pa.int32()),
        pa.chunked_array([[b"t"], [b"t", b"t"]], pa.binary()),  # as pa.array past 2 GiB
        pa.array([0, 0, 0], pa.int8()),
        pa.array([None] * 3, pa.string()),
        pa.array([None] * 3, pa.int64()),
    ]
    with pytest.raises(OversizedBatchError, match=r"3 rows leaving a stage for out .*'trace'"):
        rows.batch(*meta)
    meta[2] = meta[2].combine_chunks()
    assert rows.batch(*meta).num_rows == 3
