"""The CPU budget: the policy holds CPU per record by cheaper settings, and says when it cannot.

The rule alone (:mod:`flamestream.spark.control.cpu`) on hand-made ticks, then the whole
policy in the simulated keyed pipeline of ``benchmarks.lib.budget_model``, whose CPU cost
per tick is ``batch + task x active + row x rows``: random steady workloads where the budget
is reachable must end under it, with the latency and memory budgets still held; the same
workloads without a CPU budget must be over it (so the test can fail).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from benchmarks.lib.budget_model import Run, Workload, controller, simulate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flamestream.errors import ConfigError
from flamestream.jvm import Shim
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.control.admission import CostModel
from flamestream.spark.control.budgeted import BudgetPolicy, CpuMeter
from flamestream.spark.control.cpu import AIM, CpuTick, choose, per_record_us, rows_for, windowed
from flamestream.spark.control.policy import Budgets, Setting

from ..examples import examples

QUICK = settings(
    max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def ticks(rows: list[int], overhead_ms: float, per_row_ms: float, active: int = 2) -> list[CpuTick]:
    """Ticks of a pipeline whose batches cost ``overhead + per_row x rows`` ms of CPU."""
    return [CpuTick(r, 500.0, overhead_ms + per_row_ms * r, active) for r in rows]


def test_window_keeps_the_newest_ticks_within_it() -> None:
    found = windowed(ticks([1, 2, 3, 4], 10.0, 0.0), window_ms=1200.0)
    assert [t.rows for t in found] == [3, 4]
    assert [t.rows for t in windowed(ticks([5], 1.0, 0.0), window_ms=1.0)] == [5]
    unmeasured = [CpuTick(9, 500.0, None, 1), *ticks([7], 1.0, 0.0)]
    assert [t.rows for t in windowed(unmeasured, 10_000.0)] == [7]


def test_per_record_and_the_batch_size_that_holds_a_budget() -> None:
    assert per_record_us(ticks([1000, 1000], 100.0, 0.01)) == pytest.approx(110.0)
    assert per_record_us([CpuTick(0, 1.0, 5.0, 1)]) is None
    model = CostModel(overhead_ms=100.0, per_row_ms=0.01)  # 10 us a row
    assert rows_for(model, 20.0) == pytest.approx(10_000)  # 100 ms / (20 - 10) us
    assert math.isinf(rows_for(model, 10.0))


def test_over_budget_asks_for_larger_batches() -> None:
    history = ticks([500, 1000, 2000], 100.0, 0.01)  # 210 .. 60 us a record
    choice = choose(30.0, 60_000.0, 5000.0, history, 1_000_000, 2, 1, None)
    assert choice.per_record_us is not None and choice.per_record_us > 30.0
    assert choice.wait_rows == math.ceil(100_000 / (AIM * 30.0 - 10.0))
    assert choice.max_wait_ms == 2500.0
    assert choice.held is False  # not yet: over it now, and said with what is done
    assert any("not held" in r and "batches of" in r and "from now" in r for r in choice.reasons)
    same_size = choose(30.0, 60_000.0, 5000.0, ticks([800] * 3, 100.0, 0.01), 10**6, 2, 1, None)
    assert same_size.wait_rows == 1600  # one size cannot tell c0 from c1: twice as large


def test_per_row_cost_alone_over_budget_is_reported() -> None:
    choice = choose(5.0, 60_000.0, 5000.0, ticks([500, 1000, 2000], 100.0, 0.01), 10**6, 2, 1, None)
    assert choice.held is False
    assert any("not held" in r and "at any batch size" in r for r in choice.reasons)
    assert choice.wait_rows == 0


def test_latency_first_when_the_batches_needed_are_too_large() -> None:
    history = ticks([500, 1000, 2000], 100.0, 0.01)
    choice = choose(30.0, 60_000.0, 5000.0, history, 3000, 2, 1, None)
    assert choice.wait_rows == 3000
    assert any("latency and memory budgets allow 3000" in r for r in choice.reasons)
    assert choice.held is False


def test_fewer_partitions_while_over_within_latency_and_memory() -> None:
    history = ticks([500, 1000, 2000], 100.0, 0.01, active=4)
    assert choose(30.0, 60_000.0, 5000.0, history, 10**6, 4, 1, None).active_ceiling == 3
    # the memory budget needs the four partitions: no ceiling below them
    assert choose(30.0, 60_000.0, 5000.0, history, 10**6, 4, 4, None).active_ceiling is None
    # a batch on three cores would pass half the latency budget
    slow = [replace(t, duration_ms=2000.0) for t in history]
    assert choose(30.0, 60_000.0, 5000.0, slow, 10**6, 4, 1, 4).active_ceiling == 4
    # under the budget it stays (giving cores back would raise the cost: flapping)
    cheap = ticks([5000, 10_000, 20_000], 1.0, 0.001, active=3)
    assert choose(30.0, 60_000.0, 5000.0, cheap, 10**6, 3, 1, 3).active_ceiling == 3
    # latency first: a tick over half the latency budget, or a backlog, lifts it
    slow_tick = [*cheap[:-1], replace(cheap[-1], duration_ms=2600.0)]
    assert choose(30.0, 60_000.0, 5000.0, slow_tick, 10**6, 3, 1, 3).active_ceiling is None
    behind = [*cheap[:-1], replace(cheap[-1], backlog=30_000)]
    assert choose(30.0, 60_000.0, 5000.0, behind, 10**6, 3, 1, 3).active_ceiling is None
    # the batch size follows the fit down too, once the cost allows smaller batches
    assert choose(30.0, 60_000.0, 5000.0, cheap, 10**6, 3, 1, 3, 20_000).wait_rows == 44


def test_not_measured_decides_nothing() -> None:
    choice = choose(30.0, 60_000.0, 5000.0, [CpuTick(10, 5.0, None, 1)], 100, 1, 1, 2)
    assert choice.wait_rows == 0 and choice.active_ceiling == 2
    assert choice.reasons == ("cpu: not measured yet",)


def test_meter_attributes_only_consecutive_batches() -> None:
    class FakeShim:  # the endpoint's reply only: the meter's bookkeeping is under test
        def __init__(self) -> None:
            self.total = 0.0

        def request(self, op: str) -> dict[str, object]:
            assert op == "cpu"
            return {"measured": True, "totalMs": self.total}

    shim, meter = FakeShim(), CpuMeter()
    assert meter.batch_ms(3, shim) is None  # type: ignore[arg-type]  # no reading before
    shim.total = 250.0
    assert meter.batch_ms(4, shim) == 250.0  # type: ignore[arg-type]
    shim.total = 400.0
    assert meter.batch_ms(6, shim) is None  # type: ignore[arg-type]  # batch 5 not read
    assert meter.batch_ms(7, shim) == 0.0  # type: ignore[arg-type]
    shim.total = 300.0
    assert meter.batch_ms(8, shim) is None  # type: ignore[arg-type]  # went down


def steady(rate: float, cores: int = 2) -> Workload:
    """No burst and no hot range: only the CPU budget's levers matter."""
    return Workload(
        seconds=40.0,
        rate=rate,
        burst=(0.0, 0.0),
        burst_factor=1.0,
        hot=(0.0, 0.0),
        hot_share=0.0,
        overhead_ms=200.0,
        per_row_ms=0.02,
        cores=cores,
        idle_ms=50.0,
    )


def tail_cpu_us(run: Run) -> float:
    """CPU per record over the second half of the run (after the policy settled)."""
    half = run.ticks[len(run.ticks) // 2 :]
    rows = sum(t["rows"] for t in half)
    return 1000 * sum(t["cpu_ms"] for t in half) / max(1, rows)


@QUICK
@given(
    rate=st.sampled_from([300.0, 1000.0, 3000.0]),
    cores=st.sampled_from([2, 4]),
    slack=st.floats(1.3, 3.0),
    share=st.floats(0.05, 0.8),
    memory=st.booleans(),
)
def test_reachable_cpu_budget_is_held_with_the_others(
    rate: float, cores: int, slack: float, share: float, memory: bool
) -> None:
    workload = steady(rate, cores)
    budgets = Budgets(target_latency_ms=5000.0, partitions=4, min_rows=50)
    if memory:
        budgets = replace(budgets, max_state_bytes_per_partition=2_000_000)
    free = simulate(workload, budgets, Setting.initial(budgets, cores), controller(budgets))
    # a budget below what the query costs unmanaged, and reachable: the batches it needs
    # (one core's worth of rows at the per-record floor) fit half the latency budget
    floor_us = 1000 * workload.cpu_per_row_ms
    budget_us = max(slack * floor_us, share * tail_cpu_us(free))
    fixed_ms = workload.cpu_batch_ms + workload.cpu_task_ms
    needed = 1000 * fixed_ms / (AIM * budget_us - floor_us)
    if needed > rate * 2.0:  # the input cannot fill such batches within the wait
        return
    held = replace(budgets, max_cpu_us_per_record=budget_us, cpu_window_ms=10_000.0)
    run = simulate(workload, held, Setting.initial(held, cores), controller(held))
    assert tail_cpu_us(free) > budget_us  # unmanaged, the budget is broken
    assert tail_cpu_us(run) <= budget_us * 1.05, run.ticks[-5:]
    assert run.summary(None)["p99_ms"] <= 2 * held.target_latency_ms
    if memory:
        assert run.peak_partition_bytes <= 2_000_000 or run.surprises()
    assert run.rows == free.rows  # every row read, none twice


def test_unreachable_cpu_budget_is_reported_and_latency_kept() -> None:
    workload = steady(1000.0)
    budgets = Budgets(target_latency_ms=2000.0, partitions=4, max_cpu_us_per_record=10.0)
    run = simulate(workload, budgets, Setting.initial(budgets, 2), controller(budgets))
    said = [r for t in run.ticks for r in t["reasons"] if r.startswith("cpu: not held")]
    assert any("at any batch size" in r for r in said)  # 20 us a row alone
    assert len(said) >= len(run.ticks) - 2  # every decision it is over says so
    assert run.summary(None)["p99_ms"] <= 2 * budgets.target_latency_ms


def test_cpu_decisions_are_deterministic() -> None:
    workload = steady(1000.0)
    budgets = Budgets(partitions=4, max_cpu_us_per_record=80.0, cpu_window_ms=5000.0)
    runs = [
        simulate(workload, budgets, Setting.initial(budgets, 2), controller(budgets))
        for _ in range(2)
    ]
    assert runs[0].ticks == runs[1].ticks


def test_cpu_options_round_trip_and_are_validated() -> None:
    policy = BudgetPolicy(max_cpu_us_per_record=25.0, cpu_window_ms=30_000.0)
    parsed = BudgetPolicy.parse(OptionReader("control", policy.options(4)))
    assert parsed is not None
    assert parsed.max_cpu_us_per_record == 25.0 and parsed.cpu_window_ms == 30_000.0
    assert parsed.cores is None and parsed.start_cores == 4  # follows the live cores
    pinned = BudgetPolicy.parse(OptionReader("control", BudgetPolicy(cores=3).options(4)))
    assert pinned is not None and pinned.cores == 3
    bad = {**policy.options(4), "maxCpuMicrosPerRecord": "-1"}
    with pytest.raises(ConfigError, match="maxCpuMicrosPerRecord"):
        BudgetPolicy.parse(OptionReader("control", bad))


class Endpoint(Shim):
    """A shim client whose endpoint replies ``executors`` (the cores bookkeeping only)."""

    def __init__(self, cores: int) -> None:
        super().__init__(0, "", {})
        self.cores = cores

    def request(self, op: str, timeout: float = 5.0, **fields: object) -> dict[str, object]:
        assert op == "executors"
        return {"executors": 1, "cores": self.cores, "list": []}


def test_cores_follow_the_live_executors_unless_declared() -> None:
    from flamestream.spark.control.budgeted import BudgetController

    follows = BudgetController(BudgetPolicy(start_cores=2), partitions=8)
    follows._shim = Endpoint(6)
    assert follows.cores() == 6  # the cluster grew since the query started
    follows._shim = None
    assert follows.cores() == 2  # no shim: Spark's default parallelism at the start
    pinned = BudgetController(BudgetPolicy(cores=3, start_cores=2), partitions=8)
    pinned._shim = Endpoint(6)
    assert pinned.cores() == 3


def test_budgets_own_the_cluster_following(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``follow_cluster`` beside budgets: the policy follows the cores, no second follower."""
    from flamestream.spark.control.channels import ControlReader
    from flamestream.spark.control.key_layout import ElasticPolicy

    follow = ElasticPolicy(follow_cluster=True)
    assert ControlReader(str(tmp_path), 4, follow).follower is not None
    assert ControlReader(str(tmp_path), 4, follow, BudgetPolicy()).follower is None


def test_the_state_budget_overrules_the_cpu_ceiling() -> None:
    """A state that only grows needs partitions the CPU rule took away: they come back.

    (Found on Spark: a word count whose state grew past one partition's budget stalled on
    the one partition the CPU rule had left it.)
    """
    workload = replace(
        steady(1000.0), seconds=30.0, window_ticks=100_000, row_bytes=100, backlog_seen=False
    )
    budgets = Budgets(
        target_latency_ms=5000.0,
        partitions=4,
        min_rows=50,
        max_state_bytes_per_partition=2_000_000,  # the final 3 MB needs 3 at half each
        max_cpu_us_per_record=50.0,  # far below the cost: the ceiling goes to 1 at first
        cpu_window_ms=10_000.0,
    )
    run = simulate(workload, budgets, Setting.initial(budgets, 2), controller(budgets))
    assert run.rows == 30_000  # all read: no stall on one partition
    assert run.peak_partition_bytes <= 2_000_000 or run.surprises()
    assert any(t["active"] == 1 for t in run.ticks)  # the CPU rule did scale in
    assert run.ticks[-1]["active"] >= 3, [(t["rows"], t["active"]) for t in run.ticks[-5:]]
