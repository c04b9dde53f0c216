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
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.control.budgeted import BudgetPolicy
from flamestream.spark.control.policy import Budgets, Measurement, Setting, plan
from flamestream.spark.durable.slots import SlotLoads
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


def full_tick(slot_bytes: tuple[int, ...], slot_keys: tuple[int, ...]) -> Measurement:
    """A tick of 800 rows, 100 per slot, each slot grown by 1,000 bytes."""
    slots = len(slot_bytes)
    return Measurement(
        800, 500.0, (100,) * slots, slot_bytes, (1000,) * slots, cores=2, slot_keys=slot_keys
    )


def sketch_budgets(per_key: int | None, budget: int = 38_000) -> Budgets:
    return Budgets(
        target_latency_ms=2000.0,
        partitions=2,
        max_state_bytes_per_partition=budget,
        min_rows=50,
        sketch_bytes_per_key=per_key,
    )


#: Both partitions nearly full (slots spread nowhere); partition 1's slots and slot 2 hold
#: many small keys, which sketches would not make smaller.
FULL = (9_000, 9_000, 9_500, 9_000, 9_000, 9_000, 8_000, 9_000)
KEYS = (10, 500, 200, 500, 20, 500, 10, 500)
HALVES = tuple(s % 2 for s in range(8))


def test_policy_sketches_the_largest_savings_of_a_full_partition() -> None:
    budgets = sketch_budgets(100)
    setting = Setting(10_000, 2, HALVES, growth_per_item=10.0)
    decided = plan(budgets, setting, [full_tick(FULL, KEYS)] * 4)
    # savings: slot 0 8,000, slot 4 7,000, slot 6 7,000; slot 2 and partition 1's none
    assert decided.setting.sketched == (0, 4, 6)
    assert any(r.startswith("sketch slots 0:8000 4:7000 6:7000") for r in decided.reasons)
    assert plan(budgets, setting, [full_tick(FULL, KEYS)] * 4) == decided  # pure


def test_sketched_partitions_keep_reading_min_rows() -> None:
    """Capped below min_rows without sketches; with every capped partition sketched, the
    cap stays at min_rows (sketched keys shrink only as they are read)."""
    setting = Setting(10_000, 2, HALVES, growth_per_item=10.0)
    history = [full_tick(FULL, (10,) * 8)] * 4
    capped = plan(sketch_budgets(None, 36_400), setting, history)
    assert capped.setting.sketched == () and capped.setting.limit < 50
    sketched = plan(sketch_budgets(100, 36_400), setting, history)
    assert set(sketched.setting.sketched) & {0, 2, 4, 6}
    assert set(sketched.setting.sketched) & {1, 3, 5, 7}
    assert sketched.setting.limit == 50


def test_sketched_slots_only_grow() -> None:
    budgets = sketch_budgets(100)
    roomy = (100,) * 8
    setting = Setting(1000, 2, tuple(s % 2 for s in range(8)), 10.0, sketched=(3, 5))
    decided = plan(budgets, setting, [full_tick(roomy, (1,) * 8)] * 4)
    assert decided.setting.sketched == (3, 5)
    assert not any(r.startswith("sketch") for r in decided.reasons)


def test_sketch_option_round_trip() -> None:
    policy = BudgetPolicy(max_state_bytes_per_partition=1000, sketch_bytes_per_key=300)
    parsed = BudgetPolicy.parse(OptionReader("control", policy.options(2)))
    assert parsed is not None and parsed.budgets(2).sketch_bytes_per_key == 300
    off = BudgetPolicy(max_state_bytes_per_partition=1000, sketch_bytes_per_key=300, sketch=False)
    assert "sketchBytesPerKey" not in off.options(2)
    assert off.budgets(2).sketch_bytes_per_key is None
    graph = SparkGraph(uniques(), budgets=BudgetPolicy(max_state_bytes_per_partition=10**6))
    assert graph.budgets is not None
    assert (
        graph.budgets.sketch_bytes_per_key == ExactOrApproximateFold(lg_k=8, floor=2).sketch_bytes()
    )


def test_slot_sizes_summed_over_groupings(tmp_path) -> None:
    """Two groupings' tasks hold slot 3: its bytes and keys are theirs together (each task
    used to overwrite the other's); files of before key counts still read."""
    store = SlotLoads(str(tmp_path))
    store.write(7, "a-00000", {3: 10}, {3: (100, 200, 4)})
    store.write(7, "b-00000", {3: 5}, {3: (50, 70, 2), 1: (0, 9, 1)})
    store.write(7, "c-00001", {2: 1}, {2: (1, 2)})
    assert store.read_sizes(7) == {3: (150, 270), 1: (0, 9), 2: (1, 2)}
    assert store.read_slots(7) == {3: (150, 270, 6), 1: (0, 9, 1), 2: (1, 2, 0)}
