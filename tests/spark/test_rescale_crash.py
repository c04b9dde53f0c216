"""A crash during a migration batch of a rescale: the restarts release the unbroken run's bytes.

The child (:mod:`tests.spark.rescale_crash_job`, word count on 4 key partitions) is given two
rescale requests before its first run; it is killed at crash points inside the migration,
restarted from its checkpoint each time, and run to its end. The same schedule on the job's
approximate aggregations (run on the test session, not killed): the slots carry their
sketches, and the released bytes are those of the fixed layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flamestream.spark import SparkGraph
from flamestream.spark.control.key_layout import slot_of
from flamestream.spark.exec.general.items import encode_key

from ..crash import (
    reachable_in_turn,
    released_files,
    released_so_far_is,
    run_chain,
    run_unbroken,
    work_args,
)
from . import graph_crash_job, rescale_crash_job
from .test_elastic_layout import layouts
from .test_graph_crash_recovery import make_input

JOB = "tests.spark.rescale_crash_job"


def test_a_crash_during_a_migration_batch_recovers_to_the_same_bytes(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
):
    """Scale 4 -> 1 from batch 1 (12 slots, 3 per batch), back to 4 from batch 3: killed when the
    controller had consumed the request but Spark had not logged it, then after a keyed task
    of a later migration batch saved its slots. The restarts release, file by file, the bytes
    of the same word count run unbroken on a fixed layout."""
    fixed = tmp_path_factory.mktemp("fixed")
    make_input(fixed / "in")
    paths = work_args(fixed)
    run_unbroken(lambda s: graph_crash_job.start(s, *paths), spark)
    unbroken = released_files(fixed / "out")
    assert len(unbroken) >= 2
    work = tmp_path_factory.mktemp("crashed")
    make_input(work / "in")
    control = SparkGraph.control(str(work / "ck"))
    control.rescale(1, not_before_batch=1)
    control.rescale(4, not_before_batch=3)
    chain = ["control.plan:1", "graph.keyed.saved:2"]
    assert reachable_in_turn(chain)
    check = released_so_far_is(unbroken, lambda: released_files(work / "out"))
    run_chain(JOB, work_args(work), chain, check)
    assert released_files(work / "out") == unbroken
    found = layouts(work / "ck")
    moving = [batch for batch, offset in enumerate(found) if offset.get("moved")]
    assert moving[:3] == [1, 2, 3], found  # batch 2 crashed and replayed mid-migration
    assert found[-1]["active"] == 4 and found[-1]["target"] is None
    assert max(len(offset.get("moved", ())) for offset in found) == 3
    assert found[2]["assignment"].count(0) == 4 + 3 + 3 and found[2]["active"] == 1
    # each request consumed once, though batch 1 was planned again after the first crash
    consumed = {r["request"]: r["decision"] for o in found for r in o.get("requests", [])}
    assert len(consumed) == 2 and not any(d.startswith("refused") for d in consumed.values())


def test_sketches_in_migrating_slots_release_the_fixed_layouts_bytes(
    spark: SparkSession, unbroken_sketches: dict[str, bytes], tmp_path: Path
):
    """The same schedule (4 -> 1 from batch 1, back to 4 from batch 3, 3 slots a batch) on HLL,
    theta, KLL and frequent items sketches: slots holding sketches move into a batch that
    folds more values into them, and the estimates and sketch bytes released are, file by
    file, those of the same aggregations on 2 partitions never rescaled."""
    make_input(tmp_path / "in")
    control = SparkGraph.control(str(tmp_path / "ck"))
    control.rescale(1, not_before_batch=1)
    control.rescale(4, not_before_batch=3)
    paths = work_args(tmp_path)
    run_unbroken(lambda s: rescale_crash_job.start(s, *paths, sketched=True), spark)
    assert released_files(tmp_path / "out") == unbroken_sketches
    found = batch_layouts(tmp_path / "ck")
    assert found[-1]["active"] == 4 and found[-1]["target"] is None
    # the (sink, key) of each estimate released, per batch (part-<batch>.jsonl)
    updated = {
        int(name.split("-")[1].split(".")[0]): released_keys(data)
        for name, data in released_files(tmp_path / "out").items()
    }
    slots = len(found[0]["assignment"])
    carried = {
        (batch, sink, key)
        for batch, keys in updated.items()
        for sink, key in keys
        if slot_of(encode_key(key), slots) in found[batch].get("moved", ())
        and any((sink, key) in updated[b] for b in updated if b < batch)
    }
    # a KLL's and the frequent items' sketches moved with their slots, then took new values
    assert {sink for _, sink, _ in carried} >= {"quantiles_out", "hot_out"}, (carried, found)


def batch_layouts(checkpoint: Path) -> list[dict[str, Any]]:
    """The control channel's offset of each batch (logged once per keyed stage: all equal)."""
    found = []
    offsets = checkpoint / "offsets"
    for batch in sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()):
        lines = (offsets / str(batch)).read_text().splitlines()[2:]
        layouts = {line for line in lines if '"flamestreamLayout"' in line}
        assert len(layouts) == 1, (batch, layouts)
        found.append(json.loads(layouts.pop()))
    return found


def released_keys(data: bytes) -> set[tuple[str, Any]]:
    """The (sink, key) of every estimate in one released file."""
    rows = [json.loads(line) for line in data.splitlines()]
    return {(r["sink"], json.loads(r["value"])["key"]) for r in rows}
