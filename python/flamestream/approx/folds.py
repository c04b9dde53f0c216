"""The folds of the approximate aggregations: a value into a key's sketch, deterministically.

Each fold is a picklable class with ``initial(value)`` and ``reducer(before, value)``, the
two functions :func:`flamestream.map_reduce` folds with. Both return a new estimate (see
``estimates``): the sketch is deserialized from ``before``, updated and serialized again
(about 1.5 µs for an HLL), never changed in place, because a grouping may still hold
``before`` for a replay.

Determinism: the released bytes must be the same on every replay, in every process. HLL,
theta and frequent items update deterministically. DataSketches' KLL does not: a compaction
keeps the odd or the even items of a level by a coin from an unseeded per-thread generator.
:func:`kll_update` makes that coin a function of the sketch and the value (see there).

The sketches are Apache DataSketches' (the ``datasketches`` package), imported on first use:
importing the graph builder does not import numpy.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import struct
from bisect import bisect_left
from dataclasses import dataclass
from functools import cache
from typing import Any

from flamestream.approx.estimates import (
    CONFIDENCE,
    KLL_CONFIDENCE,
    DistinctCount,
    EstimateSum,
    HeavyHitter,
    HeavyHitters,
    Quantiles,
)

#: How often a KLL update that compacted is run again to see the coin's other outcome: a
#: fair coin shows only one side in 48 runs once in 2**47 compactions.
_COIN_RUNS = 48


@cache
def datasketches() -> Any:
    """The ``datasketches`` module (numpy with it: ~90 ms, paid by the first fold only)."""
    import datasketches as ds

    return ds


def sketch_value(value: Any, step: str) -> int | float | str:
    """``value`` as a sketch hashes it: an int (as int64), a float or a str.

    Spark's ``hll_sketch_agg`` hashes a BIGINT/INT column's values and a STRING column's
    UTF-8 text the same way, so a released sketch merges with Spark's own.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        msg = (
            f"{step} hashes int, float or str values, got {type(value).__name__} {value!r}: "
            "map it to one with value=... (e.g. value=lambda e: str(e.user))"
        )
        raise TypeError(msg)
    return value


@dataclass(frozen=True, slots=True)
class DistinctFold:
    """Distinct values per key: an HLL (``kind="hll"``) or theta sketch, with bounds.

    ``lg_k``: log2 of the sketch's size (HLL: 2**lg_k 4-bit registers, relative standard
    error 1.04 / sqrt(2**lg_k); theta: up to 2**lg_k hashes kept). ``num_std_dev`` (1, 2 or
    3) sets the bounds' width and confidence. ``exact_limit``: a key's values are also held
    exactly until it has more than this many, and its count is then exact (None: never).
    """

    kind: str = "hll"
    lg_k: int = 12
    num_std_dev: int = 2
    exact_limit: int | None = None

    def initial(self, value: Any) -> DistinctCount:
        """The count of a key's first value."""
        return self._counted(None, None, value)

    def reducer(self, before: DistinctCount, value: Any) -> DistinctCount:
        """``before`` with one more value."""
        return self._counted(before.sketch, before.exact, value)

    def _counted(
        self, sketch: bytes | None, exact: frozenset[Any] | None, value: Any
    ) -> DistinctCount:
        value = sketch_value(value, "distinct_count")
        updated, estimate = (self._hll if self.kind == "hll" else self._theta)(sketch, value)
        if self.exact_limit is not None and (sketch is None or exact is not None):
            held = (exact or frozenset()) | {value}
            if len(held) <= self.exact_limit:
                size = float(len(held))
                return DistinctCount(self.kind, size, size, size, 1.0, updated, False, held)
        lower, upper = (
            estimate.get_lower_bound(self.num_std_dev),
            estimate.get_upper_bound(self.num_std_dev),
        )
        return DistinctCount(
            self.kind,
            estimate.get_estimate(),
            lower,
            upper,
            CONFIDENCE[self.num_std_dev],
            updated,
        )

    def _hll(self, sketch: bytes | None, value: int | float | str) -> tuple[bytes, Any]:
        ds = datasketches()
        hll = (
            ds.hll_sketch(self.lg_k, ds.tgt_hll_type.HLL_4)
            if sketch is None
            else ds.hll_sketch.deserialize(sketch)
        )
        hll.update(value)
        return hll.serialize_compact(), hll

    def _theta(self, sketch: bytes | None, value: int | float | str) -> tuple[bytes, Any]:
        ds = datasketches()
        one = ds.update_theta_sketch(self.lg_k)
        one.update(value)
        if sketch is None:
            compact = one.compact()
            return compact.serialize(), compact
        before = ds.compact_theta_sketch.deserialize(sketch)
        if before.is_estimation_mode() and all(h >= before.theta64 for h in one.compact()):
            # a hash at or above theta is not kept: the union would be ``before`` again,
            # at O(2**lg_k) (most updates of a sketch past its exact mode skip it)
            return sketch, before
        union = ds.theta_union(self.lg_k)
        union.update(before)
        union.update(one)
        compact = union.get_result()
        return compact.serialize(), compact

    def describe(self) -> str:
        """One line for ``describe()``: the sketch, its size and what its bounds mean."""
        confidence = CONFIDENCE[self.num_std_dev]
        if self.kind == "hll":
            what = f"HLL lg_k={self.lg_k} (RSE {1.04 / math.sqrt(2**self.lg_k):.2%})"
            read = "hll_sketch_estimate / hll_union"
        else:
            what = f"theta lg_k={self.lg_k}"
            read = "theta_sketch_estimate / theta_union"
        exact = "" if self.exact_limit is None else f"; exact up to {self.exact_limit} values"
        return (
            f"distinct count, {what}, bounds ±{self.num_std_dev} std dev at {confidence:.2%}"
            f"{exact}; sketch read by {read}"
        )


#: ``ExactOrApproximateFold``'s exact limit before the policy lowers it: no limit.
UNLIMITED = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ExactOrApproximateFold:
    """A distinct count exact per key until a budget policy lowers the key's slot (issue 41).

    Before: :class:`DistinctFold` with no exact limit (a key keeps its values exactly, and the
    sketch beside them). Lowered (:meth:`lowered`): the same fold with ``exact_limit=floor``,
    so at its next update a key with more than ``floor`` values keeps only the sketch and
    releases ``approximate=True`` with its bounds. Which items fold lowered is not the
    fold's to know: the runtime picks per item from a schedule recorded in the offset log
    (:class:`flamestream.approx.schedule.SketchSchedule`).
    """

    kind: str = "hll"
    lg_k: int = 12
    num_std_dev: int = 2
    floor: int = 64

    @property
    def exact(self) -> DistinctFold:
        """The fold before the policy decides: exact, however many values."""
        return DistinctFold(self.kind, self.lg_k, self.num_std_dev, UNLIMITED)

    def lowered(self) -> DistinctFold:
        """The fold of a sketched slot's keys: exact up to ``floor`` values only."""
        return DistinctFold(self.kind, self.lg_k, self.num_std_dev, self.floor)

    def initial(self, value: Any) -> DistinctCount:
        """The count of a key's first value (exact)."""
        return self.exact.initial(value)

    def reducer(self, before: DistinctCount, value: Any) -> DistinctCount:
        """``before`` with one more value, its values kept exactly."""
        return self.exact.reducer(before, value)

    def sketch_bytes(self) -> int:
        """A lowered key's most bytes: its sketch at full size, its ``floor`` values, framing.

        What the budget policy weighs a slot's keys at once sketched (a value counted at 16
        bytes pickled, a str of up to a dozen characters or an int).
        """
        if self.kind == "hll":
            ds = datasketches()
            most = ds.hll_sketch.get_max_updatable_serialization_bytes(
                self.lg_k, ds.tgt_hll_type.HLL_4
            )
        else:  # a compact theta sketch: at most 2 * 2**lg_k hashes of 8 bytes, a preamble
            most = 16 * 2**self.lg_k + 24
        return int(most) + 16 * self.floor + 128

    def describe(self) -> str:
        """One line for ``describe()``."""
        return (
            f"{self.lowered().describe().replace(f'; exact up to {self.floor} values', '')}; "
            f"exact per key until a budget sketches its slot, then exact up to {self.floor} "
            "values"
        )


def kll_update(sketch: bytes, value: float) -> Any:
    """``sketch`` (KLL doubles) updated with ``value``, the same in every process.

    An update compacts at most one level, which keeps that level's odd or even items by one
    random bit that DataSketches draws from a generator seeded by the clock. So when an update
    compacted (the sketch did not just grow by one item), it is run again on fresh copies
    until the other outcome shows, and a bit hashed from the sketch before and the value picks
    one of the two (ordered by their bytes). Each outcome is still a coin flip's, so the
    sketch's error guarantee is unchanged; only who flips the coin is.
    """
    kll = datasketches().kll_doubles_sketch
    first = kll.deserialize(sketch)
    retained = first.num_retained
    first.update(value)
    if first.num_retained == retained + 1:
        return first
    outcomes = {first.serialize(): first}
    for _ in range(_COIN_RUNS):
        again = kll.deserialize(sketch)
        again.update(value)
        outcomes.setdefault(again.serialize(), again)
        if len(outcomes) > 1:
            break
    ordered = sorted(outcomes)
    digest = hashlib.blake2b(sketch + struct.pack("<d", value), digest_size=8).digest()
    return outcomes[ordered[digest[0] % len(ordered)]]


#: DataSketches Java rounds a natural rank to this many parts of one before its ceiling, for
#: streams up to this many items (``QuantilesUtil.getNaturalRank``).
_TAIL_ROUNDING = 10_000_000


@dataclass(frozen=True, slots=True)
class SortedView:
    """A KLL sketch's items as Spark reads them: DataSketches Java's sorted view (INCLUSIVE).

    Spark's ``kll_sketch_get_quantile_double`` is Java's ``getQuantile(rank)``, which differs
    from the C++ library's (the ``datasketches`` package) twice: its sorted view puts the
    stream's min and max back when compaction dropped them (the min with weight 1 first, the
    max last, the item before it one lighter), and it rounds ``rank * n`` to 1e-7 before the
    ceiling (``0.55 * 180`` is 99, not 100). Quantiles computed here are what Spark reads
    from the released sketch, at every rank; the C++ answer was off after a compaction had
    dropped the max (rank 0.9 of 9 values: 96 where Spark read 99).
    """

    items: tuple[float, ...]
    cumulative: tuple[int, ...]
    n: int

    @classmethod
    def of(cls, sketch: Any) -> SortedView:
        """``sketch``'s view: retained items by value, cumulative weights, min and max put in."""
        pairs = sorted(sketch)  # (item, weight); equal items are adjacent, in any order
        items = [item for item, _ in pairs]
        cumulative = list(itertools.accumulate(weight for _, weight in pairs))
        if items:
            low, high = sketch.get_min_value(), sketch.get_max_value()
            if items[-1] != high:  # IncludeMinMax.includeDoublesMinMax
                total = cumulative[-1]
                cumulative[-1] = total - 1
                items.append(high)
                cumulative.append(total)
            if items[0] != low:
                items.insert(0, low)
                cumulative.insert(0, 1)
        return cls(tuple(items), tuple(cumulative), sketch.n)

    def quantile(self, rank: float) -> float:
        """The item at normalized ``rank``, inclusive (NaN for an empty sketch).

        The first whose cumulative weight is at least ``ceil(rank * n)``.
        """
        if not self.items:
            return math.nan
        natural = rank * self.n
        if self.n <= _TAIL_ROUNDING:
            natural = _java_round(natural * _TAIL_ROUNDING) / _TAIL_ROUNDING
        index = bisect_left(self.cumulative, math.ceil(natural))
        return self.items[min(index, len(self.items) - 1)]


def _java_round(x: float) -> int:
    """Java's ``Math.round``: the nearest integer, halves up (Python's ``round`` goes to even)."""
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


@dataclass(frozen=True, slots=True)
class QuantileFold:
    """Quantiles per key from a KLL doubles sketch of size ``k`` (rank error ~1.65 / k**0.95)."""

    ranks: tuple[float, ...] = (0.5, 0.99)
    k: int = 200

    def initial(self, value: Any) -> Quantiles:
        """The quantiles of a key's first value."""
        sketch = datasketches().kll_doubles_sketch(self.k)
        sketch.update(self._number(value))
        return self._quantiles(sketch)

    def reducer(self, before: Quantiles, value: Any) -> Quantiles:
        """``before`` with one more value."""
        return self._quantiles(kll_update(before.sketch, self._number(value)))

    @staticmethod
    def _number(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            msg = (
                f"quantiles take int or float values, got {type(value).__name__} {value!r}: "
                "map it to a number with value=..."
            )
            raise TypeError(msg)
        return float(value)

    def _quantiles(self, sketch: Any) -> Quantiles:
        approximate = sketch.is_estimation_mode()
        error = sketch.normalized_rank_error(False) if approximate else 0.0
        view = SortedView.of(sketch)
        values = tuple(view.quantile(r) for r in self.ranks)
        # past either end the bound is the least or greatest value seen, which the sketch
        # keeps exactly: the view's quantiles at ranks 0 and 1 (it puts them back)
        lower = tuple(view.quantile(max(0.0, r - error)) for r in self.ranks)
        upper = tuple(view.quantile(min(1.0, r + error)) for r in self.ranks)
        confidence = KLL_CONFIDENCE if approximate else 1.0
        return Quantiles(
            self.ranks,
            values,
            lower,
            upper,
            error,
            confidence,
            sketch.n,
            sketch.serialize(),
            approximate,
        )

    def describe(self) -> str:
        """One line for ``describe()``."""
        error = datasketches().kll_doubles_sketch(self.k).normalized_rank_error(False)
        ranks = ", ".join(f"{r:g}" for r in self.ranks)
        return (
            f"quantiles {ranks}, KLL k={self.k}, rank error ±{error:.2%} at 99% once past "
            f"{self.k} values (exact before); sketch read by kll_sketch_get_quantile_double"
        )


#: The guarantees :class:`FrequentFold` can list items under, as DataSketches names them.
GUARANTEES = ("no_false_negatives", "no_false_positives")


@dataclass(frozen=True, slots=True)
class FrequentFold:
    """Frequent items per key: DataSketches' frequent items sketch of ``2**lg_max_k`` counters.

    ``threshold`` None lists by the sketch's maximum error; ``top`` caps how many are released.
    """

    lg_max_k: int = 6
    guarantee: str = "no_false_negatives"
    threshold: int | None = None
    top: int | None = None

    def initial(self, value: Any) -> HeavyHitters:
        """The frequent items of a key's first item."""
        sketch = datasketches().frequent_strings_sketch(self.lg_max_k)
        sketch.update(self._text(value))
        return self._hitters(sketch, 1)

    def reducer(self, before: HeavyHitters, value: Any) -> HeavyHitters:
        """``before`` with one more item."""
        sketch = datasketches().frequent_strings_sketch.deserialize(before.sketch)
        if sketch.total_weight == 0 and before.total:  # read back empty: see _all_purged
            sketch = self._all_purged(before.max_error)
        sketch.update(self._text(value))
        return self._hitters(sketch, before.total + 1)

    def _all_purged(self, offset: int) -> Any:
        """A sketch whose purge took every counter, with ``offset``: what the bytes lost.

        DataSketches serializes a sketch without active items as an empty one, dropping its
        offset (the maximum error every bound adds) and weight, so bounds read back are too
        narrow. Distinct items of weight ``offset`` fill the map until a purge, whose
        median is then ``offset``, takes them all and adds it to the offset. The weight is
        not the same: the released ``total`` is the fold's own count.
        """
        sketch = datasketches().frequent_strings_sketch(self.lg_max_k)
        filler = 0
        while offset and (filler == 0 or sketch.num_active_items):
            sketch.update(f"\x00flamestream-offset-{filler}", offset)
            filler += 1
        return sketch

    @staticmethod
    def _text(value: Any) -> str:
        if not isinstance(value, str):
            msg = (
                f"heavy_hitters counts str items, got {type(value).__name__} {value!r}: "
                "map it to text with value=..."
            )
            raise TypeError(msg)
        return value

    def _hitters(self, sketch: Any, total: int) -> HeavyHitters:
        ds = datasketches()
        error_type = (
            ds.frequent_items_error_type.NO_FALSE_NEGATIVES
            if self.guarantee == "no_false_negatives"
            else ds.frequent_items_error_type.NO_FALSE_POSITIVES
        )
        max_error = _frequent_max_error(sketch)
        threshold = max_error if self.threshold is None else max(self.threshold, max_error)
        found = sketch.get_frequent_items(error_type, threshold)
        found.sort(key=lambda f: (-f[1], f[0]))
        if self.top is not None:
            found = found[: self.top]
        items = tuple(HeavyHitter(item, est, low, high) for item, est, low, high in found)
        return HeavyHitters(
            items,
            self.guarantee,
            threshold,
            max_error,
            total,
            sketch.serialize(),
        )

    def describe(self) -> str:
        """One line for ``describe()``."""
        epsilon = datasketches().frequent_strings_sketch.get_epsilon_for_lg_size(self.lg_max_k)
        return (
            f"heavy hitters, frequent items 2**{self.lg_max_k} counters (error ≤ {epsilon:.2%} "
            f"of the items seen, deterministic bounds), {self.guarantee}"
        )


def _frequent_max_error(sketch: Any) -> int:
    """The sketch's maximum count error: every item's upper minus lower bound is at most it."""
    # DataSketches' offset: 0 until a purge happened; the same for every item (is_empty() is
    # no guide: a purge that took every counter leaves it True with the offset kept)
    return int(sketch.get_upper_bound("\x00") - sketch.get_lower_bound("\x00"))


@dataclass(frozen=True, slots=True)
class SumFold:
    """Sums estimates (anything with ``estimate``, ``lower``, ``upper``, ``confidence``) per key.

    The value folded is ``(term, estimate)``: a term's newer estimate replaces its older one.
    """

    def initial(self, value: tuple[Any, Any]) -> EstimateSum:
        """The sum of one term."""
        return self.reducer(None, value)

    def reducer(self, before: EstimateSum | None, value: tuple[Any, Any]) -> EstimateSum:
        """``before`` with the term's latest estimate."""
        term, estimate = value
        for name in ("estimate", "lower", "upper", "confidence"):
            if not hasattr(estimate, name):
                msg = (
                    f"sum_estimates sums estimates with bounds (a distinct_count's values), got "
                    f"{type(estimate).__name__} {estimate!r} for {term!r}"
                )
                raise TypeError(msg)
        parts = {p[0]: p[1:] for p in (before.parts if before is not None else ())}
        parts[term] = (estimate.estimate, estimate.lower, estimate.upper, estimate.confidence)
        # by repr: terms of any type, in one order whatever order they arrived in
        ordered = tuple((t, *parts[t]) for t in sorted(parts, key=repr))
        return EstimateSum(
            math.fsum(p[1] for p in ordered),
            math.fsum(p[2] for p in ordered),
            math.fsum(p[3] for p in ordered),
            min(p[4] for p in ordered),
            len(ordered),
            any(p[2] != p[3] or p[4] < 1.0 for p in ordered),
            ordered,
        )

    def describe(self) -> str:
        """One line for ``describe()``: its bounds are the terms', summed."""
        return (
            "sum of the latest estimate of each term, bounds summed, at the least of the "
            "terms' confidences; no sketch"
        )
