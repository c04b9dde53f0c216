"""Approximate aggregations: deterministic under any arrival order, and as exact as they say.

* Under random schedules (fronts interleaved, deliveries delayed, replays and invalidations),
  every released row equals the in-order run's, sketch bytes included: KLL with a small ``k``
  so its compactions (and their coin) really happen, frequent items small enough to purge.
* Accuracy, on a skewed (Zipf) and a uniform data set: the exact distinct count lies within
  the released bounds on at least the stated confidence's share of keys (99 % at 3 standard
  deviations), the exact quantile's rank within the released rank error, and every frequent
  item's exact count within its bounds with no item above the threshold missing.
* A sum of estimates keeps the summed bounds. Its default key is None, which the property
  also guards: the grouping indexed tombstones under None, so a replayed version in the
  bucket of key None did not remove the version it invalidated. No Spark runs.
"""

from __future__ import annotations

import base64
import bisect
import json
import math
import random
from collections import Counter, defaultdict
from typing import Any

import datasketches
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import (
    Dataflow,
    GraphError,
    StepError,
    distinct_count,
    heavy_hitters,
    quantiles,
    sum_estimates,
)
from flamestream.approx import DistinctCount, render_json
from flamestream.approx.folds import DistinctFold, FrequentFold, QuantileFold, SumFold
from flamestream.model import GlobalTime
from flamestream.spark.plan.execution import plan_execution
from flamestream.testing import RandomScheduler, Script, run_in_order, run_script

from ..examples import examples


def page(event: tuple[str, str, float]) -> str:
    return event[0]


def user(event: tuple[str, str, float]) -> str:
    return event[1]


def latency(event: tuple[str, str, float]) -> float:
    return event[2]


def every_kind() -> Dataflow:
    """Each approximate aggregation, small enough to leave its exact mode within a test."""
    flow = Dataflow("approximate")
    hll, theta, exact, kll, frequent = flow.broadcast("events", flow.source("in"), 5)
    users, summed = flow.broadcast(
        "users", distinct_count(flow, "hll", hll, key=page, value=user, lg_k=4), 2
    )
    flow.sink("hll", users)
    flow.sink("sum", sum_estimates(flow, "total", summed))
    thetas = distinct_count(flow, "theta", theta, key=page, value=user, sketch="theta", lg_k=5)
    flow.sink("theta", thetas)
    flow.sink("exact", distinct_count(flow, "exact", exact, key=page, value=user, exact_limit=3))
    flow.sink("kll", quantiles(flow, "kll", kll, key=page, value=latency, k=8))
    flow.sink("hot", heavy_hitters(flow, "hot", frequent, key=page, value=user, lg_max_k=3))
    return flow


SINKS = ("hll", "sum", "theta", "exact", "kll", "hot")

EVENTS = st.lists(
    st.tuples(
        st.sampled_from("ab"),
        st.sampled_from([f"u{n}" for n in range(12)]),
        st.floats(0, 1000, allow_nan=False).map(lambda f: round(f, 1)),
    ),
    min_size=20,
    max_size=60,
)


@settings(max_examples=examples(40), deadline=None)
@given(events=EVENTS, seed=st.integers(0, 2**16))
def test_every_release_and_sketch_is_the_in_order_runs_under_any_arrival_order(events, seed):
    inputs = {front: [(n + 1, e) for n, e in enumerate(events[front::3])] for front in (0, 1, 2)}
    oracle = run_in_order(every_kind(), inputs)
    rng = random.Random(seed)
    script = Script()
    queues = {front: list(rows) for front, rows in inputs.items()}
    while any(queues.values()):
        front = rng.choice([f for f, rows in queues.items() if rows])
        ts, event = queues[front].pop(0)
        script.admit(front, event, ts=ts).deliver(rng.randint(0, 30))
    shuffled = run_script(every_kind(), script, scheduler=RandomScheduler(seed))
    for sink in SINKS:
        assert shuffled.rows(sink) == oracle.rows(sink), sink


def test_the_schedules_compact_kll_and_purge_frequent_items():
    """The property above is about sketches past their exact mode, not only small ones."""
    rng = random.Random(7)
    events = [(n + 1, ("a", f"u{rng.randrange(40)}", rng.random())) for n in range(200)]
    result = run_in_order(every_kind(), {0: events})
    assert any(r.payload.value.approximate for r in result.released("kll"))
    assert any(r.payload.value.max_error > 0 for r in result.released("hot"))
    assert any(r.payload.value.approximate for r in result.released("hll"))
    exact = [r.payload.value for r in result.released("exact")]
    assert not exact[0].approximate and exact[0].estimate == 1.0
    assert exact[-1].approximate


def fold_all(fold: Any, values: list[Any]) -> Any:
    """What a key's last release holds: ``values`` folded in order."""
    state = fold.initial(values[0])
    for value in values[1:]:
        state = fold.reducer(state, value)
    return state


def data_sets(keys: int, seed: int) -> dict[str, dict[int, list[int]]]:
    """Per key, a stream of user ids: Zipf-skewed sizes and values, and uniform ones."""
    rng = random.Random(seed)
    zipf = {}
    uniform = {}
    for key in range(keys):
        size = min(4000, int(rng.paretovariate(0.8) * 30))  # few large keys, many small
        zipf[key] = [int(rng.paretovariate(0.5)) for _ in range(size)]  # a few users often
        uniform[key] = [rng.randrange(rng.randrange(1, 3000)) for _ in range(rng.randrange(1, 600))]
    return {"zipf": zipf, "uniform": uniform}


@pytest.mark.parametrize("kind", ["zipf", "uniform"])
@pytest.mark.parametrize("sketch", ["hll", "theta"])
def test_the_exact_distinct_count_is_within_the_bounds_on_99_percent_of_keys(kind, sketch):
    fold = DistinctFold(sketch, lg_k=6 if sketch == "hll" else 5, num_std_dev=3)
    per_key = data_sets(300, seed=41)[kind]
    inside = estimated = 0
    for values in per_key.values():
        released = fold_all(fold, values)
        exact = len(set(values))
        inside += released.lower <= exact <= released.upper
        estimated += released.lower < released.upper
    assert released.confidence == 0.9973
    assert estimated > 50, "too few keys past the sketch's exact mode to tell"
    assert inside >= 0.99 * len(per_key)


def true_rank_range(ordered: list[float], value: float) -> tuple[float, float]:
    """The normalized ranks ``value`` has in ``ordered`` (ties make it a range)."""
    n = len(ordered)
    return bisect.bisect_left(ordered, value) / n, bisect.bisect_right(ordered, value) / n


@pytest.mark.parametrize("kind", ["zipf", "uniform"])
def test_the_quantiles_true_rank_is_within_the_rank_error_on_99_percent_of_keys(kind):
    fold = QuantileFold((0.1, 0.5, 0.99), k=16)
    per_key = data_sets(200, seed=42)[kind]
    inside = compacted = 0
    for values in per_key.values():
        released = fold_all(fold, [float(v) for v in values])
        ordered = sorted(float(v) for v in values)
        compacted += released.approximate
        ok = True
        for rank, value, low, high in zip(
            released.ranks, released.values, released.lower, released.upper, strict=True
        ):
            first, last = true_rank_range(ordered, value)
            ok &= first - released.rank_error <= rank <= last + released.rank_error
            exact = ordered[max(0, math.ceil(rank * len(ordered)) - 1)]
            ok &= low <= exact <= high
        inside += ok
    assert compacted > 50
    assert inside >= 0.99 * len(per_key)


@pytest.mark.parametrize("kind", ["zipf", "uniform"])
@pytest.mark.parametrize("guarantee", ["no_false_negatives", "no_false_positives"])
def test_frequent_items_bounds_always_hold_and_the_guarantee_is_kept(guarantee, kind):
    """Small maps purge often, some purges take every counter: DataSketches writes such a
    sketch as an empty one, losing its offset, which the fold restores (``_all_purged``)."""
    fold = FrequentFold(lg_max_k=3, guarantee=guarantee)
    for values in data_sets(150, seed=43)[kind].values():
        released = fold_all(fold, [str(v) for v in values])
        exact = Counter(str(v) for v in values)
        listed = {h.item for h in released.items}
        for hitter in released.items:
            assert hitter.lower <= exact[hitter.item] <= hitter.upper
        above = {item for item, n in exact.items() if n > released.threshold}
        if guarantee == "no_false_negatives":
            assert above <= listed
        else:
            assert listed <= above
        assert released.total == len(values)


def test_a_sum_of_estimates_holds_whenever_its_terms_hold():
    per_key = data_sets(60, seed=44)["zipf"]
    fold = DistinctFold("hll", lg_k=5, num_std_dev=2)
    total = None
    exact_sum = 0
    all_terms_inside = True
    for key, values in per_key.items():
        disjoint = [f"{key}:{v}" for v in values]
        released = fold_all(fold, disjoint)
        exact = len(set(disjoint))
        exact_sum += exact
        all_terms_inside &= released.lower <= exact <= released.upper
        total = SumFold().reducer(total, (key, released))
    assert total.terms == len(per_key) and total.confidence == 0.9545 and total.approximate
    assert total.lower <= total.estimate <= total.upper
    if all_terms_inside:
        assert total.lower <= exact_sum <= total.upper
    # a term's newer estimate replaces its older one
    again = SumFold().reducer(total, (0, DistinctCount("hll", 1.0, 1.0, 1.0, 1.0, b"")))
    assert again.terms == total.terms and again.estimate < total.estimate


def test_render_json_names_every_error_field_and_carries_the_sketch():
    flow = Dataflow("users")
    flow.sink("out", distinct_count(flow, "users", flow.source("in"), key=page, value=user))
    released = run_in_order(flow, [("home", "ann", 1.0), ("home", "bob", 2.0)]).released()
    row = json.loads(render_json(released[-1].payload))
    assert row["key"] == "home" and row["kind"] == "hll" and row["confidence"] == 0.9545
    assert row["lower"] <= row["estimate"] <= row["upper"]
    sketch = base64.b64decode(row["sketch"])
    assert sketch == released[-1].payload.value.sketch
    assert round(datasketches.hll_sketch.deserialize(sketch).get_estimate()) == 2


def test_a_value_no_sketch_hashes_fails_its_step_with_the_determinant():
    flow = Dataflow("users")
    flow.sink("out", distinct_count(flow, "users", flow.source("in"), value=lambda e: {"u": e}))
    with pytest.raises(StepError, match=r"users\.reduce.*int, float or str"):
        run_in_order(flow, ["ann"])


@pytest.mark.parametrize(
    ("build", "kwargs", "what"),
    [
        (distinct_count, {"sketch": "cpc"}, "sketch 'hll' or 'theta'"),
        (distinct_count, {"lg_k": 30}, "lg_k in"),
        (distinct_count, {"num_std_dev": 4}, "num_std_dev 1, 2 or 3"),
        (distinct_count, {"exact_limit": -1}, "exact_limit"),
        (quantiles, {"ranks": (0.5, 1.5)}, "ranks"),
        (quantiles, {"k": 4}, "k an int"),
        (heavy_hitters, {"guarantee": "maybe"}, "guarantee one of"),
        (heavy_hitters, {"top": -2}, "top None"),
    ],
)
def test_bad_parameters_fail_when_the_graph_is_built(build, kwargs, what):
    flow = Dataflow("bad")
    with pytest.raises(GraphError, match=what):
        build(flow, "agg", flow.source("in"), **kwargs)


def test_describe_names_each_approximate_aggregation_and_its_error():
    text = plan_execution(every_kind().build()).describe()
    assert "approximate hll: distinct count, HLL lg_k=4" in text
    assert "approximate theta: distinct count, theta lg_k=5" in text
    assert "approximate exact: distinct count" in text and "exact up to 3 values" in text
    assert "approximate kll: quantiles 0.5, 0.99, KLL k=8, rank error" in text
    assert "approximate hot: heavy hitters" in text


def test_keys_of_any_type_sum_in_one_order():
    counts: dict[Any, DistinctCount] = defaultdict(lambda: DistinctCount("hll", 1, 1, 1, 1.0, b""))
    forward = backward = None
    for term in [3, "a", (1, 2)]:
        forward = SumFold().reducer(forward, (term, counts[term]))
    for term in [(1, 2), "a", 3]:
        backward = SumFold().reducer(backward, (term, counts[term]))
    assert forward == backward


def scaled(event: tuple[str, str, float]) -> tuple[str, str, float]:
    return event[0], event[1].upper(), event[2] * 10


def as_is(event: tuple[str, str, float]) -> tuple[str, str, float]:
    return event


def swappable_sketches() -> Dataflow:
    """A map before the sketches: swapped, later values reach them changed."""
    flow = Dataflow("swapped")
    counts, kll = flow.broadcast("events", flow.map("m", flow.source("in"), as_is), 2)
    flow.sink("hll", distinct_count(flow, "hll", counts, key=page, value=user, lg_k=4))
    flow.sink("kll", quantiles(flow, "kll", kll, key=page, value=latency, k=8))
    return flow


@settings(max_examples=examples(20), deadline=None)
@given(events=EVENTS, cut=st.integers(0, 60), seed=st.integers(0, 2**16))
def test_a_swap_before_the_sketches_under_any_arrival_order_is_the_in_order_run(events, cut, seed):
    """Sketches carry over a function swap: what is folded before and after it is the
    in-order run's with the swap at the same global time, bytes included."""
    cut = min(cut, len(events))
    rng = random.Random(seed)
    script = Script()
    for ts, event in enumerate(events[:cut]):
        script.admit(0, event, ts=ts).deliver(rng.randint(0, 30))
    script.swap("m", scaled)
    for ts, event in enumerate(events[cut:], start=cut):
        script.admit(0, event, ts=ts).deliver(rng.randint(0, 30))
    swapped = run_script(swappable_sketches(), script, scheduler=RandomScheduler(seed))
    oracle = run_in_order(
        swappable_sketches(), list(events), swaps=[("m", scaled, GlobalTime(cut, 0))]
    )
    for sink in ("hll", "kll"):
        assert swapped.rows(sink) == oracle.rows(sink), sink
