"""A declared count of text runs in Arrow (``exec.declared.columnar``): the rows of item by item.

The first stage of ``[flat_map(str.split) ->] count(...)`` with ``release="latest"`` makes its
combined counts with Arrow kernels. Whatever the text (any whitespace ``str.split`` knows),
the order of the rows, their flags and payload kinds, the stage must send exactly what the
general path sends, byte for byte: a batch the columnar path cannot take goes the general way.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from operator import add
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, count, map_reduce
from flamestream.graph.dataflow import Stream
from flamestream.spark.exec.declared.columnar import _words
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    encode_payload,
)
from flamestream.spark.exec.general.stateless import StageRunner
from flamestream.spark.exec.shuffle.packed import pack
from flamestream.spark.plan.stages import keyed_entries, plan_stages, precombiners

from ..examples import examples

#: Words, and every kind of separator: ASCII ones, the ones only ``str.isspace`` knows
#: (``\x1c``-``\x1f``, NEL, NBSP, line/paragraph separators, ideographic space), non-ASCII.
TEXT = st.text(
    alphabet=st.sampled_from(
        [
            *("a", "b", "é", "日", " ", "\t", "\n", "\r", "\x0b", "\x1c", "\x1f"),
            *("\x85", "\xa0", "\u2028", "\u3000", "\u200b"),
        ]
    ),
    max_size=12,
)

ASCII_TEXT = st.text(alphabet=st.sampled_from(["a", "b", " ", "\t", "\n", "\x0c", "\x1c", "\x1f"]))

#: Lines of many words (repeated ones), as a corpus has them.
WORDS = st.lists(st.sampled_from(["a", "bb", "a", "c", "a"]), max_size=9).map(" ".join)


def _counting(split: bool, how: str) -> Dataflow:
    flow = Dataflow("counting")
    items: Stream = flow.source("lines")
    if split:
        items = flow.flat_map("split", items, str.split)
    if how == "count":
        counts = count(flow, "count", items)
    elif how == "count_by_key":
        counts = count(flow, "count", items, key=str.lower)
    else:  # the same count written out, with an opaque mapper
        counts = map_reduce(
            flow, "count", items, mapper=lambda w: (w, 1), reducer=add, commutative=True
        )
    flow.sink("out", flow.map("render", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def _first_stage(flow: Dataflow, latest: bool = True) -> StageRunner:
    graph = flow.build()
    stages = plan_stages(graph)
    precombine = precombiners(graph, stages) if latest else {}
    return StageRunner(graph, stages[0], keyed_entries(graph, stages), precombine=precombine)


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("latest", [True, False])
def test_a_declared_count_of_text_is_recognized(split: bool, latest: bool):
    counted = _first_stage(_counting(split, "count"), latest).counted
    assert counted is not None and counted.combine == latest


@pytest.mark.parametrize(
    ("split", "how", "latest"),
    [
        (True, "count_by_key", True),  # a key function: Python per word
        (True, "count_by_key", False),
        (True, "opaque", True),  # a lambda mapper: not known to count
    ],
)
def test_anything_else_runs_the_general_way(split: bool, how: str, latest: bool):
    assert _first_stage(_counting(split, how), latest).counted is None


def test_a_split_that_is_not_str_split_is_not_recognized():
    flow = Dataflow("counting")
    words = flow.flat_map("split", flow.source("lines"), lambda line: line.split())
    flow.sink("out", count(flow, "count", words))
    assert _first_stage(flow).counted is None


@settings(max_examples=examples(300), deadline=None)
@given(
    lines=st.lists(TEXT | ASCII_TEXT, max_size=20),
    before=st.lists(ASCII_TEXT, max_size=3),
    kind=st.sampled_from([pa.string(), pa.large_string()]),
)
def test_arrow_splits_ascii_text_as_str_split_does(
    lines: list[str], before: list[str], kind: pa.DataType
):
    # a slice of a longer array: its text starts past the buffers' start
    split = _words(pa.array(before + lines, kind).slice(len(before)))
    if not lines or not all(line.isascii() for line in lines):
        assert split is None  # pyarrow's utf8 split misses some runs of separators
        return
    assert split is not None
    words, rows, firsts = split
    per_row: list[list[str]] = [[] for _ in lines]
    for nth, (word, row) in enumerate(zip(words.to_pylist(), rows.tolist(), strict=True)):
        assert nth - firsts[row] == len(per_row[row])  # its index among its row's words
        per_row[row].append(word)
    assert per_row == [line.split() for line in lines]
    assert firsts.tolist() == [
        sum(len(line.split()) for line in lines[:n]) for n in range(len(lines) + 1)
    ]


@settings(max_examples=examples(300), deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            WORDS | ASCII_TEXT | TEXT,
            st.integers(0, 2),  # ts step (0: the same ts as the row before)
            st.integers(0, 1),  # front
            st.sampled_from([0, 0, 0, 0, MAY_INVALIDATE, MAY_INVALIDATE | TOMBSTONE]),
            st.sampled_from(["text"] * 6 + ["bytes"]),
        ),
        max_size=14,
    ),
    split=st.booleans(),
    clean=st.booleans(),
    latest=st.booleans(),
    one_source=st.booleans(),
)
def test_the_columnar_count_sends_what_the_general_path_sends(
    lines: list[tuple[str, int, int, int, str]],
    split: bool,
    clean: bool,
    latest: bool,
    one_source: bool,
):
    """Byte for byte, and it runs for every batch the general path takes in order.

    ``clean``: a batch as a front reads it (ASCII text, unflagged, in order), so that the
    columnar path runs in about half the examples. ``one_source``: all rows of one front and
    source, as a read task's are (else several of each).
    """
    if clean:
        lines = [
            (t.encode("ascii", "replace").decode(), max(step, 1), front, 0, "text")
            for t, step, front, _, _ in lines
        ]
    runner = _first_stage(_counting(split, "count"), latest)
    counted = runner.counted
    assert counted is not None
    ts, rows = 1, []
    for n, (text, step, front, flag, kind) in enumerate(lines):
        ts += step
        payload = text if kind == "text" else text.encode()
        rows.append(
            {
                "ts": ts,
                "front": 0 if one_source else front,
                "trace": b"",
                "flags": flag,
                # packing groups by front and source
                "source": "in.txt" if one_source or n % 3 else f"{n % 2}.txt",
                "position": n,
                "to": counted.entry,
                "key": None,
                "payload": None if flag & TOMBSTONE else encode_payload(payload),
                "value": None,
            }
        )
    batch = pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA)
    metas = [(row["ts"], row["front"]) for row in rows]
    qualifies = (
        bool(lines)  # an empty batch: nothing to count (stages are not run on one)
        and all(a < b for a, b in pairwise(metas))
        and not any(row["flags"] for row in rows)
        and all(kind == "text" for *_, kind in lines)
        and (not split or all(text.isascii() for text, *_ in lines))
    )
    # a batch without a word goes the general way too (it sends no rows)
    has_words = any(text.split() for text, *_ in lines) if split else bool(lines)
    assert (counted.run(batch) is not None) == (qualifies and has_words)
    assert (counted.packed(batch) is not None) == (qualifies and has_words and not latest)

    def outcome(run: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Any:
        try:
            return run(batch).to_pylist()
        except Exception as exc:  # the same error either way: type and message
            return type(exc), str(exc)

    columnar, packed = outcome(runner.run), outcome(runner.packed)
    runner.counted = None
    assert columnar == outcome(runner.run)
    # made packed (for the shuffle, exec.shuffle.packed): the general rows packed, in pack's order
    assert packed == outcome(lambda rows: pack(runner.run(rows)))


@settings(max_examples=examples(60), deadline=None)
@given(
    blocks=st.lists(st.lists(ASCII_TEXT | TEXT, min_size=1, max_size=6), min_size=1, max_size=5),
    latest=st.booleans(),
)
def test_a_combining_first_stage_runs_over_a_read_tasks_blocks_at_once(
    blocks: list[list[str]], latest: bool
):
    """In a front's read task, a stage that combines (latest) runs once over the task's
    blocks: the rows of one run over them all. Other stages run block by block."""
    from flamestream.spark import SparkGraph

    graph = SparkGraph(_counting(True, "count"), release="latest" if latest else "every")
    stage = graph._front_stage("value")
    ts, made = 0, []
    for lines in blocks:
        made.append(
            pa.RecordBatch.from_pydict(
                {
                    "ts": pa.array(range(ts, ts + len(lines)), pa.int64()),
                    "front": pa.array([0] * len(lines), pa.int32()),
                    "source": pa.array(["in.txt"] * len(lines)),
                    "position": pa.array(range(ts, ts + len(lines)), pa.int64()),
                    "value": pa.array(lines, pa.string()),
                }
            )
        )
        ts += len(lines)
    got = [batch.to_pylist() for batch in stage.read(iter(made))]
    if latest:
        whole = stage.items(pa.concat_batches(made))
        assert got == ([whole.to_pylist()] if whole.num_rows else [])
    else:  # block by block, each block's rows packed for the shuffle (exec.shuffle.packed)
        assert stage.packs
        each = [stage.items(block) for block in made]
        assert got == [pack(rows).to_pylist() for rows in each if rows.num_rows]


@settings(max_examples=examples(200), deadline=None)
@given(
    lines=st.lists(st.tuples(WORDS | ASCII_TEXT | TEXT, st.integers(0, 2)), max_size=12),
    split=st.booleans(),
    latest=st.booleans(),
    nulls=st.booleans(),
)
def test_a_front_stage_makes_from_the_text_what_the_general_path_makes_of_its_items(
    lines: list[tuple[str, int]], split: bool, latest: bool, nulls: bool
):
    """A count of text made straight from a front's rows (``CountedText.of_front``) sends
    what the stage sends for the same rows as items, for any text (non-ASCII: the general
    way), any order of times (equal ones: the general way) and missing values."""
    from flamestream.spark import SparkGraph

    graph = SparkGraph(_counting(split, "count"), release="latest" if latest else "every")
    stage = graph._front_stage("value")
    assert stage.runner.counted is not None
    ts = [sum(step for _, step in lines[: n + 1]) for n in range(len(lines))]
    texts = [None if nulls and n == 1 else text for n, (text, _) in enumerate(lines)]
    block = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(ts, pa.int64()),
            "front": pa.array([0] * len(lines), pa.int32()),
            "source": pa.array(["in.txt"] * len(lines)),
            "position": pa.array(range(len(lines)), pa.int64()),
            "value": pa.array(texts, pa.string()),
        }
    )
    made = stage.runner.counted.of_front(block, stage.entry, block.column("value"), stage.packs)
    qualifies = (
        all(text is not None and (not split or text.isascii()) for text in texts)
        and all(step > 0 for _, step in lines[1:])
        and (any(t.split() for t in texts if t is not None) if split else bool(lines))
    )
    assert (made is not None) == qualifies

    def outcome() -> Any:
        try:
            return [rows.to_pylist() for rows in stage.read(iter([block]))]
        except Exception as exc:  # the same error either way (a missing value's, say)
            return type(exc), str(exc)

    got = outcome()
    stage.runner.counted = None
    assert got == outcome()


#: Counts of a word in a batch: each pickled width (BININT1, BININT2, BININT) and its edges.
COUNTS = st.sampled_from([1, 2, 255, 256, 65535, 65536, 2**31 - 1]) | st.integers(1, 2**31 - 1)


@settings(max_examples=examples(200), deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.text(min_size=1, max_size=300), COUNTS | st.sampled_from([0, 2**31])),
        min_size=1,
        max_size=8,
    )
)
def test_count_pairs_are_pickled_in_arrow_as_pickle_pickles_them(pairs: list[tuple[str, int]]):
    import pickle

    from flamestream.spark.exec.declared.columnar import _pickled_pairs
    from flamestream.spark.exec.general.items import MAPPED_TAG, PICKLE_PROTOCOL

    try:
        data = pa.array([w.encode("utf-8") for w, _ in pairs], pa.binary())
    except UnicodeEncodeError:  # lone surrogates: not text a front reads
        return
    made = _pickled_pairs(data, np.array([n for _, n in pairs], np.int64))
    if any(len(w.encode()) >= 256 or not 1 <= n < 2**31 for w, n in pairs):
        assert made is None  # pickled another way (or never a count): the general path's
        return
    assert made is not None
    assert made.to_pylist() == [MAPPED_TAG + pickle.dumps(p, PICKLE_PROTOCOL) for p in pairs]


def test_a_shipped_front_stage_travels_packed_and_reads_as_the_stage():
    """A front's config keeps the first stage packed when pickled (planning processes never
    unpack it); unpacked at first use it reads what the stage reads, and the payload column
    is checked without unpacking."""
    import pickle

    from flamestream.errors import ConfigError
    from flamestream.spark import SparkGraph
    from flamestream.spark.exec.general.front_stage import ShippedFrontStage

    stage = SparkGraph(_counting(True, "count"), release="latest")._front_stage("value")
    shipped = ShippedFrontStage(stage.encode())
    travelled = pickle.loads(pickle.dumps(shipped))  # noqa: S301  (our own bytes)
    assert travelled._stage is None and travelled.payload == "value"
    with pytest.raises(ConfigError, match="payload"):
        travelled.check([pa.field("value", pa.int64())], "front files")
    assert travelled._stage is None
    lines = ["the cat", "the dog the"]
    block = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array([0, 1], pa.int64()),
            "front": pa.array([0, 0], pa.int32()),
            "source": pa.array(["in.txt"] * 2),
            "position": pa.array([0, 1], pa.int64()),
            "value": pa.array(lines, pa.string()),
        }
    )
    got = [b.to_pylist() for b in travelled.read(iter([block]))]
    assert got == [b.to_pylist() for b in stage.read(iter([block]))] and got
