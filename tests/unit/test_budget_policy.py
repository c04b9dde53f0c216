"""The budget policy: memory budget held, deterministic, admission's latency rule otherwise.

Driven through the simulated keyed pipeline of ``benchmarks.lib.budget_model`` (bursts, a hot
key range, state per slot that grows per item and expires), and directly on random histories.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from benchmarks.lib.budget_model import Run, Workload, controller, fixed, simulate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flamestream.errors import ConfigError
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.control.admission import HISTORY, CostModel, Tick, decide
from flamestream.spark.control.budgeted import BudgetPolicy
from flamestream.spark.control.policy import (
    GROWTH_WINDOW,
    Budgets,
    Measurement,
    Setting,
    apply_moves,
    burst_bounds,
    growth_per_item,
    plan,
)

from ..examples import examples

QUICK = settings(
    max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def workloads(draw: st.DrawFn, within_bound: bool = False) -> tuple[Workload, Budgets]:
    """A bursty, skewed workload and budgets the first tick fits in.

    ``within_bound``: no slot receives more than 2x (the default ``burst_share``) its even
    share of a tick, with a margin for rounding to whole rows.
    """
    partitions = draw(st.sampled_from([2, 4, 8]))
    slots = 4 * partitions
    hot = draw(st.lists(st.integers(0, slots - 1), min_size=1, max_size=4, unique=True))
    burst_at = draw(st.floats(0.0, 8.0))
    hot_at = draw(st.floats(0.0, 8.0))
    workload = Workload(
        seconds=12.0,
        rate=draw(st.sampled_from([500.0, 2000.0, 5000.0])),
        burst=(burst_at, burst_at + draw(st.floats(0.5, 4.0))),
        burst_factor=draw(st.sampled_from([1.0, 10.0, 20.0])),
        hot=(hot_at, hot_at + draw(st.floats(0.5, 6.0))),
        hot_slots=tuple(hot),
        hot_share=draw(st.floats(0.0, 1.0 if not within_bound else most(len(hot), slots))),
        row_bytes=draw(st.sampled_from([50, 200, 1000])),
        window_ticks=draw(st.integers(1, 6)),
        cores=draw(st.integers(1, 4)),
    )
    min_rows = 100
    budget = draw(st.integers(2 * min_rows * workload.row_bytes, 5_000_000))
    budgets = Budgets(
        target_latency_ms=draw(st.sampled_from([500.0, 2000.0, 8000.0])),
        partitions=partitions,
        max_state_bytes_per_partition=budget,
        min_rows=min_rows,
        max_moves=draw(st.integers(1, 8)),
    )
    return workload, budgets


def first_over(run: Run, budget: int) -> int | None:
    """The first tick during which a partition's state passed ``budget`` (None: none)."""
    return next((i for i, t in enumerate(run.ticks) if t["peak_partition_bytes"] > budget), None)


def reported(run: Run, until: int) -> bool:
    """Whether a decision up to tick ``until`` reported a tick beyond the declared bounds."""
    return any(r.startswith("surprise") for t in run.ticks[: until + 1] for r in t["reasons"])


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.booleans())
def test_budget_held_or_surprise_reported(case: tuple[Workload, Budgets], lag: bool) -> None:
    """Whatever the keys do, also when a decided read limit applies a tick late (``lag``, as
    the fronts on Spark): a partition's state passes the budget only after a decision
    reported a tick beyond the declared burst bound (never silently)."""
    workload, budgets = case
    start = Setting.initial(budgets, workload.cores)
    run = simulate(workload, budgets, start, controller(budgets), lag=lag)
    budget = budgets.max_state_bytes_per_partition
    assert budget is not None
    over = first_over(run, budget)
    assert over is None or reported(run, over), run.ticks[: (over or 0) + 1][-5:]
    assert run.rows == sum(t["rows"] for t in run.ticks) > 0


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(within_bound=True), st.booleans())
def test_budget_never_exceeded_within_bound(case: tuple[Workload, Budgets], lag: bool) -> None:
    """A hot range that keeps to the declared bound (no slot above twice its even share of a
    tick, so no partition above twice its slots' share): the budget is never passed."""
    workload, budgets = case
    start = Setting.initial(budgets, workload.cores)
    run = simulate(workload, budgets, start, controller(budgets), lag=lag)
    budget = budgets.max_state_bytes_per_partition
    assert budget is not None
    assert run.peak_partition_bytes <= budget, run.ticks[-5:]


def test_hot_range_beyond_bound_is_reported() -> None:
    """All rows on one key range, beyond twice its partition's share: the decision after
    the tick says so (partition, rows, bound), the budget still holds here (headroom)."""
    workload = Workload(
        seconds=6.0,
        rate=2000.0,
        burst_factor=1.0,
        hot=(2.0, 4.0),
        hot_slots=(0,),
        hot_share=1.0,
        cores=4,
    )
    budgets = Budgets(target_latency_ms=2000.0, partitions=4, max_state_bytes_per_partition=10**6)
    run = simulate(workload, budgets, Setting.initial(budgets, 4), controller(budgets))
    said = [r for t in run.ticks for r in t["reasons"] if r.startswith("surprise")]
    assert said and "partition 0 received" in said[0] and "burst bound" in said[0], said
    assert run.summary(10**6)["surprises"] >= 1
    calm = replace(workload, hot_share=0.0)
    quiet = simulate(calm, budgets, Setting.initial(budgets, 4), controller(budgets))
    assert quiet.surprises() == 0
    assert run.peak_partition_bytes <= 10**6


@QUICK
@given(workloads())
def test_decisions_bounded_and_deterministic(case: tuple[Workload, Budgets]) -> None:
    """Two runs decide the same; moves per tick stay within max_moves, slots within active."""
    workload, budgets = case
    start = Setting.initial(budgets, workload.cores)
    first = simulate(workload, budgets, start, controller(budgets))
    again = simulate(workload, budgets, start, controller(budgets))
    assert first.ticks == again.ticks
    assert all(t["moves"] <= budgets.max_moves for t in first.ticks)
    assert all(1 <= t["active"] <= budgets.partitions for t in first.ticks)


def most(hot: int, slots: int) -> float:
    """The largest hot share keeping each hot slot under 2x its even share (a margin)."""
    return min(1.0, 0.8 * hot / (slots - hot))


histories = st.lists(
    st.tuples(st.integers(1, 200_000), st.floats(1.0, 60_000.0)), min_size=1, max_size=8
)


@settings(max_examples=examples(200), deadline=None)
@given(histories, st.integers(100, 1_000_000), st.sampled_from([None, 10**15]))
def test_latency_rule_is_admissions(
    ticks: list[tuple[int, float]], limit: int, budget: int | None
) -> None:
    """Where memory does not bind, the read limit is the admission controller's ``decide``."""
    budgets = Budgets(target_latency_ms=4000.0, partitions=2, max_state_bytes_per_partition=budget)
    setting = Setting(limit, 2, tuple(s % 2 for s in range(budgets.slots)), 1.0)
    slots = budgets.slots
    history = [
        Measurement(rows, ms, (rows // slots,) * slots, (10,) * slots, (1,) * slots, 0, 2)
        for rows, ms in ticks
    ]
    model = CostModel.fit([Tick(r, d) for r, d in ticks[-HISTORY:]])
    wanted = decide(budgets.admission(), model, limit)[0]
    decided = plan(budgets, setting, history)
    assert decided.setting.limit == wanted
    assert plan(budgets, setting, history) == decided  # a pure function of its inputs


def test_hot_range_spread_then_capped() -> None:
    """A hot partition near the budget: its slots move first, admission is cut after."""
    budgets = Budgets(
        target_latency_ms=2000.0, partitions=4, max_state_bytes_per_partition=1_000_000
    )
    slots = budgets.slots
    setting = Setting(10_000, 2, tuple(s % 2 for s in range(slots)), 100.0)
    # partition 0 holds 600 kB in its eight slots and took all the items (100 bytes each)
    slot_bytes = tuple(75_000 if s % 2 == 0 else 0 for s in range(slots))
    items = tuple(750 if s % 2 == 0 else 0 for s in range(slots))
    last = Measurement(6000, 900.0, items, slot_bytes, slot_bytes, 0, 2)
    decided = plan(budgets, setting, [last])
    assert decided.moves, decided.reasons
    assert all(m.source == 0 for m in decided.moves)
    after = apply_moves(setting, decided.moves)
    assert after.assignment == decided.setting.assignment
    held = [sum(b for s, b in enumerate(slot_bytes) if after.assignment[s] == p) for p in range(4)]
    growth = decided.setting.growth_per_item
    assert growth == 100.0
    bounds = burst_bounds(budgets, after.assignment, after.active, [last])
    # each partition's declared worst case (its burst bound of the rows) fits the budget
    worst = [held[p] + decided.setting.limit * growth * b for p, b in enumerate(bounds)]
    assert max(worst) <= 1_000_000, worst
    assert decided.setting.limit < 10_000
    # declaring no bound (every row may land in one partition) caps at least as hard
    cautious = plan(replace(budgets, burst_share=math.inf), setting, [last])
    assert max(held) + cautious.setting.limit * growth <= 1_000_000
    assert cautious.setting.limit <= decided.setting.limit


def test_no_growth_measured_reads_little() -> None:
    """Under a memory budget, the first ticks read ``min_rows`` until growth is measured."""
    budgets = Budgets(partitions=2, max_state_bytes_per_partition=10**6, min_rows=250)
    assert Setting.initial(budgets, cores=2).limit == 250
    assert Setting.initial(Budgets(partitions=2), cores=2).limit == 2**31 - 1
    idle = Measurement(0, 100.0, (0,) * 8, (0,) * 8, (0,) * 8)
    assert growth_per_item(None, [idle]) is None
    assert growth_per_item(7.0, [idle]) == 7.0
    grew = Measurement(10, 100.0, (10,) + (0,) * 7, (500,) + (0,) * 7, (500,) + (0,) * 7)
    assert growth_per_item(7.0, [grew]) == 50.0


def test_growth_forgets_key_creating_start() -> None:
    """The first ticks create keys (175 bytes per item), later ones update them (5): after
    ``GROWTH_WINDOW`` ticks the estimate is the recent rate, unless a partition near its
    budget grew faster in the last tick."""
    slots = 8

    def tick(per_item: int, items: int = 100) -> Measurement:
        return Measurement(
            items * slots, 100.0, (items,) * slots, (0,) * slots, (per_item * items,) * slots
        )

    start = [tick(175)] * 2
    assert growth_per_item(None, start) == 175.0
    assert growth_per_item(None, [*start, tick(5)]) > 5.0
    assert growth_per_item(None, [*start, *[tick(5)] * GROWTH_WINDOW]) == 5.0
    hot = Measurement(800, 100.0, (100,) * slots, (0,) * slots, (9000,) + (500,) * 7)
    assert growth_per_item(None, [*[tick(5)] * 3, hot], near_budget=[[0]]) == 90.0


def test_workload_warm_start_needs_the_window() -> None:
    """On a simulated key-creating start (1,000 bytes per item for 3 ticks, 100 after), the
    controller reads more after the window than a policy keeping the start's rate would."""
    workload = Workload(seconds=20.0, row_bytes=100, new_key_bytes=1000, warm_ticks=3)
    budgets = Budgets(target_latency_ms=2000.0, partitions=4, max_state_bytes_per_partition=10**6)
    run = simulate(workload, budgets, Setting.initial(budgets, 2), controller(budgets))
    assert run.peak_partition_bytes <= 10**6
    late = [t["next_limit"] for t in run.ticks[3 + GROWTH_WINDOW :]]
    # under the start's 1,000 bytes per item, 2 partitions of 1 MB hold < 1,000 rows a tick
    assert max(late) > 2 * 10**6 // 1000


def test_controller_beats_fixed_settings_in_budget() -> None:
    """On the default bursty, skewed workload: the budget held, p99 at most the best fixed
    setting that also holds it, throughput at least its."""
    workload = Workload(seconds=40.0, burst=(12.0, 20.0), hot=(8.0, 28.0))
    budget = 3_000_000
    budgets = Budgets(target_latency_ms=2000.0, partitions=4, max_state_bytes_per_partition=budget)
    ours = simulate(workload, budgets, Setting.initial(budgets, 2), controller(budgets))
    held = []
    for limit in (1000, 4000, 16000, 2**31 - 1):
        for n in (1, 2, 4):
            start = Setting(limit, n, tuple(s % n for s in range(budgets.slots)))
            run = simulate(workload, budgets, start, fixed())
            if run.peak_partition_bytes <= budget:
                held.append(run.summary(budget))
    mine = ours.summary(budget)
    assert mine["budget_held"]
    best = min(held, key=lambda r: r["p99_ms"])
    assert mine["p99_ms"] <= best["p99_ms"]
    assert mine["rows_per_second"] >= best["rows_per_second"] * 0.99


def test_burst_share_option_round_trip() -> None:
    """``BudgetPolicy(burst_share=)`` reaches the policy through the control channel's
    options; a bound below the observed share is refused before the query starts."""
    policy = BudgetPolicy(max_state_bytes_per_partition=10**6, burst_share=3.0)
    parsed = BudgetPolicy.parse(OptionReader("control", policy.options(cores=2)))
    assert parsed is not None and parsed.burst_share == 3.0
    assert parsed.budgets(4).burst_share == 3.0
    cautious = BudgetPolicy.parse(OptionReader("control", {"budget": "on", "burstShare": "inf"}))
    assert cautious is not None and cautious.budgets(4).burst_share == math.inf
    with pytest.raises(ConfigError, match="burstShare"):
        BudgetPolicy.parse(OptionReader("control", {"budget": "on", "burstShare": "0.5"}))
