"""The controller's policy, against a simulated pipeline with a known cost per tick."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.errors import ConfigError
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.control.admission import (
    AdmissionController,
    Budget,
    CostModel,
    Memory,
    Tick,
    decide,
)

from ..examples import examples


@dataclass
class Run:
    """One simulated run: per tick (end time s, rows, duration ms, limit, decisions so far)."""

    ticks: list[tuple[float, int, float, int, int]]
    backlog_end: int
    controller: AdmissionController


def simulate(
    overhead_ms: float,
    per_row_ms: float,
    rates: list[tuple[float, float]],
    budget: Budget,
    *,
    seconds: float = 60.0,
    noise: float = 0.0,
    seed: int = 0,
) -> Run:
    """A pipeline whose tick of n rows takes ``overhead + per_row * n`` ms (times ``noise``).

    ``rates``: (from second, rows per second), the first from 0. The controller is driven the
    way the front reader drives it: observe the previous tick at planning, then decide.
    """
    rng = random.Random(seed)

    def arrived(t: float) -> int:
        total = 0.0
        for i, (start, rate) in enumerate(rates):
            end = rates[i + 1][0] if i + 1 < len(rates) else float("inf")
            if t > start:
                total += (min(t, end) - start) * rate
        return int(total)

    controller = AdmissionController(budget)
    t, consumed, seq = 0.0, 0, -1
    ticks = []
    while t < seconds:
        controller.observe_planning(seq, now=t)
        limit = controller.next_limit()
        rows = min(arrived(t) - consumed, limit)
        if rows <= 0:
            t += 0.05  # Spark polls again
            continue
        seq += 1
        controller.planned(seq, rows, now=t)
        duration = (overhead_ms + per_row_ms * rows) * (1 + noise * rng.uniform(-1, 1))
        t += duration / 1000
        consumed += rows
        ticks.append((t, rows, duration, controller.limit, controller.decisions))
    return Run(ticks, arrived(t) - consumed, controller)


def test_cost_model_fits_a_line_exactly() -> None:
    model = CostModel.fit([Tick(100, 300.0), Tick(1000, 1200.0), Tick(500, 700.0)])
    assert model is not None
    assert model.overhead_ms == pytest.approx(200.0)
    assert model.per_row_ms == pytest.approx(1.0)
    assert model.rows_within(1200.0) == pytest.approx(1000.0)


def test_cost_model_with_one_batch_size_guesses_mostly_overhead() -> None:
    model = CostModel.fit([Tick(100, 400.0), Tick(100, 400.0)])
    assert model == CostModel(320.0, 0.8, exact=False)
    two = CostModel.fit([Tick(100, 300.0), Tick(1000, 1200.0)])  # two points: no noise estimate
    assert two == CostModel(600.0, 150.0 / 550, exact=False)
    assert CostModel.fit([Tick(0, 50.0)]) is None


def test_a_negative_overhead_is_noise() -> None:
    model = CostModel.fit([Tick(100, 50.0), Tick(1000, 1500.0), Tick(500, 700.0)])
    assert model is not None and model.exact and model.overhead_ms == 0.0


def test_close_batch_sizes_give_only_a_guess() -> None:
    """Sizes 5 and 7 with a little noise would fit any slope: not an exact model."""
    model = CostModel.fit([Tick(5, 52.0), Tick(7, 50.0), Tick(6, 53.0)])
    assert model is not None and not model.exact


def test_decide_keeps_the_budget_and_the_bounds() -> None:
    model = CostModel(200.0, 1.0)
    assert decide(Budget(2400.0, 10, None, 50), model, 50)[0] == 1000
    assert decide(Budget(2400.0, 10, 600, 50), model, 50)[0] == 600
    assert decide(Budget(2400.0, 2000, None, 50), model, 50)[0] == 2000
    limit, why = decide(Budget(300.0, 10, 5000, 50), model, 50)  # 150 ms < the overhead
    assert limit == 5000 and "over budget" in why
    assert decide(Budget(300.0, 10, None, 50), model, 50)[0] == 2**31 - 1
    assert decide(Budget(2400.0, 10, None, 50), None, 77) == (77, "no measurement yet")


def test_quiet_ticks_do_not_make_a_guess() -> None:
    """Small ticks under the limit measure mostly overhead: no decision from them alone."""
    controller = AdmissionController(Budget(2000.0, 10, None, 1000))
    controller.history.extend([Tick(5, 51.0), Tick(5, 51.0)])
    assert controller.next_limit() == 1000 and controller.decisions == 0
    controller.history.extend([Tick(1000, 1900.0)])  # cut by the limit, slow, budget holds
    assert controller.next_limit() == 1000 and controller.decisions == 0
    controller.history.extend([Tick(1000, 1900.0)])  # two such ticks break it: shrink
    assert controller.next_limit() < 1000 and controller.decisions == 1


def test_a_binding_limit_with_room_and_no_model_is_lifted() -> None:
    controller = AdmissionController(Budget(4000.0, 10, 50_000, 1000))
    controller.history.extend([Tick(1000, 300.0), Tick(1000, 310.0)])  # reached, 0.3 s of 2 s
    assert controller.next_limit() == 50_000 and controller.decisions == 1
    assert "lifted" in controller.log[-1].reason


def test_by_default_it_reads_like_no_limit_while_the_budget_holds() -> None:
    """No first limit given: unbounded, and no decision at all through a tenfold step that
    the pipeline absorbs within budget."""
    per_tick = 1000.0
    fits = (per_tick - 200.0) / 0.05
    high = 0.5 * fits / (per_tick / 1000)
    run = simulate(200.0, 0.05, [(0.0, high / 10), (20.0, high)], Budget(2000.0), seconds=50)
    assert run.controller.decisions == 0 and run.controller.limit == 2**31 - 1
    assert max(duration for _, _, duration, _, _ in run.ticks) <= per_tick


def test_an_overrun_from_a_burst_is_cut_in_one_decision() -> None:
    """Unbounded until a backlog burst makes a tick overrun; then one cut, to what fits."""
    per_tick = 1000.0
    fits = (per_tick - 200.0) / 0.05  # 16000 rows fit half the budget
    rates = [(0.0, 2000.0), (10.0, 400_000.0), (10.2, 2000.0)]  # 78k rows in 0.2 s
    run = simulate(200.0, 0.05, rates, Budget(2000.0), seconds=40)
    assert run.controller.decisions == 1
    assert abs(run.controller.limit - fits) < 0.05 * fits
    assert run.backlog_end < fits


def test_small_moves_are_not_decisions() -> None:
    controller = AdmissionController(Budget(2400.0, 10, None, 900))
    controller.history.extend([Tick(100, 300.0), Tick(1000, 1200.0), Tick(500, 700.0)])
    assert controller.next_limit() == 900  # wants 1000
    assert controller.decisions == 0
    controller.history.clear()
    controller.history.extend([Tick(100, 300.0), Tick(1000, 2200.0), Tick(500, 1200.0)])
    assert controller.next_limit() < 900 / 1.25
    assert controller.decisions == 1
    assert controller.record()["limit"] == controller.limit


def test_a_restart_resumes_from_the_offset() -> None:
    first = AdmissionController(Budget(2400.0, 10, None, 900))
    second = AdmissionController(Budget(2400.0, 10, None, 900))
    second.resume({"id": first.id, "limit": 321, "decisions": 4})
    assert (second.id, second.limit, second.decisions) == (first.id, 321, 4)


def test_progress_events_replace_own_timings() -> None:
    controller = AdmissionController(Budget(2400.0, 10, None, 900))
    controller.history.append(Tick(5, 99999.0))
    mine = {"endOffset": json.dumps({"controller": {"id": controller.id}})}
    other = {"endOffset": '{"controller": {"id": "someone-else"}}'}
    events = [
        {"sources": [mine], "numInputRows": 100, "durationMs": {"triggerExecution": 300}},
        {"sources": [other], "numInputRows": 7, "durationMs": {"triggerExecution": 9}},
        {"sources": [mine], "numInputRows": 1000, "durationMs": {"triggerExecution": 1200}},
    ]
    controller.observe_progress(events)
    assert list(controller.history) == [Tick(100, 300.0), Tick(1000, 1200.0)]


def test_progress_of_a_fused_front_counts_the_observed_records() -> None:
    """A front running a graph's first stage sends blocks: the model takes the records."""
    controller = AdmissionController(Budget(2400.0, 10, None, 900))
    mine = {"endOffset": json.dumps({"controller": {"id": controller.id}})}
    observed = {"flamestream": {"records": 4000}}
    events = [
        {"sources": [mine], "numInputRows": 6, "durationMs": {"triggerExecution": 800}},
        {
            "sources": [mine],
            "numInputRows": 6,
            "observedMetrics": observed,
            "durationMs": {"triggerExecution": 900},
        },
    ]
    controller.observe_progress(events)
    assert list(controller.history) == [Tick(6, 800.0), Tick(4000, 900.0)]


def test_over_a_memory_budget_the_limit_halves() -> None:
    budget = Budget(2400.0, 10, None, 900, max_buffered_rows=1000, max_state_bytes=10**6)
    model = CostModel(200.0, 1.0)
    assert decide(budget, model, 900, Memory(500, 10))[0] == 1000  # within: the latency rule
    limit, why = decide(budget, model, 900, Memory(5000, 10), largest=600)
    assert limit == 300 and why.startswith("buffer 5000 rows > 1000")
    limit, why = decide(budget, model, 900, Memory(0, 2 * 10**6), largest=0)
    assert limit == 450 and "state" in why
    assert decide(budget, model, 15, Memory(5000, 0), largest=15)[0] == 10  # the lower bound


def test_the_sinks_gauges_reach_the_controller_and_shrink_its_limit() -> None:
    controller = AdmissionController(Budget(2400.0, 10, None, 900, max_buffered_rows=1000))
    controller.history.extend([Tick(900, 1100.0), Tick(900, 1100.0)])
    controller.observe_gauges({"controller.other.bufferedRows": 9e9, "sink.files.x.batch": 3})
    assert controller.memory is None
    controller.observe_gauges({f"controller.{controller.id}.bufferedRows": 4000.0})
    assert controller.memory == Memory(4000.0, 0.0)
    assert controller.next_limit() == 450 and controller.decisions == 1
    assert "buffer 4000 rows" in controller.log[-1].reason


def test_budget_options_are_validated() -> None:
    options = OptionReader("front generator", {"targetLatencyMs": "0"})
    with pytest.raises(ConfigError, match="targetLatencyMs"):
        Budget.parse(options, None)
    options = OptionReader("front generator", {"minRecordsPerTrigger": "500"})
    with pytest.raises(ConfigError, match="at most maxRecordsPerTrigger"):
        Budget.parse(options, 100)
    conf = OptionReader("front generator", {}, {"targetLatencyMs": "-3"})
    with pytest.raises(ConfigError, match=r"spark\.flamestream\.targetLatencyMs"):
        Budget.parse(conf, None)


@settings(max_examples=examples(60), deadline=None)
@given(
    overhead=st.floats(50.0, 800.0),
    per_row=st.floats(0.002, 0.2),
    load=st.floats(0.2, 0.7),
    target=st.sampled_from([2000.0, 4000.0, 8000.0]),
    initial=st.sampled_from([100, 10_000, 1_000_000]),
    noise=st.sampled_from([0.0, 0.05]),
    seed=st.integers(0, 1000),
)
def test_a_tenfold_rate_step_is_within_budget_in_three_decisions(
    overhead: float,
    per_row: float,
    load: float,
    target: float,
    initial: int,
    noise: float,
    seed: int,
) -> None:
    """After the input rate jumps tenfold, the controller is back within budget in at most
    three decisions: every later tick ends within half the budget (one tick waiting + one
    processing = the budget) and the backlog stays bounded. Before the step, starting from
    any first limit, it settles too (in more decisions the further off the first limit is).

    ``load`` is how much of the pipeline's capacity at the budget the stepped-up rate uses.
    """
    per_tick = target / 2
    if overhead >= 0.8 * per_tick:
        return  # no batch size can meet the budget; covered by test_decide_...
    fits = (per_tick - overhead) / per_row  # rows one tick can take within the budget
    high = load * fits / (per_tick / 1000)  # rows/s after the step
    step = 30.0
    run = simulate(
        overhead,
        per_row,
        [(0.0, high / 10), (step, high)],
        Budget(target, 10, None, initial),
        seconds=90.0,
        noise=noise,
        seed=seed,
    )
    before = max((tick[4] for tick in run.ticks if tick[0] <= step), default=0)
    assert before <= 3 + math.log(max(fits / initial, initial / fits), 4)
    assert run.controller.decisions - before <= 3
    settled = [tick for tick in run.ticks if tick[4] == run.controller.decisions]
    after = [tick for tick in settled if tick[0] > step + 5]
    assert after, "the controller never settled after the step"
    pairs = [a[2] + b[2] for a, b in pairwise(after)]
    assert max(pairs, default=0) <= target * (1 + noise) * 1.05  # wait one tick + run one
    assert run.backlog_end <= max(fits, 10) * 1.5
