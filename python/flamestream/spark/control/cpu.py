"""The CPU budget's rule: CPU time per record, held by the cheaper of equal-output settings.

A query's CPU per record is the stand-in for energy on a shared machine: what the
application's processes (the executors' JVMs and every Python worker below them, read by the
JVM shim from ``/proc``) used over the last ``cpu_window_ms`` of batches, over the records
those batches read. Every setting the policy may choose gives the same released output (the
determinism contract), so when the CPU per record is over ``max_cpu_us_per_record`` the
policy picks a cheaper one, in this order:

1. **Larger batches.** A batch costs ``c0 + c1 x rows`` ms of CPU (fitted like the latency
   cost model: :class:`~flamestream.spark.control.admission.CostModel`), so a record costs
   ``c0 / rows + c1``: batches of at least ``c0 / (B - c1)`` rows hold budget ``B`` (while
   the batches were all of one size, and the fit cannot tell ``c0`` from ``c1``, twice the
   largest recent batch is tried first). The
   fronts then *wait* for that many rows before planning a batch (``wait_rows``), at most
   ``max_wait_ms`` (half the latency budget: the wait is the tick a record spends waiting
   in the latency rule), and the read limit is raised to at least it.
2. **Fewer active partitions.** Each keyed task pays for restoring and saving its slots and
   for its Python worker's start: one partition fewer per tick while over the budget, if the
   last batch would still end within half the latency budget on the fewer cores (and never
   below what the memory budget needs). The ceiling goes at once when the last tick took
   more than half the latency budget or left more rows waiting than it read (a burst: latency
   first); under the budget it stays (giving partitions back would raise the cost again:
   the rule would flap, and every flap moves state).

Batch sizes follow the fit both ways (smaller once the fitted cost allows it); while the
batches are all of one size (no fit) and the budget holds, the last ones asked for stay.
The memory budget comes first, then latency, then CPU: when a cheaper setting would break
one of those, or when the per-record cost ``c1`` alone is over the budget, the rule says so
(a ``cpu: not held`` reason, logged by the controller) and keeps the setting that holds the
others. Pure: a function of the measurements alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from flamestream.spark.control.admission import CostModel, Tick

#: Batch sizes are chosen for this share of the budget (headroom for the noise).
AIM = 0.8


@dataclass(frozen=True)
class CpuTick:
    """One finished tick as the CPU rule sees it (``cpu_ms`` None: not measured)."""

    rows: int
    duration_ms: float
    cpu_ms: float | None
    active: int
    backlog: int = 0


@dataclass(frozen=True)
class CpuChoice:
    """What the CPU rule asks of the next tick, and why.

    ``wait_rows``: fronts hold a batch until this many rows wait (0: never), for at most
    ``max_wait_ms``; ``active_ceiling``: at most this many active partitions (None: no
    ceiling); ``per_record_us``: the measured CPU per record over the window; ``held``: False
    while it is over the budget (the reasons say what is done, or why nothing can be).
    """

    wait_rows: int = 0
    max_wait_ms: float = 0.0
    active_ceiling: int | None = None
    per_record_us: float | None = None
    held: bool = True
    reasons: tuple[str, ...] = ()


def windowed(ticks: Sequence[CpuTick], window_ms: float) -> list[CpuTick]:
    """The newest measured ticks whose durations add up to ``window_ms`` (at least one)."""
    out: list[CpuTick] = []
    spent = 0.0
    for tick in reversed(ticks):
        if tick.cpu_ms is None:
            continue
        if out and spent + tick.duration_ms > window_ms:
            break
        out.append(tick)
        spent += tick.duration_ms
    return out[::-1]


def per_record_us(ticks: Sequence[CpuTick]) -> float | None:
    """CPU microseconds per record over ``ticks`` (None: no rows or nothing measured)."""
    rows = sum(t.rows for t in ticks if t.cpu_ms is not None)
    cpu = sum(t.cpu_ms or 0.0 for t in ticks)
    return 1000.0 * cpu / rows if rows > 0 else None


def rows_for(model: CostModel, budget_us: float) -> float:
    """The batch size at which a record costs ``budget_us`` (inf: none does)."""
    per_row_us = 1000.0 * model.per_row_ms
    if per_row_us >= budget_us:
        return math.inf
    return 1000.0 * model.overhead_ms / (budget_us - per_row_us)


def choose(
    budget_us: float,
    window_ms: float,
    target_latency_ms: float,
    ticks: Sequence[CpuTick],
    latency_limit: int,
    active: int,
    memory_active: int,
    previous_ceiling: int | None,
    previous_wait: int = 0,
) -> CpuChoice:
    """The CPU rule's choice for the next tick (pure; see the module docstring).

    ``latency_limit``: the largest batch the latency (and memory) rules allow;
    ``memory_active``: the partitions the memory budget needs at least; ``previous_ceiling``
    and ``previous_wait``: what the last decision chose (kept while nothing says otherwise:
    the batches it made are all of one size, which no fit can read).
    """
    window = windowed(ticks, window_ms)
    measured = per_record_us(window)
    if measured is None:
        return CpuChoice(active_ceiling=previous_ceiling, reasons=("cpu: not measured yet",))
    said = [f"cpu: {measured:.1f} us/record over {len(window)} ticks (budget {budget_us:g})"]
    wait, cause = _batches(budget_us, measured, window, latency_limit, previous_wait)
    if wait:
        said.append(f"cpu: batches of {wait} rows")
    if measured > budget_us:  # reported every tick it is not held, with what is being done
        said.append(f"cpu: not held: {measured:.1f} us/record > {budget_us:g} ({cause})")
    found = _ceiling(budget_us, measured, target_latency_ms, window, active, memory_active)
    ceiling = previous_ceiling if isinstance(found, str) else found
    if ceiling is not None and ceiling < memory_active:
        ceiling = memory_active  # the state budget first: never below what it needs
    if ceiling is not None and ceiling < active:
        said.append(f"cpu: {ceiling} active partitions (from {active})")
    return CpuChoice(
        wait_rows=wait,
        max_wait_ms=target_latency_ms / 2 if wait else 0.0,
        active_ceiling=ceiling,
        per_record_us=measured,
        held=measured <= budget_us,
        reasons=tuple(said),
    )


def _batches(
    budget_us: float,
    measured: float,
    window: Sequence[CpuTick],
    latency_limit: int,
    previous: int,
) -> tuple[int, str]:
    """The batch size the fronts wait for (0: none), and why it does or does not hold."""
    model = CostModel.fit([Tick(t.rows, t.cpu_ms or 0.0) for t in window])
    if model is None:
        return 0, "no rows measured"
    if not model.exact:
        if measured <= budget_us:  # held with the batches the last decision asked for
            return min(previous, latency_limit), "the batches asked for"
        # batches of one size cannot tell a batch's cost from a row's: try twice as large
        wait = min(latency_limit, 2 * max(t.rows for t in window))
        return wait, f"batches of one size so far: trying {wait} rows to fit the cost"
    wanted = rows_for(model, AIM * budget_us)
    if math.isinf(wanted):
        per_row = 1000 * model.per_row_ms
        return 0, f"the per-record cost {per_row:.1f} us alone is over it at any batch size"
    wait = min(latency_limit, math.ceil(wanted))
    if wanted > latency_limit:
        return wait, (
            f"{math.ceil(wanted)} rows a batch needed ({model.overhead_ms:.0f} ms a batch), "
            f"the latency and memory budgets allow {latency_limit}"
        )
    return wait, f"batches of {wait} rows from now ({model.overhead_ms:.0f} ms a batch)"


def _ceiling(
    budget_us: float,
    measured: float,
    target_latency_ms: float,
    window: Sequence[CpuTick],
    active: int,
    memory_active: int,
) -> int | str | None:
    """Active partitions at most: one fewer while over, none under latency pressure.

    ``"keep"``: the previous ceiling stands (between the two marks).
    """
    last = window[-1]
    if last.duration_ms > target_latency_ms / 2 or last.backlog > last.rows:
        return None  # latency first: a backlog (or a tick that read its whole limit: rows
        # were waiting) or a slow tick gets every core back
    if measured > budget_us and active > max(1, memory_active):
        fewer = active - 1
        # a batch on fewer cores takes longer: only if it still fits the latency rule
        if last.duration_ms * active / fewer <= target_latency_ms / 2:
            return fewer
    return "keep"
