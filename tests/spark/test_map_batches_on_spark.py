"""map_batches on Spark: word count lower-casing its words in Arrow, as the reference runs it.

The stage runner calls the batch function once per step and task on all its payloads; the
reference runtime on one payload at a time. Both must release the same items (global time,
trace, text), in the fused first stage, unfused with repartitioned fronts, in the front's
reads, and in a keyed stage's tail; a failing batch function fails the query naming the step
and its batch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark.sql import SparkSession

from flamestream import Dataflow, map_reduce
from flamestream.spark import SparkGraph, apply_graph

from .conftest import run_writer, write_lines
from .test_graph_on_spark import collect, expected, front_reader, fronts, observed, read_rows

TEXT = {
    "a.txt": ["The quick Brown fox", "jumps OVER the", "", "THE lazy dog"],
    "b.txt": ["a B c", "Lorem ipsum DOLOR sit amet", "Sit x"],
}


def lower_count() -> Dataflow:
    """Word count whose split words go through ``pyarrow.compute.utf8_lower`` by batch, and
    whose counts are shown by a list-format step in the keyed stage's tail."""
    flow = Dataflow("lower_count")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    lowered = flow.map_batches("lower", words, pc.utf8_lower)
    counts = map_reduce(flow, "count", lowered, mapper=lambda w: (w, 1), reducer=int.__add__)
    flow.sink("out", flow.map_batches("show", counts, _shown, format="list"))
    return flow


def _shown(reduced: list[Any]) -> list[str]:
    return [f"{r.key}={r.value}" for r in reduced]


@pytest.fixture(scope="module")
def lines_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("batches") / "in"
    for name, lines in TEXT.items():
        write_lines(folder / name, lines)
    return folder


MODES = {
    "batch-fused": {"stream": False, "limit": None, "fusion": True},
    "stream-limit3-unfused-3parts": {"stream": True, "limit": 3, "fusion": False, "parts": 3},
    "batch-in-front": {"stream": False, "limit": None, "fusion": True, "front": True},
}


@pytest.mark.parametrize("mode", list(MODES))
def test_lowered_word_count_releases_what_the_reference_releases(
    spark: SparkSession, lines_dir: Path, mode: str, tmp_path: Path
) -> None:
    setting: dict[str, Any] = MODES[mode]
    flow = lower_count()
    df = fronts(spark, lines_dir, stream=setting["stream"], limit=setting["limit"])
    front_rows = collect(df, f"batch_fronts_{mode}".replace("-", "_"))
    if setting.get("parts"):
        df = df.repartition(setting["parts"])
    if setting.get("front"):
        df = front_reader(spark, lines_dir, stream=setting["stream"], limit=setting["limit"])
    checkpoint = str(tmp_path / "ck") if setting["stream"] else None
    out = apply_graph(flow, df, fusion=setting["fusion"], checkpoint_location=checkpoint)
    rows = observed(collect(out, f"batch_out_{mode}".replace("-", "_"), tmp_path / "ck"))
    assert rows == expected(flow, front_rows)
    shown = {row[-1] for row in rows}
    assert "the=3" in shown and "sit=2" in shown  # "The", "the", "THE"; "sit", "Sit"
    assert not any(text != text.lower() for text in shown)


def test_write_stream_runs_the_batch_steps_in_the_front_and_the_sink(
    spark: SparkSession, lines_dir: Path, tmp_path: Path
) -> None:
    """The README's way: the lowering in the front's reads, the keyed stage and its
    list-format tail in the sink's write tasks; released rows as the reference's."""
    graph = SparkGraph(lower_count(), partitions=2)
    reader = front_reader(spark, lines_dir, stream=True, limit=3)
    run_writer(graph.write_stream(reader, checkpoint_location=str(tmp_path / "ck")), tmp_path)
    front_rows = collect(fronts(spark, lines_dir, stream=True, limit=3), "batch_fronts_ws")
    want = sorted(
        (ts, front, value) for _, ts, front, _, value in expected(lower_count(), front_rows)
    )
    assert sorted((r.ts, r.front, r.value) for r in read_rows(tmp_path)) == want
    assert len(want) > 10


def test_map_batches_fuses_with_the_steps_around_it() -> None:
    described = SparkGraph(lower_count()).describe()
    assert "split -> lower -> count.map" in described, described


def _fails_on_dog(words: Any) -> Any:
    if "dog" in words.to_pylist():
        raise ValueError("no dogs")
    return words


def test_a_failing_batch_fails_the_query_naming_the_step_and_batch(
    spark: SparkSession, lines_dir: Path
) -> None:
    flow = Dataflow("fails")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", flow.map_batches("picky", words, _fails_on_dog))
    out = apply_graph(flow, fronts(spark, lines_dir, stream=False, limit=None))
    with pytest.raises(Exception, match="no dogs") as caught:
        out.collect()
    message = str(caught.value)
    assert "BatchStepError" in message and "step 'picky'" in message
    size = re.search(r"a map_batches step, called once on a batch of (\d+) payloads", message)
    assert size is not None and int(size.group(1)) > 1, message  # the words of a file at once
