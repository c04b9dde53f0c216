"""A simulated keyed pipeline for the budget policy: bursts, a hot key range, state per slot.

Rows arrive at ``rate`` rows/s, ``burst_factor`` x that during the burst. During the hot
window ``hot_share`` of the rows fall on ``hot_slots`` (which share one partition under the
default layout), the rest spread evenly. Each item adds ``row_bytes`` to its slot's state for
``window_ticks`` ticks (a session that closes); during the first ``warm_ticks`` ticks an item
adds ``new_key_bytes`` instead (the key-creating start, when set). The measured growth of a
slot is what the tick's items added (expiry aside, as a task that sees its writes). A tick
of ``rows`` takes ``overhead_ms + per_row_ms x max(hottest partition's rows, rows /
min(active, cores))`` plus the moved
state's transfer: the partitions run on ``cores`` in parallel, the hottest one last. It uses
``cpu_batch_ms + cpu_task_ms x active + cpu_per_row_ms x rows`` of CPU (a batch's planning
and commit, each keyed task's restore and save, each row): the CPU budget's levers (larger
batches, fewer partitions) are cheaper settings of the same output. A setting's
``wait_rows`` holds a tick until that many rows wait (at most ``max_wait_ms``).

A run drives either fixed settings (read limit x active partitions) or the policy, tick by
tick, and reports per-record latency (available to released: the end of the tick that read
it), throughput, and the peak state of any partition during a tick (before expiry). Pure
Python, deterministic: the tests use it to check the policy's promises, the benchmark to
compare the policy with a sweep of fixed settings.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flamestream.spark.control.policy import Budgets, Measurement, Plan, Setting, plan


@dataclass(frozen=True)
class Workload:
    """The input and the cost of the simulated pipeline."""

    seconds: float = 60.0
    rate: float = 2000.0
    burst: tuple[float, float] = (20.0, 30.0)
    burst_factor: float = 10.0
    hot: tuple[float, float] = (15.0, 40.0)
    hot_slots: tuple[int, ...] = (0, 4, 8, 12)
    hot_share: float = 0.8
    row_bytes: int = 200
    window_ticks: int = 4
    warm_ticks: int = 0
    new_key_bytes: int = 0
    overhead_ms: float = 300.0
    per_row_ms: float = 0.05
    move_ms_per_mb: float = 20.0
    cores: int = 2
    idle_ms: float = 100.0
    #: whether the measurements carry the backlog (on Spark the control channel sees none)
    backlog_seen: bool = True
    cpu_batch_ms: float = 150.0
    cpu_task_ms: float = 60.0
    cpu_per_row_ms: float = 0.02

    def cpu_ms(self, rows: int, active: int) -> float:
        """The CPU a tick of ``rows`` on ``active`` partitions uses."""
        return self.cpu_batch_ms + self.cpu_task_ms * active + self.cpu_per_row_ms * rows

    def rate_at(self, t: float) -> float:
        """Rows per second arriving at ``t``."""
        if t >= self.seconds:
            return 0.0
        low, high = self.burst
        return self.rate * (self.burst_factor if low <= t < high else 1.0)

    def slot_items(self, t: float, rows: int, slots: int) -> list[int]:
        """How ``rows`` read at ``t`` fall on the slots (largest remainder, deterministic)."""
        low, high = self.hot
        hot = [s for s in self.hot_slots if s < slots] if low <= t < high else []
        share = [(1 - self.hot_share) / slots if hot else 1 / slots] * slots
        for s in hot:
            share[s] += self.hot_share / len(hot)
        exact = [rows * w for w in share]
        items = [int(x) for x in exact]
        order = sorted(range(slots), key=lambda s: (items[s] - exact[s], s))
        for s in order[: rows - sum(items)]:
            items[s] += 1
        return items


@dataclass
class Run:
    """What a simulated run measured."""

    latencies: list[tuple[float, int]] = field(default_factory=list)  # (seconds, rows)
    ticks: list[dict[str, Any]] = field(default_factory=list)
    peak_partition_bytes: int = 0
    rows: int = 0
    end: float = 0.0
    cpu_ms: float = 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of the per-record latency (seconds)."""
        total = sum(n for _, n in self.latencies)
        if not total:
            return 0.0
        seen = 0
        for latency, n in sorted(self.latencies):
            seen += n
            if seen >= q / 100 * total:
                return latency
        return sorted(self.latencies)[-1][0]

    def summary(self, budget: int | None) -> dict[str, Any]:
        """p50/p99 latency, throughput, peak state per partition, whether the budget held."""
        return {
            "p50_ms": round(self.percentile(50) * 1000, 1),
            "p99_ms": round(self.percentile(99) * 1000, 1),
            "rows_per_second": round(self.rows / self.end, 1) if self.end else 0.0,
            "seconds": round(self.end, 3),
            "ticks": len(self.ticks),
            "peak_state_bytes_per_partition": self.peak_partition_bytes,
            "budget_held": budget is None or self.peak_partition_bytes <= budget,
            "surprises": self.surprises(),
            "cpu_us_per_record": round(1000 * self.cpu_ms / self.rows, 2) if self.rows else 0.0,
        }

    def surprises(self) -> int:
        """Decisions that found the tick before them beyond the policy's declared bounds."""
        return sum(any(r.startswith("surprise") for r in t["reasons"]) for t in self.ticks)


#: A run that has not drained after this many ticks is stuck (a bug, not a result).
MAX_TICKS = 20000


#: (setting, measurements, rows in flight) -> the next plan
Decider = Callable[[Setting, list[Measurement], int], Plan]


def controller(budgets: Budgets) -> Decider:
    """The policy as the simulation's decider."""
    return lambda setting, history, in_flight: plan(budgets, setting, history, in_flight)


def fixed() -> Decider:
    """A fixed setting: never changes."""
    return lambda setting, history, in_flight: Plan(setting)


class _Arrivals:
    """Rows available so far, in 10 ms chunks, first in first out."""

    STEP = 0.01

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.queue: deque[list[float]] = deque()  # [arrival second, rows]
        self.until = 0.0
        self.carry = 0.0

    def advance(self, now: float) -> None:
        while self.until + self.STEP <= now + 1e-9:
            self.carry += self.workload.rate_at(self.until) * self.STEP
            whole = int(self.carry)
            self.carry -= whole
            self.until += self.STEP
            if whole:
                self.queue.append([self.until, whole])

    def backlog(self) -> int:
        return int(sum(n for _, n in self.queue))

    def take(self, rows: int) -> list[tuple[float, int]]:
        taken: list[tuple[float, int]] = []
        while rows and self.queue:
            arrived, n = self.queue[0]
            k = int(min(n, rows))
            taken.append((arrived, k))
            rows -= k
            if k == n:
                self.queue.popleft()
            else:
                self.queue[0][1] = n - k
        return taken


def simulate(
    workload: Workload, budgets: Budgets, start: Setting, decider: Decider, *, lag: bool = False
) -> Run:
    """Run ``workload`` tick by tick with ``decider`` choosing each tick's setting.

    ``lag``: a decided read limit applies one tick later (as on Spark, where the fronts may
    plan a batch before the control channel decides); moves apply at once.
    """
    slots = budgets.slots
    arrivals = _Arrivals(workload)
    history: list[tuple[int, ...]] = []  # bytes added per slot, newest last (state's window)
    setting, measured, run, now = start, list[Measurement](), Run(), 0.0
    moved_bytes, reading = 0, start.limit  # the limit the next tick reads with
    last_end = 0.0
    while now < workload.seconds or arrivals.queue:
        arrivals.advance(now)
        backlog = arrivals.backlog()
        rows = min(reading if lag else setting.limit, backlog)
        if backlog == 0 or _waits(setting, backlog, now, last_end, workload):
            # nothing to read, or the CPU rule's wait: (a limit of 0 still runs a tick)
            now += workload.idle_ms / 1000
            continue
        if len(run.ticks) >= MAX_TICKS:
            msg = f"simulation: no end after {MAX_TICKS} ticks ({backlog} rows left)"
            raise RuntimeError(msg)
        items = workload.slot_items(now, rows, slots)
        per_item = workload.row_bytes
        if len(run.ticks) < workload.warm_ticks and workload.new_key_bytes:
            per_item = workload.new_key_bytes
        added = tuple(per_item * n for n in items)
        before = [sum(h[s] for h in history) for s in range(slots)]
        partitions = [0] * budgets.partitions
        peak = [0] * budgets.partitions
        for s in range(slots):
            partitions[setting.assignment[s]] += items[s]
            peak[setting.assignment[s]] += before[s] + added[s]
        run.peak_partition_bytes = max(run.peak_partition_bytes, *peak)
        spread = rows / max(1, min(setting.active, workload.cores))
        duration = workload.overhead_ms + workload.per_row_ms * max(max(partitions), spread)
        duration += workload.move_ms_per_mb * moved_bytes / 1e6
        now += duration / 1000
        arrivals.advance(now)  # what arrived during the tick (the last tick's too)
        last_end = now
        cpu = workload.cpu_ms(rows, setting.active)
        run.cpu_ms += cpu
        run.latencies += [(now - arrived, n) for arrived, n in arrivals.take(rows)]
        run.rows += rows
        history = [*history, added][-workload.window_ticks :]
        after = [sum(h[s] for h in history) for s in range(slots)]
        measured.append(
            Measurement(
                rows,
                duration,
                tuple(items),
                tuple(after),
                added,
                arrivals.backlog() if workload.backlog_seen else 0,
                workload.cores,
                cpu_ms=cpu,
                active=setting.active,
            )
        )
        # with lag, the next tick reads with the limit decided before this one
        reading = setting.limit
        decided = decider(setting, measured[-8:], reading if lag else 0)
        run.ticks.append(_tick(now, rows, duration, setting, decided, peak, cpu))
        moved_bytes = sum(m.bytes for m in decided.moves)
        setting = decided.setting
    run.end = now
    return run


def _waits(setting: Setting, backlog: int, now: float, last_end: float, w: Workload) -> bool:
    """Whether a front holds the tick for the CPU rule's larger batch (input still coming)."""
    if not setting.wait_rows or backlog >= setting.wait_rows or now >= w.seconds:
        return False
    return (now - last_end) * 1000 < setting.max_wait_ms


def _tick(
    now: float,
    rows: int,
    duration: float,
    setting: Setting,
    decided: Plan,
    peak: list[int],
    workload_cpu: float,
) -> dict[str, Any]:
    return {
        "end_s": round(now, 3),
        "rows": rows,
        "duration_ms": round(duration, 1),
        "limit": setting.limit,
        "active": setting.active,
        "peak_partition_bytes": max(peak),
        "moves": len(decided.moves),
        "next_limit": decided.setting.limit,
        "cpu_ms": round(workload_cpu, 1),
        "reasons": list(decided.reasons),
    }
