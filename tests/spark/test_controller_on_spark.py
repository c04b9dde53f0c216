"""The controller on a real query: its decisions are in the offsets, the output is unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flamestream import Dataflow, map_reduce
from flamestream.spark import apply_graph

from .conftest import released, run_to_files


def word_count() -> Dataflow:
    flow = Dataflow("keys")
    counts = map_reduce(
        flow, "count", flow.source("keys"), mapper=lambda k: (k, 1), reducer=lambda a, b: a + b
    )
    flow.sink("counts", counts)
    return flow


def run(spark: SparkSession, base: Path, **front: Any) -> tuple[list[tuple[Any, ...]], list[dict]]:
    """The generator (one front, so its global times are its positions under the logical
    clock whatever the batches) through word count; released rows and our end offsets."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "generator")
        .option("partitions", 1)
        .option("rowsPerSecond", 0)
        .option("totalRows", 600)
        .option("keys", 25)
        .option("keySkew", 1.1)
        .option("clock", "logical")
    )
    for key, value in front.items():
        reader = reader.option(key, str(value))
    counts = apply_graph(word_count(), reader.load(), payload="key", checkpoint_location=str(base))
    run_to_files(counts, base / "out", base)
    rows = [(r["ts"], r["front"], r["value"]) for r in released(base / "out")]
    batches = sorted(int(p.name) for p in (base / "offsets").iterdir() if p.name.isdigit())
    offsets = [
        json.loads((base / "offsets" / str(b)).read_text().splitlines()[-1]) for b in batches
    ]
    return rows, offsets


def test_output_is_the_same_with_the_controller_on_or_off(spark: SparkSession, tmp_path: Path):
    off, off_offsets = run(spark, tmp_path / "off")
    fixed, _ = run(spark, tmp_path / "fixed", maxRecordsPerTrigger=70)
    on, on_offsets = run(
        spark,
        tmp_path / "on",
        controller="on",
        targetLatencyMs=120_000,  # generous: the limit only grows, to its upper bound
        minRecordsPerTrigger=20,
        initialRecordsPerTrigger=20,
        maxRecordsPerTrigger=250,
    )
    assert len(off_offsets) == 1 and len(on) == 600
    assert on == off == fixed  # same released rows, same global times, same order
    records = [o["controller"] for o in on_offsets]
    assert len(records) >= 3
    assert records[-1]["decisions"] >= 1, records  # it raised the limit at least once
    assert records[-1]["targetLatencyMs"] == 120_000
    assert len({r["id"] for r in records}) == 1
    start = 0
    for offset, record in zip(on_offsets, records, strict=True):
        ((_, _, position, _),) = offset["fronts"]  # [key, front id, position, next ts]
        assert 0 < position - start <= record["limit"], (start, offset)  # the limit held
        assert 20 <= record["limit"] <= 250
        start = position
    assert any(r["limit"] > 20 for r in records), records


def test_a_restart_resumes_the_controller_from_its_offsets(spark: SparkSession, tmp_path: Path):
    """Two runs on one checkpoint (300 records, then 600): the second continues with the
    first's id, limit and decision count, and the output is the uninterrupted run's."""
    options: dict[str, Any] = {
        "controller": "on",
        "targetLatencyMs": 120_000,
        "minRecordsPerTrigger": 20,
        "initialRecordsPerTrigger": 20,
        "maxRecordsPerTrigger": 250,
    }
    whole, _ = run(spark, tmp_path / "whole")
    _, first = run(spark, tmp_path / "ck", totalRows=300, **options)
    rows, offsets = run(spark, tmp_path / "ck", **options)
    assert rows == whole
    before, after = first[-1]["controller"], offsets[len(first)]["controller"]
    assert after["id"] == before["id"]
    assert after["decisions"] >= before["decisions"]
    assert after["limit"] >= before["limit"] or after["decisions"] > before["decisions"]


def test_bad_controller_options_fail_before_the_query_starts(spark: SparkSession, tmp_path: Path):
    reader = spark.readStream.format("flamestream").option("front", "generator")
    with pytest.raises(Exception, match="controller") as error:
        reader.option("controller", "maybe").load()
    assert "one of off, on" in str(error.value)
    with pytest.raises(Exception, match="minRecordsPerTrigger"):
        (
            reader.option("controller", "on")
            .option("maxRecordsPerTrigger", 10)
            .option("minRecordsPerTrigger", 50)
            .load()
        )
