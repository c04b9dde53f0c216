"""Swapping a running query's step function on Spark: the contract, refusals, errors, crashes.

Each query runs to its end (``Trigger.AvailableNow``); the swap is submitted between two runs
on one checkpoint, so it is taken in at a planning fixed by the input alone (the first batch
of the second run) and every run of this test makes the same batches, the same swap time
and the same bytes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flamestream import GlobalTime
from flamestream.errors import SwapError
from flamestream.spark import SparkGraph
from flamestream.spark.durable.functions import Withdrawals
from flamestream.testing import run_in_order

from ..crash import run_unbroken, work_args
from . import swap_job
from .conftest import released, write_lines

FIRST = ["the cat sat", "the dog", "a cat and a dog", "the end", "cat nap", "big dog"]
LATER = ["the bird sings", "a bird and a cat", "dog days", "the cat", "end"]
#: a second file: a new front, whose lines may be stamped below the swap time
OTHER = ["bird bird", "the quick fox", "fox and dog"]


def first_run(spark: SparkSession, work: Path) -> None:
    write_lines(work / "in" / "a.txt", FIRST)
    run_unbroken(lambda s: swap_job.start(s, *work_args(work)), spark)


def later_input(work: Path) -> None:
    write_lines(work / "in" / "a.txt", LATER)
    write_lines(work / "in" / "b.txt", OTHER)


def control_offsets(work: Path) -> dict[int, dict[str, Any]]:
    """The control channel's end offset, per batch."""
    found = {}
    for path in (work / "ck" / "offsets").iterdir():
        if path.name.isdigit():
            for line in path.read_text().splitlines()[2:]:
                if '"flamestreamLayout"' in line:
                    found[int(path.name)] = json.loads(line)
    return dict(sorted(found.items()))


def input_lines(work: Path) -> dict[tuple[str, int], str]:
    """Every input line by (file name, byte position)."""
    lines = {}
    for path in (work / "in").glob("*.txt"):
        position = 0
        for line in path.read_bytes().split(b"\n")[:-1]:
            lines[(path.name, position)] = line.decode()
            position += len(line) + 1
    return lines


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("unbroken-swap")
    first_run(spark, work)
    SparkGraph.control(str(work / "ck")).swap("split", swap_job.shouting())
    later_input(work)
    run_unbroken(lambda s: swap_job.start(s, *work_args(work)), spark)
    return work


def swap_time(work: Path) -> tuple[int, GlobalTime]:
    """The batch that took the swap in, and the swap's global time, from the offset log."""
    offsets = control_offsets(work)
    batch = next(b for b, o in offsets.items() if o["swaps"])
    assert all(not o["swaps"] for b, o in offsets.items() if b < batch)
    assert all(o["swaps"] == offsets[batch]["swaps"] for b, o in offsets.items() if b > batch)
    (swap,) = offsets[batch]["swaps"]
    assert swap["step"] == "split" and len(swap["fn"]) == 64
    digest = swap["fn"]
    assert (work / "ck" / "flamestream-graph" / "functions" / f"{digest}.pkl").exists()
    return batch, GlobalTime(*swap["at"])


def released_and_inputs(work: Path) -> tuple[list[tuple[int, int, str]], dict[int, Any]]:
    """The released rows as (ts, front, value), sorted, and the input lines per front by time."""
    rows = released(work / "out")
    lines = input_lines(work)
    times = {(r["source"], r["position"]): (r["ts"], r["front"]) for r in rows}
    assert set(times) == set(lines)  # every line made a row: its global time is known
    inputs: dict[int, list[tuple[int, str]]] = {}
    for where, (ts, front) in sorted(times.items(), key=lambda kv: kv[1]):
        inputs.setdefault(front, []).append((ts, lines[where]))
    return sorted((r["ts"], r["front"], r["value"]) for r in rows), inputs


def test_rows_below_the_swap_time_are_the_old_functions_and_above_the_references(unbroken: Path):
    batch, at = swap_time(unbroken)
    assert batch >= 2 and at.ts >= len("\n".join(FIRST))  # after all of the first run's input
    got, inputs = released_and_inputs(unbroken)
    swapped = run_in_order(
        swap_job.word_count(), inputs, swaps=[("split", swap_job.shouting(), at)]
    )
    want = sorted((t.ts, t.front, p) for t, p in swapped.timed())
    assert got == want
    unswapped = run_in_order(swap_job.word_count(), inputs)
    below = sorted((t.ts, t.front, p) for t, p in unswapped.timed() if t < at)
    assert [r for r in got if GlobalTime(r[0], r[1]) < at] == below
    assert any(v.isupper() for _, _, v in got if v.split("=")[0].isalpha())  # new one ran


def test_refused_swaps_name_the_step_and_submit_nothing(unbroken: Path, tmp_path: Path):
    control = SparkGraph.control(str(unbroken / "ck"))
    functions = unbroken / "ck" / "flamestream-graph" / "functions"
    stored = sorted(functions.iterdir())
    consumed = control_offsets(unbroken)[max(control_offsets(unbroken))]["consumed"]
    cases = [
        ("nope", str.split, "no such step"),
        ("count.grouping", str.split, "a grouping"),
        ("count.map", str.split, "map_reduce's own steps"),
        ("split", 7, "a callable"),
        ("split", _unpicklable(), "cloudpickle"),
    ]
    for step, fn, found in cases:
        with pytest.raises(SwapError, match=f"swap of step '{step}'.*{found}"):
            control.swap(step, fn)
    assert control.requests(consumed) == []
    assert sorted(functions.iterdir()) == stored
    with pytest.raises(SwapError, match="has started once"):
        SparkGraph.control(str(tmp_path / "never")).swap("split", str.split)


def _unpicklable() -> Any:
    import threading

    lock = threading.Lock()
    return lambda line: [line] if lock else []


def test_a_raising_swapped_function_is_reported_and_withdrawn_the_old_one_stays_in_force(
    spark: SparkSession, tmp_path: Path
):
    first_run(spark, tmp_path)
    SparkGraph.control(str(tmp_path / "ck")).swap("split", _raising())
    later_input(tmp_path)
    with pytest.raises(Exception, match="step 'split'") as failed:
        run_unbroken(lambda s: swap_job.start(s, *work_args(tmp_path)), spark)
    message = str(failed.value)
    assert "explode" in message and "ValueError" in message and "no birds" in message
    assert "determinant" in message and re.search(r"[ab]\.txt", message)
    batch, _ = swap_time(tmp_path)
    assert f"withdrawn from batch {batch} on" in message
    graph_state = str(tmp_path / "ck" / "flamestream-graph")
    (withdrawal,) = Withdrawals(graph_state).read().values()
    assert withdrawal["batch"] == batch and withdrawal["step"] == "split"
    assert "ValueError: no birds" in withdrawal["error"]
    # restarted: the failed batch runs again with the function from before the swap, and
    # every batch after it; the control channel drops the swap and says why
    run_unbroken(lambda s: swap_job.start(s, *work_args(tmp_path)), spark)
    got, inputs = released_and_inputs(tmp_path)
    unswapped = run_in_order(swap_job.word_count(), inputs)
    assert got == sorted((t.ts, t.front, p) for t, p in unswapped.timed())
    offsets = control_offsets(tmp_path)
    after = [o for b, o in offsets.items() if b > batch]
    assert after and all(o["swaps"] == [] for o in after)
    assert "withdrawn: its function raised in batch" in after[0]["reason"]


def _raising() -> Any:
    def explode(line: str) -> list[str]:
        raise ValueError(f"no birds, not even in {line!r}")

    return explode
