"""Key ranges moving between keyed partitions between micro-batches (``elastic=``): the
released output is the fixed layout's, across layout changes, restarts and loops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from flamestream import Dataflow, map_reduce
from flamestream.examples.components import components
from flamestream.spark import apply_graph
from flamestream.spark.control.key_layout import ElasticPolicy, Layout

from .conftest import released, run_to_files, write_lines
from .test_graph_loops import edges

#: Moves on small test batches (the default waits for 200 items and a 1.5x hot partition).
EAGER = ElasticPolicy(skew=1.05, even=1.0, min_items=10, gain=0.95)


def word_count() -> Dataflow:
    flow = Dataflow("keys")
    counts = map_reduce(
        flow, "count", flow.source("keys"), mapper=lambda k: (k, 1), reducer=lambda a, b: a + b
    )
    flow.sink("counts", counts)
    return flow


def generator(spark: SparkSession, total: int, **options: Any) -> DataFrame:
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "generator")
        .option("partitions", 1)  # one front: global times are positions, whatever the batches
        .option("rowsPerSecond", 0)
        .option("totalRows", total)
        .option("keys", 30)
        .option("keySkew", 1.3)
        .option("clock", "logical")
        .option("maxRecordsPerTrigger", 150)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def layouts(checkpoint: Path) -> list[dict[str, Any]]:
    """The control channel's offset of every batch."""
    found = []
    offsets = checkpoint / "offsets"
    for batch in sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()):
        for line in (offsets / str(batch)).read_text().splitlines()[2:]:
            if '"flamestreamLayout"' in line:
                found.append(json.loads(line))
    return found


def run(
    spark: SparkSession, work: Path, elastic: bool | ElasticPolicy, total: int = 900
) -> list[tuple[Any, ...]]:
    out = apply_graph(
        word_count(),
        generator(spark, total),
        payload="key",
        checkpoint_location=str(work),
        partitions=3,
        elastic=elastic,
    )
    run_to_files(out, work / "out", work)
    return [(r["ts"], r["front"], r["value"]) for r in released(work / "out")]


def test_moving_key_ranges_changes_nothing_released(spark: SparkSession, tmp_path: Path):
    fixed = run(spark, tmp_path / "fixed", False)
    moving = run(spark, tmp_path / "moving", EAGER)
    assert moving == fixed and len(fixed) == 900
    found = layouts(tmp_path / "moving")
    assert len(found) >= 6  # one per batch
    assert found[-1]["decisions"] >= 1, found[-1]
    assignments = {tuple(f["assignment"]) for f in found}
    assert len(assignments) >= 2  # the layout did change between batches
    assert tuple(found[0]["assignment"]) == Layout.default(3).assignment
    state = tmp_path / "moving" / "flamestream-graph" / "count.grouping.slots"
    assert len(list(state.glob("part-*"))) == 3 * 4  # state per slot, every slot kept
    assert layouts(tmp_path / "fixed") == []  # no control channel without elastic=


def test_a_restart_restores_each_slot_where_the_layout_puts_it(spark: SparkSession, tmp_path: Path):
    whole = run(spark, tmp_path / "whole", False)
    run(spark, tmp_path / "ck", EAGER, total=450)
    again = run(spark, tmp_path / "ck", EAGER)
    assert again == whole
    assert layouts(tmp_path / "ck")[-1]["decisions"] >= 1


def test_a_loop_graph_gives_the_same_output_with_moving_key_ranges(
    spark: SparkSession, tmp_path: Path
):
    """Connected components: items handed to other keys go through the loop channel, and
    each batch routes them by that batch's layout."""
    folder = tmp_path / "in"
    write_lines(folder / "a.txt", edges(7, 10, 14))
    write_lines(folder / "b.txt", edges(8, 10, 14))
    results = {}
    for name, elastic in (("fixed", False), ("moving", EAGER)):
        df = (
            spark.readStream.format("flamestream")
            .option("front", "files")
            .option("path", str(folder))
            .option("clock", "logical")
            .option("maxRecordsPerTrigger", 4)
            .load()
        )
        out = apply_graph(
            components(),
            df,
            checkpoint_location=str(tmp_path / name),
            partitions=2,
            elastic=elastic,
        )
        run_to_files(out, tmp_path / name / "out", tmp_path / name)
        results[name] = sorted(
            (r["sink"], r["ts"], r["front"], r["value"]) for r in released(tmp_path / name / "out")
        )
    assert results["moving"] == results["fixed"] and results["fixed"]
    assert layouts(tmp_path / "moving")[-1]["decisions"] >= 2
