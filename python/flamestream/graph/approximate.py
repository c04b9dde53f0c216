"""Declared approximate aggregations: an estimate per key with its error, and its sketch.

Each is :func:`~flamestream.graph.mapreduce.map_reduce` with a fold from
:mod:`flamestream.approx.folds` (a sketch per key, updated in global-time order) and releases,
per input item, ``Reduced(key, estimate)`` like :func:`count` does: the estimate carries its
bounds (or rank error) and confidence, and the sketch in Apache DataSketches' format, which
Spark SQL's ``hll_sketch_estimate``, ``theta_sketch_estimate`` and
``kll_sketch_get_quantile_double`` read (``docs/approximate.md``).

A sketch is state like any other: replays, invalidations, crashes, rescales and swaps give
the same released rows, byte for byte, as the reference runtime's in-order run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flamestream.approx.estimates import CONFIDENCE
from flamestream.approx.folds import (
    GUARANTEES,
    DistinctFold,
    ExactOrApproximateFold,
    FrequentFold,
    QuantileFold,
    SumFold,
)
from flamestream.errors import GraphError
from flamestream.graph.dataflow import Dataflow, Stream
from flamestream.graph.mapreduce import AggregateMapper, Reduced, map_reduce

#: ``distinct_count``'s sketch kinds.
DISTINCT_KINDS = ("hll", "theta")
#: The sizes DataSketches takes: HLL lg_k 4-21, theta 5-26.
_LG_K = {"hll": range(4, 22), "theta": range(5, 27)}


def _check(step_id: str, ok: bool, what: str, value: Any, example: str) -> None:
    if not ok:
        raise GraphError(step_id, what, f"{type(value).__name__} {value!r}", example)


def _check_functions(step_id: str, example: str, **functions: Any) -> None:
    for name, fn in functions.items():
        _check(step_id, fn is None or callable(fn), f"a callable {name} or None", fn, example)


def _check_distinct(step_id: str, example: str, sketch: str, lg_k: int, num_std_dev: int) -> None:
    """A distinct count's sketch kind, size and bounds' width, as DataSketches takes them."""
    _check(step_id, sketch in DISTINCT_KINDS, "sketch 'hll' or 'theta'", sketch, example)
    _check(step_id, lg_k in _LG_K.get(sketch, ()), f"lg_k in {_LG_K.get(sketch)}", lg_k, example)
    _check(step_id, num_std_dev in CONFIDENCE, "num_std_dev 1, 2 or 3", num_std_dev, example)


def _approximate(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    fold: Any,
    key: Callable[[Any], Any] | None,
    value: Callable[[Any], Any] | None,
) -> Stream:
    mapper = AggregateMapper(key, value)
    return map_reduce(flow, step_id, up, mapper=mapper, reducer=fold.reducer, initial=fold.initial)


def distinct_count(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
    sketch: str = "hll",
    lg_k: int = 12,
    num_std_dev: int = 2,
    exact_limit: int | None = None,
) -> Stream:
    """How many distinct ``value(item)`` per ``key(item)``: ``Reduced(key, DistinctCount)``.

    Every item releases its key's :class:`~flamestream.approx.DistinctCount`: the estimate,
    ``lower``/``upper`` at ``num_std_dev`` standard deviations (1, 2, 3: 68.27 %, 95.45 %,
    99.73 % confidence) and the sketch's bytes: an HLL (``sketch="hll"``, 2**lg_k 4-bit
    registers, read by ``hll_sketch_estimate``) or a compact theta sketch (``"theta"``, for
    set operations: ``theta_union``, ``theta_intersection``). Values are int, float or str,
    hashed as Spark's ``hll_sketch_agg`` hashes BIGINT and STRING columns. ``exact_limit``:
    a key's values are also kept exactly, and its count released exact, until it has more
    than this many (memory per key grows with it).

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("visitors")
    >>> seen = distinct_count(flow, "users", flow.source("visits"), key=lambda v: v[0],
    ...                       value=lambda v: v[1])
    >>> flow.sink("out", seen)
    >>> visits = [("home", "ann"), ("home", "bob"), ("home", "ann")]
    >>> [round(r.payload.value.estimate) for r in run_in_order(flow, visits).released()]
    [1, 2, 2]
    """
    example = "distinct_count(flow, 'users', visits, key=lambda v: v.page, value=lambda v: v.user)"
    _check_functions(step_id, example, key=key, value=value)
    _check_distinct(step_id, example, sketch, lg_k, num_std_dev)
    _check(
        step_id,
        exact_limit is None or (isinstance(exact_limit, int) and exact_limit >= 0),
        "exact_limit None or an int >= 0",
        exact_limit,
        example,
    )
    fold = DistinctFold(sketch, lg_k, num_std_dev, exact_limit)
    return _approximate(flow, step_id, up, fold, key, value)


def exact_or_approximate(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
    sketch: str = "hll",
    lg_k: int = 12,
    num_std_dev: int = 2,
    floor: int = 64,
) -> Stream:
    """A distinct count per key, exact until a state budget needs it approximate.

    Releases ``Reduced(key, DistinctCount)`` like :func:`distinct_count`. Every key keeps its
    values exactly (``approximate=False``, bounds equal to the count) while its keyed
    partition's state fits the query's budget. When the Spark runtime's budget policy
    (``BudgetPolicy(max_state_bytes_per_partition=...)``) would otherwise pass the budget, it
    sketches key slots between batches: from a global time recorded in the offset log, the
    keys of those slots with more than ``floor`` values drop their values at their next
    update and keep the sketch alone, releasing ``approximate=True`` with the sketch's bounds
    at ``num_std_dev``. A replay or restart makes the same choice; the reference runtime
    reproduces a recorded one (``run_in_order(..., sketch=...)``). Without a budget (or on
    the reference runtime without a schedule) every count is exact. See
    ``docs/approximate.md``.

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("visitors")
    >>> seen = exact_or_approximate(flow, "users", flow.source("visits"), key=lambda v: v[0],
    ...                             value=lambda v: v[1])
    >>> flow.sink("out", seen)
    >>> visits = [("home", "ann"), ("home", "bob"), ("home", "ann")]
    >>> [r.payload.value.estimate for r in run_in_order(flow, visits).released()]
    [1.0, 2.0, 2.0]
    """
    example = (
        "exact_or_approximate(flow, 'users', visits, key=lambda v: v.page, value=lambda v: v.user)"
    )
    _check_functions(step_id, example, key=key, value=value)
    _check_distinct(step_id, example, sketch, lg_k, num_std_dev)
    _check(
        step_id,
        isinstance(floor, int) and not isinstance(floor, bool) and floor >= 0,
        "floor an int >= 0",
        floor,
        example,
    )
    fold = ExactOrApproximateFold(sketch, lg_k, num_std_dev, floor)
    return _approximate(flow, step_id, up, fold, key, value)


def quantiles(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    ranks: Sequence[float] = (0.5, 0.99),
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
    k: int = 200,
) -> Stream:
    """Quantiles of ``value(item)`` per ``key(item)``: ``Reduced(key, Quantiles)``.

    A KLL doubles sketch of size ``k`` per key (normalized rank error 1.33 % at 99 % for the
    default 200). Each release holds the quantile at every rank of ``ranks`` (inclusive, the
    value Spark's ``kll_sketch_get_quantile_double`` reads from the released sketch), the
    values at ``rank ∓ rank_error`` that bound the exact quantile, and the sketch. Exact
    while a key has at most ``k`` values.

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("latency")
    >>> p = quantiles(flow, "p", flow.source("calls"), ranks=(0.5,), key=lambda c: c[0],
    ...               value=lambda c: c[1])
    >>> flow.sink("out", p)
    >>> calls = [("api", 30), ("api", 10), ("api", 20)]
    >>> [r.payload.value.values for r in run_in_order(flow, calls).released()]
    [(30.0,), (10.0,), (20.0,)]
    """
    example = (
        "quantiles(flow, 'p99', calls, ranks=(0.99,), key=lambda c: c.path, value=lambda c: c.ms)"
    )
    _check_functions(step_id, example, key=key, value=value)
    ranks = tuple(ranks) if isinstance(ranks, Sequence) and not isinstance(ranks, str) else ranks
    _check(
        step_id,
        isinstance(ranks, tuple)
        and bool(ranks)
        and all(
            isinstance(r, int | float) and not isinstance(r, bool) and 0 <= r <= 1 for r in ranks
        ),
        "ranks: a non-empty sequence of numbers in [0, 1]",
        ranks,
        example,
    )
    _check(step_id, isinstance(k, int) and 8 <= k <= 65535, "k an int in [8, 65535]", k, example)
    fold = QuantileFold(tuple(float(r) for r in ranks), k)
    return _approximate(flow, step_id, up, fold, key, value)


def heavy_hitters(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
    lg_max_k: int = 6,
    guarantee: str = "no_false_negatives",
    threshold: int | None = None,
    top: int | None = None,
) -> Stream:
    """The frequent ``value(item)`` (text) per ``key(item)``: ``Reduced(key, HeavyHitters)``.

    DataSketches' frequent items sketch with 2**lg_max_k counters per key (a count is off by
    at most 3.5 / 2**lg_max_k of the items seen). ``guarantee`` names what the list promises
    about items seen more than the threshold (the sketch's maximum error, or ``threshold`` if
    larger): ``"no_false_negatives"`` lists every such item, ``"no_false_positives"`` only
    such items. ``top`` caps how many are released, most frequent first.

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("top")
    >>> hot = heavy_hitters(flow, "hot", flow.source("views"), key=lambda v: v[0],
    ...                     value=lambda v: v[1], top=1)
    >>> flow.sink("out", hot)
    >>> views = [("fr", "a"), ("fr", "b"), ("fr", "b")]
    >>> [r.payload.value.items[0].item for r in run_in_order(flow, views).released()]
    ['a', 'a', 'b']
    """
    example = "heavy_hitters(flow, 'top', views, key=lambda v: v.country, value=lambda v: v.page)"
    _check_functions(step_id, example, key=key, value=value)
    _check(
        step_id,
        isinstance(lg_max_k, int) and 3 <= lg_max_k <= 26,
        "lg_max_k in 3..26",
        lg_max_k,
        example,
    )
    _check(step_id, guarantee in GUARANTEES, f"guarantee one of {GUARANTEES}", guarantee, example)
    for name, number in (("threshold", threshold), ("top", top)):
        ok = number is None or (isinstance(number, int) and number >= 0)
        _check(step_id, ok, f"{name} None or an int >= 0", number, example)
    fold = FrequentFold(lg_max_k, guarantee, threshold, top)
    return _approximate(flow, step_id, up, fold, key, value)


@dataclass(frozen=True, slots=True)
class TermEstimate:
    """:func:`sum_estimates`' value: ``(the estimate's own key, its estimate)``."""

    def __call__(self, item: Reduced[Any, Any]) -> tuple[Any, Any]:
        """The term and its latest estimate."""
        return item.key, item.value


def sum_estimates(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    key: Callable[[Any], Any] | None = None,
) -> Stream:
    """Sum the latest estimate of every key of ``up`` per ``key(item)``, bounds summed too.

    ``up`` is an approximate aggregation's stream (``Reduced(term, estimate)``); each term's
    newest estimate replaces its older one in the sum. The released
    :class:`~flamestream.approx.EstimateSum` holds the summed estimate and bounds: they hold
    at the least of the terms' confidences, whatever the terms' errors' correlation. The sum
    of distinct counts is the distinct count of the union only if the terms' sets are
    disjoint. ``key`` None: one sum over every term (key ``None``). State: every term's
    estimate, per key.
    """
    example = "sum_estimates(flow, 'all_users', users, key=lambda r: r.key.site)"
    _check_functions(step_id, example, key=key)
    fold = SumFold()
    mapper = AggregateMapper(key if key is not None else _everything, TermEstimate())
    return map_reduce(flow, step_id, up, mapper=mapper, reducer=fold.reducer, initial=fold.initial)


def _everything(item: Any) -> None:
    """``sum_estimates``' key without one: one sum over every term."""
    return None


def approximate_fold(step: Any) -> Any:
    """The approximate fold a ``.reduce`` map step runs, or None: what ``describe()`` names."""
    from flamestream.graph.mapreduce import ReduceStep

    fn = getattr(step, "fn", None)
    if not isinstance(fn, ReduceStep):
        return None
    owner = getattr(fn.reducer, "__self__", None)
    return owner if hasattr(owner, "describe") else None


def budget_fold(step: Any) -> ExactOrApproximateFold | None:
    """The fold of an ``exact_or_approximate`` ``.reduce`` map step, or None."""
    fold = approximate_fold(step)
    return fold if isinstance(fold, ExactOrApproximateFold) else None


def lowered_step(step: Any) -> Any:
    """An ``exact_or_approximate`` ``.reduce`` step folding lowered (None for other steps).

    The same map step with the fold of a sketched slot (``exact_limit=floor``): what a key's
    items fold with from the time the budget policy sketched its slot.
    """
    import dataclasses

    from flamestream.graph.mapreduce import ReduceStep

    fold = budget_fold(step)
    if fold is None:
        return None
    lowered = fold.lowered()
    reduce = ReduceStep(lowered.initial, lowered.reducer, step.fn.commutative)
    return dataclasses.replace(step, fn=reduce)
