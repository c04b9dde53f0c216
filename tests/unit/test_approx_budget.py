"""exact_or_approximate (issue 41 §4): exact per key until the budget policy sketches its slot.

The reference runtime given a schedule folds the sketched slots' keys lowered from the
schedule's time on; the keyed stage's fast path folds exactly as its general path does under
the same schedule; the policy's sketch rule (pure) marks the slots whose sketches save bytes
on a partition the state budget would otherwise stop reading for.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, exact_or_approximate
from flamestream.approx.folds import ExactOrApproximateFold
from flamestream.approx.schedule import SketchSchedule, key_slot
from flamestream.errors import GraphError
from flamestream.graph.approximate import lowered_step
from flamestream.graph.mapreduce import Mapped
from flamestream.model import GlobalTime
from flamestream.spark.apply import SparkGraph
from flamestream.spark.exec.general.keyed import KeyedRunner
from flamestream.testing import run_in_order

from ..examples import examples
from .test_fastpath import batches, both_paths_alike

SLOTS = 8


def uniques(floor: int = 2) -> Dataflow:
    flow = Dataflow("uniques")
    made = exact_or_approximate(
        flow, "u", flow.source("in"), key=lambda v: v[0], value=lambda v: v[1], floor=floor, lg_k=8
    )
    flow.sink("out", made)
    return flow


def released(flow: Dataflow, items: list[Any], sketch: SketchSchedule | None) -> list[Any]:
    rows = run_in_order(flow, items, sketch=sketch).released()
    return [(r.meta.global_time.ts, r.payload.key, r.payload.value) for r in rows]


def test_exact_without_a_schedule() -> None:
    items = [(f"k{i % 3}", i) for i in range(60)]
    rows = released(uniques(), items, None)
    assert all(not v.approximate and v.estimate == v.lower == v.upper for _, _, v in rows)
    assert [v.estimate for _, k, v in rows if k == "k0"] == [float(n) for n in range(1, 21)]


def test_sketched_slots_fold_lowered_from_their_time() -> None:
    """Keys of a sketched slot release approximate from the decision's time (past the floor),
    the other keys stay exact; the sketch is the same either way (it holds every value)."""
    items = [(f"k{i % 4}", i) for i in range(80)]
    slots = {key_slot(f"k{n}", SLOTS) for n in range(4)}
    one = key_slot("k0", SLOTS)
    sketch = SketchSchedule.of([((40, 0), [one])], SLOTS)
    exact, mixed = released(uniques(), items, None), released(uniques(), items, sketch)
    assert len(slots) > 1  # k0 shares its slot with no other key here
    for (ts, key, want), (_, _, got) in zip(exact, mixed, strict=True):
        lowered = key_slot(key, SLOTS) == one and ts >= 40
        assert got.approximate == lowered
        assert got.sketch == want.sketch
        if lowered:
            assert got.exact is None and got.lower <= want.estimate <= got.upper


def test_floor_keeps_small_keys_exact() -> None:
    items = [("big", i) for i in range(20)] + [("small", 1), ("small", 2)]
    everything = SketchSchedule.of([((0, 0), range(SLOTS))], SLOTS)
    rows = released(uniques(floor=5), items, everything)
    assert not any(v.approximate for _, k, v in rows if k == "small")
    assert [v.approximate for _, k, v in rows if k == "big"] == [False] * 5 + [True] * 15


def test_builder_checks_and_lowered_step() -> None:
    flow = Dataflow("bad")
    with pytest.raises(GraphError, match="floor"):
        exact_or_approximate(flow, "u", flow.source("in"), floor=-1)
    graph = uniques(floor=3).build()
    low = lowered_step(graph.step("u.reduce"))
    assert low is not None and low.fn.reducer.__self__.exact_limit == 3
    assert lowered_step(graph.step("u.map")) is None
    assert ExactOrApproximateFold(lg_k=8).sketch_bytes() < ExactOrApproximateFold().sketch_bytes()


def sketch_runner(schedule: SketchSchedule, *, fast: bool) -> KeyedRunner:
    flow = Dataflow("mr")
    made = exact_or_approximate(
        flow, "count", flow.source("pairs"), key=lambda p: p[0], value=lambda p: p[1], floor=1
    )
    flow.sink("out", made)
    graph = SparkGraph(flow)
    (stage,) = [s for s in graph.stages if s.grouping]
    keyed = KeyedRunner(graph.graph, stage, graph.keys, graph.render)
    assert keyed.cycle is not None and keyed.sketchable
    keyed.fast = fast
    keyed._schedule = schedule
    (low,) = keyed.sketchable.values()
    keyed.cycle.schedule(schedule, low.fn)
    return keyed


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), at=st.integers(0, 40), chosen=st.sets(st.integers(0, SLOTS - 1)))
def test_fast_path_folds_as_the_general_path_under_a_schedule(data, at, chosen) -> None:
    schedule = SketchSchedule.of([((at, 0), sorted(chosen))], SLOTS)
    script = []
    for events, gc_at in data.draw(batches("sum")):
        mapped = [
            (ts, front, trace, flags, key, Mapped(key, ts * 10 + value.value))
            for ts, front, trace, flags, key, value in events
            if isinstance(value, Mapped)
        ]
        script.append((mapped, gc_at))
    fast, general = (sketch_runner(schedule, fast=f) for f in (True, False))
    both_paths_alike(script, fast, general, lambda: data.draw(st.booleans()))


def test_schedule_is_per_slot_and_monotone() -> None:
    schedule = SketchSchedule.of([((9, 0), [2]), ((5, 1), [2, 3])], SLOTS)
    assert schedule.since == {2: GlobalTime(5, 1), 3: GlobalTime(5, 1)}
    assert not schedule.lowered_slot(2, GlobalTime(5, 0))
    assert schedule.lowered_slot(2, GlobalTime(5, 1)) and not schedule.lowered_slot(
        1, GlobalTime(99, 0)
    )
    assert not SketchSchedule({}, SLOTS)
