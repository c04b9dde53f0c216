"""What an approximate aggregation releases: an estimate with its error, and its sketch.

Each value here is an immutable named tuple and is at once the released value and the key's
state (the accumulator :func:`flamestream.map_reduce` folds into): a grouping may hold an
older value for a replay, so a fold never changes one in place, it makes the next. Named
tuples, not frozen dataclasses: a fold makes one per update, and a frozen dataclass took 4 µs
to make (more than the sketch's update), a tuple 0.3 µs. Their ``repr`` leaves the sketch out.

Every value says how approximate it is in its own fields (``approximate``, the bounds, the
confidence or the rank error), so a row that flows on through later steps keeps its error
with it. The sketch is the bytes of an Apache DataSketches sketch, which Spark SQL's sketch
functions and the DataSketches libraries read (see ``docs/approximate.md``).
"""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

#: The confidence of bounds ``num_std_dev`` standard deviations wide (a normal
#: approximation, as DataSketches' HLL and theta bounds are defined).
CONFIDENCE = {1: 0.6827, 2: 0.9545, 3: 0.9973}

#: The confidence of KLL's normalized rank error (DataSketches documents it at 99 %).
KLL_CONFIDENCE = 0.99


class DistinctCount(NamedTuple):
    """How many distinct values a key has seen: ``estimate`` within ``[lower, upper]``.

    ``approximate`` False: the count is exact (the key's values are still held exactly,
    see ``exact_limit``), and ``lower == estimate == upper`` with confidence 1.0. ``sketch``
    is an HLL sketch (``hll_sketch_estimate``) or a compact theta sketch
    (``theta_sketch_estimate``), as ``kind`` says, over every value either way.
    """

    kind: str
    estimate: float
    lower: float
    upper: float
    confidence: float
    sketch: bytes
    approximate: bool = True
    #: the values themselves while the count is exact (``exact_limit``), else None
    exact: frozenset[Any] | None = None

    def __repr__(self) -> str:
        return _repr(self, ("sketch", "exact"))

    def columns(self) -> dict[str, Any]:
        """The released columns (``render_json``): the error beside the estimate."""
        return {
            "kind": self.kind,
            "approximate": self.approximate,
            "estimate": self.estimate,
            "lower": self.lower,
            "upper": self.upper,
            "confidence": self.confidence,
            "sketch": _b64(self.sketch),
        }


class Quantiles(NamedTuple):
    """Quantiles of a key's values: ``values[i]`` at normalized rank ``ranks[i]``.

    The true rank of ``values[i]`` is within ``ranks[i] ± rank_error`` at ``confidence``
    (KLL's normalized rank error), so the exact quantile lies in ``[lower[i], upper[i]]``,
    the sketch's quantiles at ``ranks[i] ∓ rank_error``. Each is what Spark's
    ``kll_sketch_get_quantile_double`` reads from ``sketch`` at that rank (inclusive, by
    DataSketches Java's rules: :class:`~flamestream.approx.folds.SortedView`); ``n`` is how
    many values were seen. Released as ``values_lower`` / ``values_upper`` (``columns()``).
    While ``n`` is at most the sketch's ``k`` the sketch holds every value: the quantiles
    are exact, ``approximate`` is False and ``rank_error`` 0.
    """

    ranks: tuple[float, ...]
    values: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    rank_error: float
    confidence: float
    n: int
    sketch: bytes
    approximate: bool = True

    def __repr__(self) -> str:
        return _repr(self, ("sketch",))

    def columns(self) -> dict[str, Any]:
        """The released columns (``render_json``).

        The bounds are ``values_lower`` / ``values_upper`` here, not ``lower`` / ``upper``
        as in the other estimates' columns, where they are numbers: so each field name has
        one type whatever the kind, and one schema reads every released row
        (``flamestream.spark.estimate_columns``, ``spark.read.json``).
        """
        return {
            "kind": "kll",
            "approximate": self.approximate,
            "ranks": list(self.ranks),
            "values": list(self.values),
            "values_lower": list(self.lower),
            "values_upper": list(self.upper),
            "rank_error": self.rank_error,
            "confidence": self.confidence,
            "n": self.n,
            "sketch": _b64(self.sketch),
        }


class HeavyHitter(NamedTuple):
    """One frequent item: its count is within ``[lower, upper]``, always (no confidence)."""

    item: str
    estimate: int
    lower: int
    upper: int


class HeavyHitters(NamedTuple):
    """A key's frequent items, most frequent first, under a named ``guarantee``.

    ``no_false_negatives``: every item seen more than ``threshold`` times is listed (some
    listed may be seen fewer). ``no_false_positives``: every listed item was seen more than
    ``threshold`` times (some such may be missing). ``threshold`` is the sketch's maximum
    error (or a larger one asked for); ``total`` is how many items were seen. The bounds of
    each item hold deterministically.
    """

    items: tuple[HeavyHitter, ...]
    guarantee: str
    threshold: int
    max_error: int
    total: int
    sketch: bytes

    @property
    def approximate(self) -> bool:
        """Whether any count may be off (the sketch has dropped some item's counter)."""
        return self.max_error > 0

    def __repr__(self) -> str:
        return _repr(self, ("sketch",))

    def columns(self) -> dict[str, Any]:
        """The released columns (``render_json``)."""
        return {
            "kind": "frequent_items",
            "approximate": self.approximate,
            "items": [
                {"item": h.item, "estimate": h.estimate, "lower": h.lower, "upper": h.upper}
                for h in self.items
            ],
            "guarantee": self.guarantee,
            "threshold": self.threshold,
            "max_error": self.max_error,
            "total": self.total,
            "sketch": _b64(self.sketch),
        }


class EstimateSum(NamedTuple):
    """A sum of estimates over ``terms`` keys, with the sum of their bounds.

    Each term's latest ``(term, estimate, lower, upper, confidence)`` is in ``parts``. The summed
    bounds hold at ``confidence`` (the least of the terms') whatever the terms' errors'
    correlation, under the same normal approximation the terms' own bounds use: the sum's
    standard deviation is at most the sum of theirs.
    """

    estimate: float
    lower: float
    upper: float
    confidence: float
    terms: int
    approximate: bool
    parts: tuple[tuple[Any, float, float, float, float], ...]

    def __repr__(self) -> str:
        return _repr(self, ("parts",))

    def columns(self) -> dict[str, Any]:
        """The released columns (``render_json``)."""
        return {
            "kind": "sum",
            "approximate": self.approximate,
            "estimate": self.estimate,
            "lower": self.lower,
            "upper": self.upper,
            "confidence": self.confidence,
            "terms": self.terms,
        }


#: The values an approximate aggregation releases.
Estimate = DistinctCount | Quantiles | HeavyHitters | EstimateSum


def _repr(value: Any, hidden: tuple[str, ...]) -> str:
    """``Name(field=value, ...)`` without the ``hidden`` fields (a sketch's kilobytes)."""
    shown = ", ".join(f"{f}={getattr(value, f)!r}" for f in value._fields if f not in hidden)
    return f"{type(value).__name__}({shown})"


def _b64(sketch: bytes) -> str:
    return base64.b64encode(sketch).decode("ascii")
