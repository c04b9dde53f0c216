"""A state budget turns exact distinct counts into sketches (``exact_or_approximate``, #41 §4).

Sixteen keys each gather distinct values (every record's value is new) until their exact sets
pass the state budget of the two keyed partitions; the budget policy then sketches key slots
between batches, from a global time recorded in the control channel's offset. The released
rows are the reference runtime's given that recorded schedule: exact rows before, approximate
after, for the sketched slots' keys; replaying the batches after the decision (the commit log
cut back to it, the query restarted) releases the same rows with the same choice.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from flamestream import Dataflow, exact_or_approximate
from flamestream.spark import apply_graph
from flamestream.spark.control.approx import SKETCH, recorded_schedule
from flamestream.spark.control.budgeted import BudgetPolicy, LimitBoard
from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order

from .conftest import released, run_to_files
from .test_budgets import offsets_with

#: Per keyed partition: the exact sets of 16 keys x ~60 values of 32 characters pass it
#: about a third of the way through the input.
BUDGET = 16_000
ROWS = 1_000
VALUE_BYTES = 32


def uniques() -> Dataflow:
    flow = Dataflow("uniques")
    seen = exact_or_approximate(
        flow,
        "seen",
        flow.source("values"),
        key=lambda v: v[:1],
        value=lambda v: v,
        lg_k=8,
        floor=4,
    )
    flow.sink("out", seen)
    return flow


def generator(spark: SparkSession) -> Any:
    return (
        spark.readStream.format("flamestream")
        .option("front", "generator")
        .option("partitions", 1)
        .option("rowsPerSecond", 0)
        .option("totalRows", ROWS)
        .option("payloadBytes", VALUE_BYTES)
        .option("clock", "logical")
        .option("maxRecordsPerTrigger", 200)
    )


def value_of(position: int) -> str:
    """The generator's record ``position`` (seed 0, partition 0): its value column."""
    digest = hashlib.blake2b(f"0/0/{position}".encode(), digest_size=8).hexdigest()
    return (digest * (VALUE_BYTES // 16 + 1))[:VALUE_BYTES]


def run(spark: SparkSession, work: Path) -> list[dict[str, Any]]:
    policy = BudgetPolicy(
        target_latency_ms=60_000, max_state_bytes_per_partition=BUDGET, min_rows=100, cores=1
    )
    out = apply_graph(
        uniques(),
        generator(spark),
        payload="value",
        checkpoint_location=str(work / "ck"),
        partitions=2,
        budgets=policy,
    )
    run_to_files(out, work / "out", work / "ck")
    return released(work / "out")


def reference(rows: list[dict[str, Any]], work: Path) -> list[tuple[int, str]]:
    """What the reference runtime releases for the same records, given the recorded schedule."""
    inputs = {0: sorted((r["ts"], value_of(int(r["position"]))) for r in rows)}
    result = run_in_order(uniques(), inputs, sketch=recorded_schedule(str(work / "ck")))
    return [(r.meta.global_time.ts, render_default(r.payload)) for r in result.released()]


def test_budget_sketches_slots_and_the_reference_agrees(spark: SparkSession, tmp_path: Path):
    rows = run(spark, tmp_path)
    assert len(rows) == ROWS
    got = sorted((r["ts"], r["value"]) for r in rows)
    assert got == sorted(reference(rows, tmp_path))
    # exact rows first, approximate ones after the decision, for some keys only
    flags = [("approximate=True" in value, ts) for ts, value in got]
    assert flags[0] == (False, got[0][0]) and any(a for a, _ in flags)
    first_approximate = min(ts for a, ts in flags if a)
    assert any(not a for a, ts in flags if ts > first_approximate)  # other slots stay exact
    # the decision, recorded in the control channel's offsets from a global time
    layouts = offsets_with(tmp_path / "ck", "flamestreamLayout")
    decisions = layouts[-1][SKETCH]
    assert decisions and all(d["slots"] for d in decisions)
    assert decisions[0]["at"][0] <= first_approximate
    assert any("sketch slots" in layout.get("reason", "") for layout in layouts)
    board = LimitBoard(str(tmp_path / "ck" / "flamestream-graph")).entries()
    assert board[-1]["sketched"] == sorted({s for d in decisions for s in d["slots"]})
    # a restart replays the last batch (its commit gone) with the same choice: the same state
    last, states = newest_states(tmp_path / "ck")
    assert SKETCH in control_offset(tmp_path / "ck", last)
    uncommit_from(tmp_path / "ck", last)
    run(spark, tmp_path)
    assert newest_states(tmp_path / "ck", last) == (last, states)
    assert sorted((r["ts"], r["value"]) for r in released(tmp_path / "out")) == got
    assert control_offset(tmp_path / "ck", last)[SKETCH] == decisions


def newest_states(checkpoint: Path, batch: int | None = None) -> tuple[int, dict[str, bytes]]:
    """The newest batch that saved keyed state (or ``batch``), and its slots' snapshots."""
    saved = list((checkpoint / "flamestream-graph" / "seen.grouping.slots").glob("*/*.state"))
    if batch is None:
        batch = max(int(p.stem) for p in saved)
    return batch, {p.parent.name: p.read_bytes() for p in saved if int(p.stem) == batch}


def uncommit_from(checkpoint: Path, batch: int) -> None:
    """Forget that ``batch`` and every later one ran: as if the query died before committing
    it. Spark replays it with its logged offsets (the sink released it already: it is not
    released again)."""
    for log in ("offsets", "commits"):
        for entry in (checkpoint / log).iterdir():
            number = entry.name.removeprefix(".").removesuffix(".crc")
            if number.isdigit() and (
                int(number) > batch or (log == "commits" and int(number) == batch)
            ):
                entry.unlink()


def control_offset(checkpoint: Path, batch: int) -> dict[str, Any]:
    for line in (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2:]:
        if '"flamestreamLayout"' in line:
            found: dict[str, Any] = json.loads(line)
            return found
    return {}
