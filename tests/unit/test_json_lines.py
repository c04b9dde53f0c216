"""The fast JSON-lines writer of the files sink is byte-for-byte the plain one."""

from __future__ import annotations

import io

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_flamestream.sinks.files import _json_lines, _write_json_lines

from ..examples import examples

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
rows = st.integers(0, 40)


@st.composite
def tables(draw):
    n = draw(rows)
    columns = {
        "ts": pa.array(draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n))),
        "front": pa.array(
            draw(st.lists(st.integers(0, 2**31 - 2), min_size=n, max_size=n)), pa.int32()
        ),
        "value": pa.array(draw(st.lists(st.none() | texts, min_size=n, max_size=n)), pa.string()),
        "flag": pa.array(draw(st.lists(st.none() | st.booleans(), min_size=n, max_size=n))),
        "raw": pa.array(draw(st.lists(st.none() | st.binary(max_size=6), min_size=n, max_size=n))),
        "ratio": pa.array(draw(st.lists(st.floats(allow_nan=False), min_size=n, max_size=n))),
        # text JSON takes as it is (quoted by constant text around it)
        "word": pa.array(
            draw(st.lists(st.text("ab =~", max_size=5), min_size=n, max_size=n)), pa.string()
        ),
        # one value throughout (a source, a front id): rendered once, joined as constant text
        "source": pa.array([draw(st.none() | texts)] * n, pa.string()),
        "id": pa.array([draw(st.integers(-5, 5))] * n, pa.int32()),
    }
    keep = draw(st.lists(st.sampled_from(sorted(columns)), min_size=1, unique=True))
    table = pa.table({name: columns[name] for name in keep})
    if draw(st.booleans()):  # one column in chunks of its own, empty ones too (as a merged,
        # sorted table has them when a column of one value was kept as it came)
        name, cut = draw(st.sampled_from(keep)), draw(st.integers(0, n))
        array = table.column(name).combine_chunks()
        chunks = [array.slice(0, 0), array.slice(0, cut), array.slice(cut, 0), array.slice(cut)]
        table = table.set_column(keep.index(name), name, pa.chunked_array(chunks, array.type))
    return table


@settings(max_examples=examples(150), deadline=None)
@given(tables())
def test_fast_writer_equals_the_row_by_row_writer(table):
    out = io.BytesIO()
    _write_json_lines(out, table)
    assert out.getvalue() == _json_lines(table)


def test_strings_that_need_escaping():
    table = pa.table({"value": ["plain", 'quote " here', "back\\slash", "tab\there", "é ü 😀", ""]})
    out = io.BytesIO()
    _write_json_lines(out, table)
    assert out.getvalue() == _json_lines(table)


def test_binary_columns_sliced_from_a_larger_batch():
    raw = pa.array([b"\x00\xff", None, b"", b"trace bytes", None, b"\x10"] * 5)
    for start, length in ((0, 30), (3, 10), (7, 1), (29, 1), (4, 0)):
        table = pa.table({"trace": raw.slice(start, length), "n": pa.array(range(length))})
        out = io.BytesIO()
        _write_json_lines(out, table)
        assert out.getvalue() == _json_lines(table)
