"""Item rows as the Spark runtime stores them: trace encoding order and sink-side invalidation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.model import GlobalTime, LocalTime, Meta, invalidates, lineage
from flamestream.runtime.invalidation import TraceIndex
from flamestream.spark.connector.barrier import drop_invalidated
from flamestream.spark.exec.general.items import (
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_payload,
    decode_trace,
    encode_payload,
    encode_trace,
    extended_traces,
    lineage_column,
    sorted_by_meta,
    stable_order,
)

local_times = st.builds(LocalTime, st.integers(0, 2**40), st.integers(0, 2**20))
traces = st.lists(local_times, max_size=5).map(tuple)


@given(traces, traces)
def test_encoded_traces_order_as_the_traces_do(a, b):
    assert (encode_trace(a) < encode_trace(b)) == (a < b)
    assert decode_trace(encode_trace(a)) == a


@settings(deadline=None)  # the first example imports Arrow's compute kernels
@given(
    st.lists(st.one_of(st.none(), traces), max_size=12),
    st.integers(0, 4),
    st.sampled_from(["plain", "dictionary", "chunked", "large"]),
)
def test_a_released_trace_column_is_each_traces_lineage(drawn, cut, layout):
    """On slices, nulls, dictionary-encoded and chunked columns alike."""
    column = pa.array([None if t is None else encode_trace(t) for t in drawn], pa.binary())
    column = column.slice(min(cut, len(column)))
    kept = drawn[min(cut, len(drawn)) :]
    if layout == "dictionary":
        column = column.dictionary_encode()
    elif layout == "chunked":
        column = pa.chunked_array([column.slice(0, 2), column.slice(2)], type=column.type)
    elif layout == "large":
        column = column.cast(pa.large_binary())
    released = lineage_column(column)
    if not isinstance(released, pa.ChunkedArray):
        released.validate(full=True)
    assert released.to_pylist() == [None if t is None else encode_trace(lineage(t)) for t in kept]


@given(st.one_of(st.text(), st.binary(), st.tuples(st.integers(), st.text())))
def test_payloads_round_trip(payload):
    assert decode_payload(encode_payload(payload)) == payload


def rows(*items: tuple[int, tuple[LocalTime, ...], int, str]) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([i[0] for i in items], pa.int64()),
            "front": pa.array([0] * len(items), pa.int32()),
            "trace": pa.array([encode_trace(i[1]) for i in items], pa.binary()),
            "flags": pa.array([i[2] for i in items], pa.int8()),
            "value": [i[3] for i in items],
        }
    )


def test_the_sink_drops_invalidated_versions_and_tombstones_only():
    old = (5, (LocalTime(1, 0), LocalTime(0, 0)), 0, "old version")
    new = (5, (LocalTime(2, 0), LocalTime(0, 0)), MAY_INVALIDATE, "new version")
    sibling = (5, (LocalTime(1, 0), LocalTime(0, 1)), 0, "sibling of old")
    tombstone = (7, (LocalTime(3, 0),), MAY_INVALIDATE | TOMBSTONE, None)
    dropped_by_tombstone = (7, (LocalTime(1, 0),), 0, "removed by the tombstone")
    other_time = (6, (LocalTime(1, 0),), 0, "another global time")
    table = rows(old, new, sibling, tombstone, dropped_by_tombstone, other_time)
    kept = drop_invalidated(table).column("value").to_pylist()
    # the sibling differs from the new version first in a logical time too: invalidated
    assert kept == ["new version", "another global time"]


# few distinct local times, so traces share prefixes and differ in logical or child times
small_locals = st.builds(LocalTime, st.integers(0, 3), st.integers(0, 2))
small_traces = st.lists(small_locals, max_size=4).map(tuple)


@given(st.lists(small_traces, max_size=8), st.lists(small_traces, max_size=8))
def test_the_trie_of_newer_versions_invalidates_as_the_relation_does(newer, older):
    trie: TraceIndex[None] = TraceIndex((trace, None, True) for trace in newer)
    at = GlobalTime(3, 1)
    for trace in older + newer:
        pairwise = any(invalidates(Meta(at, n), Meta(at, trace)) for n in newer)
        assert trie.invalidated(trace) == pairwise


@given(st.lists(st.tuples(st.integers(0, 2), small_traces, st.integers(0, 3)), max_size=12))
def test_the_sink_keeps_what_no_newer_version_invalidates(drawn):
    flag_of = [0, MAY_INVALIDATE, MAY_INVALIDATE, MAY_INVALIDATE | TOMBSTONE]
    items = [(ts, trace, flag_of[f], f"{n}") for n, (ts, trace, f) in enumerate(drawn)]
    kept = drop_invalidated(rows(*items)).column("value").to_pylist() if items else []
    expected = [
        value
        for ts, trace, flags, value in items
        if not flags & TOMBSTONE
        and not any(
            f & MAY_INVALIDATE
            and invalidates(Meta(GlobalTime(t, 0), n), Meta(GlobalTime(ts, 0), trace))
            for t, n, f, _ in items
        )
    ]
    assert kept == expected


def test_rows_without_flags_pass_untouched():
    table = rows((1, (LocalTime(1, 0),), 0, "a"), (1, (LocalTime(2, 0),), 0, "b"))
    assert drop_invalidated(table) is table
    assert drop_invalidated(table.drop(["flags"])).num_rows == 2


# few distinct values of each, so rows tie on ts, front, trace (and runs come out sorted);
# rarely times far apart, whose keys do not fit in one 64-bit number together
meta_rows = st.lists(
    st.tuples(
        st.integers(0, 3) | st.sampled_from([-(2**62), 2**62]),
        st.integers(-1, 1),
        st.sampled_from([b"", b"\x00", b"\x00\x01", b"\x01", b"\xff" * 12]),
    ),
    max_size=40,
)


@given(meta_rows, st.booleans(), st.booleans(), st.integers(1, 3), st.sampled_from(["a", "ab"]))
def test_rows_sort_by_meta_as_sort_by_sorts_them(metas, traced, presorted, chunks, targets):
    """``sorted_by_meta`` is the stable ``sort_by(ts, front[, trace])``, chunks and all; a
    text column of one value (``to``) comes out the same, of two values moved."""
    if presorted:
        metas = sorted(metas)
    columns = {
        "ts": pa.array([m[0] for m in metas], pa.int64()),
        "front": pa.array([m[1] for m in metas], pa.int32()),
        "row": pa.array(range(len(metas)), pa.int64()),  # tells the ties' order
        "to": pa.array([targets[n % len(targets)] for n in range(len(metas))], pa.string()),
    }
    keys = ["ts", "front"]
    if traced:
        columns["trace"] = pa.array([m[2] for m in metas], pa.binary())
        keys.append("trace")
    table = pa.table(columns)
    size = -(-len(metas) // chunks) or 1
    table = pa.Table.from_batches(table.to_batches(max_chunksize=size), table.schema)
    expected = table.sort_by([(key, "ascending") for key in keys])
    got = sorted_by_meta(table)
    assert got.schema == table.schema
    assert got.to_pylist() == expected.to_pylist()
    # a keyed stage's sort: the traces may come dictionary-encoded, the same values
    coded = sorted_by_meta(table, coded_traces=True)
    assert coded.to_pylist() == expected.to_pylist()
    if traced and len(metas) > 1 and coded is not table:  # sorted here, not by sort_by
        assert pa.types.is_dictionary(coded.schema.field("trace").type)


@given(
    st.lists(st.sampled_from([b"", b"\x01" * 12, b"\x02" * 24]), max_size=20),
    st.integers(0, 4),
    st.booleans(),
    st.integers(0, 3),
)
def test_extended_traces_append_each_rows_suffix(traces, offset, shared, width):
    """Equal-length traces (the matrix path) or not, sliced or not, one suffix or one each."""
    column = pa.array([b"x" * 12] * offset + traces, pa.binary()).slice(offset)
    rows = 1 if shared else len(traces)
    suffixes = np.arange(rows * width, dtype=np.uint8).reshape(rows, width)
    got = extended_traces(column, suffixes).to_pylist()
    assert got == [t + bytes(suffixes[0 if shared else n]) for n, t in enumerate(traces)]


@given(st.data(), st.sampled_from([1, 2, 255, 2**16, 2**16 + 1, 2**32, 2**32 + 1, 2**62]))
def test_stable_order_is_numpys_stable_argsort(data, bound):
    """Whatever width it sorts at, the order is the stable one of the values themselves."""
    values = data.draw(st.lists(st.integers(0, bound - 1) | st.just(bound - 1), max_size=50))
    array = np.array(values, np.int64)
    expected = np.argsort(array, kind="stable")
    assert stable_order(array, bound).tolist() == expected.tolist()


def test_stable_order_keeps_ties_in_order_over_many_rows():
    """Many ties in every 16-bit digit, sorted in several passes: stable all through."""
    rng = np.random.default_rng(7)
    for bound in (2**20, 2**40, 2**62):
        values = rng.integers(0, 8, 20_000) * (bound // 8) + rng.integers(0, 3, 20_000)
        expected = np.argsort(values, kind="stable")
        assert stable_order(values, bound).tolist() == expected.tolist()


_PAIR_PARTS = st.one_of(
    st.text(max_size=3),
    st.binary(max_size=3),
    st.integers(-3, 3),
    st.booleans(),
    st.sampled_from([0.0, -0.0, 1.0]),
    st.tuples(st.integers(0, 2)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_PAIR_PARTS, _PAIR_PARTS), max_size=12))
def test_encode_pairs_makes_each_pairs_own_bytes(pairs):
    """Encoding a batch's pairs at once (each distinct plain pair once) gives every pair the
    bytes encoding it alone gives, for equal pairs of different types too (1 and True, 0.0
    and -0.0)."""
    from flamestream.graph.mapreduce import Mapped
    from flamestream.spark.exec.general.items import encode_key, encode_pairs, encode_payload

    keys, payloads = encode_pairs(pairs)
    assert keys == [encode_key(k) for k, _ in pairs]
    assert payloads == [encode_payload(Mapped(k, v)) for k, v in pairs]
