"""Item rows through the shuffle in blocks: Spark's hash in numpy, blocks that round-trip."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, count
from flamestream.spark import SparkGraph
from flamestream.spark.exec.general.items import ITEM_SCHEMA
from flamestream.spark.exec.general.keyed import _items_of
from flamestream.spark.exec.general.partitioning import partition_of, spark_hash, spark_hashes
from flamestream.spark.exec.shuffle import blocks
from flamestream.spark.exec.shuffle.blocks import BLOCK_SCHEMA, blocked, is_blocked, opened
from flamestream.spark.exec.shuffle.packed import pack

keys = st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=60)


@given(keys, st.integers(0, 5), st.integers(0, 5))
def test_spark_hashes_hash_every_key_as_spark_hash_does(values: list, start: int, cut: int):
    """Null keys hash to the seed, as Spark's hash() of a null; slices hash their own keys."""
    array = pa.array(values, pa.binary()).slice(start, max(0, len(values) - start - cut))
    expected = [42 if v is None else spark_hash(v) for v in array.to_pylist()]
    assert spark_hashes(array).tolist() == expected


def _item_rows(rows: list[tuple[int, str, bytes | None]]) -> pa.RecordBatch:
    n = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([ts for ts, _, _ in rows], pa.int64()),
            pa.array([0] * n, pa.int32()),
            pa.array([b""] * n, pa.binary()),
            pa.array([0] * n, pa.int8()),
            pa.array(["in.txt"] * n, pa.string()),
            pa.array(range(n), pa.int64()),
            pa.array([to for _, to, _ in rows], pa.string()),
            pa.array([key for _, _, key in rows], pa.binary()),
            pa.array([b"s" + (key or b"") for _, _, key in rows], pa.binary()),
            pa.nulls(n, pa.string()),
        ],
        schema=ITEM_SCHEMA,
    )


item_rows = st.lists(
    st.tuples(
        st.integers(0, 10**6),
        st.sampled_from(["a.merge", "b.merge"]),
        st.one_of(st.none(), st.binary(max_size=12)),
    ),
    min_size=1,
    max_size=80,
)


@settings(deadline=None)
@given(item_rows, st.integers(1, 5), st.sampled_from([None, 64, 300]))
def test_blocks_hold_each_row_once_in_the_partition_its_key_hashes_to(
    rows: list, partitions: int, block_bytes: int | None
):
    """Each block row lands (by Spark's hash of its own key) in the partition of its rows'
    keys, carries their destination, keeps their order, and opening the blocks gives back
    every row once; blocks above the size bound are cut, never emptied."""
    items = _item_rows(rows)
    with pytest.MonkeyPatch.context() as patch:
        if block_bytes is not None:
            patch.setattr(blocks, "BLOCK_BYTES", block_bytes)
        made = blocked(items, partitions)
    assert made.schema == BLOCK_SCHEMA and is_blocked(made.schema)
    found = []
    for row in made.to_pylist():
        (block,) = opened([pa.RecordBatch.from_pylist([row], schema=BLOCK_SCHEMA)])
        assert block.num_rows > 0
        part = partition_of(row["key"], partitions)
        got = block.to_pylist()
        assert {r["to"] for r in got} == {row["to"]}
        assert {
            42 % partitions if r["key"] is None else partition_of(r["key"], partitions) for r in got
        } == {part}
        positions = [r["position"] for r in got]
        assert positions == sorted(positions)  # in the order the rows came
        found.extend(got)
    assert sorted(found, key=lambda r: r["position"]) == items.to_pylist()
    if block_bytes is None:  # one block per destination and partition
        seen = [(r["to"], r["key"]) for r in made.to_pylist()]
        assert len(seen) == len(set(seen))


def test_a_keyed_task_reads_blocks_of_packed_rows_as_the_rows_themselves():
    items = _item_rows([(t, "a.merge", bytes([t % 3])) for t in range(30)])
    packed = pack(items)
    rows = _items_of([blocked(packed, 2)])
    expected = sorted(items.to_pylist(), key=lambda r: r["position"])
    got = [r for t in rows for r in t.select(ITEM_SCHEMA.names).to_pylist()]
    assert sorted(got, key=lambda r: r["position"]) == expected


def test_blocks_too_big_for_a_binary_array_fail_plainly(monkeypatch: pytest.MonkeyPatch):
    """A binary array's offsets are 32-bit: blocks that would overflow them raise, rather
    than wrap around into blocks that open as other bytes."""
    items = _item_rows([(t, "a.merge", bytes([t % 3])) for t in range(30)])
    assert len(opened([blocked(items, 2)])) == 2
    monkeypatch.setattr(blocks, "_MOST_BYTES", 1000)
    with pytest.raises(OverflowError, match="more than a binary array holds"):
        blocked(items, 2)


def _word_count() -> Dataflow:
    flow = Dataflow("words")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", flow.map("render", count(flow, "count", words), str))
    return flow


@pytest.mark.parametrize("release", ["latest", "every"])
def test_word_count_fronts_send_blocks_to_the_keyed_stage(release: str):
    """Both releases block (every packs inside the blocks); the blocks hold the stage's rows."""
    graph = SparkGraph(_word_count(), release=release)
    assert graph.plan.blocked_into() is not None
    assert (graph.plan.packed_into() is not None) == (release == "every")
    assert "in blocks, one per key partition" in graph.plan.describe()
    lines = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array([0, 1], pa.int64()),
            "front": pa.array([0, 0], pa.int32()),
            "source": pa.array(["in.txt"] * 2),
            "position": pa.array([0, 1], pa.int64()),
            "value": pa.array(["the cat", "the dog the"], pa.string()),
        }
    )
    as_rows = list(graph._front_stage("value").read(iter([lines])))
    as_blocks = list(graph._front_stage("value", 3).read(iter([lines])))
    assert all(b.schema == BLOCK_SCHEMA for b in as_blocks)
    opened_rows = _items_of([b for b in as_blocks])
    expected = _items_of(as_rows)

    def ordered(tables: list[pa.RecordBatch]) -> list[dict]:
        found = [r for t in tables for r in t.select(ITEM_SCHEMA.names).to_pylist()]
        return sorted(found, key=lambda r: (r["ts"], r["trace"]))

    assert ordered(opened_rows) == ordered(expected) and expected
    counts = np.bincount([partition_of(r["key"], 3) for r in ordered(expected)], minlength=3)
    assert sum(len(b) for b in as_blocks) == np.count_nonzero(counts)
