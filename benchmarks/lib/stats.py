"""Medians, percentiles, summaries in milliseconds and linear fits."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any


def median(values: Iterable[float], digits: int | None = 3) -> float:
    """The median of ``values``, rounded to ``digits`` (None: not rounded)."""
    found = statistics.median(values)
    return found if digits is None else round(found, digits)


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of sorted values."""
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    """p50, p99, max, min and mean of seconds, in milliseconds."""
    ordered = sorted(values)
    return {
        "p50": round(percentile(ordered, 50) * 1000, 1),
        "p99": round(percentile(ordered, 99) * 1000, 1),
        "max": round(ordered[-1] * 1000, 1),
        "min": round(ordered[0] * 1000, 1),
        "mean": round(statistics.fmean(ordered) * 1000, 1),
    }


def summary_or_none(values: Sequence[float]) -> dict[str, float] | None:
    """:func:`summary_ms`, or None without values."""
    return summary_ms(values) if values else None


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares ``y = a + b * x``: ``(b, a)``."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return slope, mean_y - slope * mean_x


def cost_fit(probes: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """``seconds = a + b * rows`` through backlog probes: ``(b, a)``, never ``b <= 0``."""
    xs = [p["batch_rows"] for p in probes]
    ys = [p["batch_seconds_median"] for p in probes]
    per_row, fixed = linear_fit(xs, ys)
    if per_row <= 0:  # noise: all of the time per row, from the larger probe
        return ys[-1] / xs[-1], 0.0
    return per_row, fixed


def fit_report(per_row: float, fixed: float) -> dict[str, Any]:
    """The fit as reported: fixed seconds per batch, microseconds per row, the asymptote."""
    return {
        "fixed_seconds_per_batch": round(fixed, 3),
        "microseconds_per_row": round(per_row * 1e6, 2),
        "asymptote_rows_per_second": round(1 / per_row) if per_row > 0 else None,
    }
