"""The admission controller: read limits from declared budgets, decided every tick.

A tick is a micro-batch. Before planning tick ``k`` the front's reader process asks its
:class:`AdmissionController` for the tick's read limit (records over all fronts of the source,
shared as ``maxRecordsPerTrigger`` is). The controller fits a cost model to the ticks it has seen
(``duration = overhead + per_row * rows``) and picks the largest batch whose duration fits half
the latency budget: a record then waits at most one tick to be read and one to be processed
and released. That is DS2's idea (compute the rate that meets the target from measured true
processing rates, in one step, instead of probing) applied to admission.

Decisions are recorded in the tick's end offset (``"controller"``), so a replayed tick has
the same input whatever the controller decides later, logged, and pushed as gauges. A
read limit changes which records go into which micro-batch, never the released output (the
determinism contract; tested with the controller on and off).

Inputs, best first: the progress listener's ``durationMs.triggerExecution`` of the query's
batches (through the JVM shim), else the time between two plannings of the reader process.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flamestream.errors import ConfigError
from flamestream.spark.connector.options import OptionReader

log = logging.getLogger("flamestream.controller")


#: Ticks the cost model is fitted to.
HISTORY = 6


#: A new limit within this factor of the current one is not a decision (hysteresis).
DEADBAND = 1.25


#: Batch sizes must differ by this factor before overhead and per-row cost are told apart.
SPREAD = 2.0


#: The share of a tick's time guessed to be fixed overhead, before an exact fit.
GUESSED_OVERHEAD = 0.8


#: How many standard errors the fitted per-row cost must be above zero to be trusted.
SIGNIFICANCE = 4.0


#: The read limit standing for "no limit" (Spark's ReadMaxRows takes an int).
UNBOUNDED = 2**31 - 1


@dataclass(frozen=True)
class Budget:
    """What the user declares (front options, or ``spark.flamestream.*`` confs).

    * ``target_latency_ms`` (``targetLatencyMs``): a record's time from available to released.
    * ``min_rows`` / ``max_rows`` (``minRecordsPerTrigger`` / ``maxRecordsPerTrigger``): read
      bounds per tick; ``max_rows`` None is unbounded.
    * ``initial_rows`` (``initialRecordsPerTrigger``): the first tick's limit, before any
      measurement; by default the upper bound, so that the controller reads like no limit
      at all until a tick overruns the budget (a limit that binds while the budget holds
      only delays records).
    * ``max_buffered_rows`` / ``max_state_bytes`` (``maxBufferedRows`` / ``maxStateBytes``):
      memory budgets for the barrier sink's buffer and the groupings' state; over one, the
      controller halves the limit (admission is what it can slow). Read from the sink's
      gauges, so they need the JVM shim.
    """

    target_latency_ms: float = 5000.0
    min_rows: int = 100
    max_rows: int | None = None
    initial_rows: int | None = None
    max_buffered_rows: int | None = None
    max_state_bytes: int | None = None

    @classmethod
    def parse(cls, options: OptionReader, max_rows: int | None) -> Budget:
        """The budget options; ``max_rows`` is the front's ``maxRecordsPerTrigger``."""
        target = options.number("targetLatencyMs", 5000.0, minimum=1.0)
        min_rows = options.integer("minRecordsPerTrigger", 100, minimum=1)
        initial = options.optional_integer("initialRecordsPerTrigger", minimum=1)
        if max_rows is not None and max_rows < min_rows:
            raise ConfigError(
                options.step,
                options.label("minRecordsPerTrigger"),
                min_rows,
                f"at most maxRecordsPerTrigger ({max_rows}) when the controller is on",
            )
        buffered = options.optional_integer("maxBufferedRows", minimum=1)
        state = options.optional_integer("maxStateBytes", minimum=1)
        return cls(target, min_rows, max_rows, initial, buffered, state)

    def clamp(self, rows: float) -> int:
        """``rows`` within the read bounds."""
        upper = self.max_rows if self.max_rows is not None else UNBOUNDED
        return int(max(self.min_rows, min(upper, rows)))


@dataclass(frozen=True)
class Tick:
    """One finished micro-batch: records read and how long it took, end to end."""

    rows: int
    duration_ms: float


@dataclass(frozen=True)
class CostModel:
    """``duration_ms = overhead_ms + per_row_ms * rows``.

    ``exact``: fitted to ticks of different sizes; otherwise a guess from one size.
    """

    overhead_ms: float
    per_row_ms: float
    exact: bool = True

    @classmethod
    def fit(cls, ticks: Sequence[Tick]) -> CostModel | None:
        """Least squares over ``ticks`` with rows; None without any."""
        data = [(t.rows, t.duration_ms) for t in ticks if t.rows > 0]
        if not data:
            return None
        n = len(data)
        mean_x = sum(x for x, _ in data) / n
        mean_y = sum(y for _, y in data) / n
        var = sum((x - mean_x) ** 2 for x, _ in data)
        low, high = min(x for x, _ in data), max(x for x, _ in data)
        if n >= 3 and high >= SPREAD * low:
            slope = sum((x - mean_x) * (y - mean_y) for x, y in data) / var
            intercept = mean_y - slope * mean_x
            residual = sum((y - intercept - slope * x) ** 2 for x, y in data) / (n - 2)
            # the per-row cost must stand out of the timing noise (a t-test on the slope)
            if slope > 0 and slope >= SIGNIFICANCE * math.sqrt(residual / var):
                if intercept >= 0:
                    return cls(intercept, slope)
                return cls(0.0, mean_y / mean_x)  # a negative overhead is noise: all per row
        # sizes too close to tell: guess that most of the time was fixed overhead (small Spark
        # batches are). Too optimistic a guess shows in the next tick, whose size then differs
        # enough for an exact fit.
        guess = GUESSED_OVERHEAD * mean_y
        return cls(guess, (mean_y - guess) / mean_x, exact=False)

    def rows_within(self, duration_ms: float) -> float:
        """The most rows a tick can take and still end within ``duration_ms``."""
        return max(0.0, duration_ms - self.overhead_ms) / self.per_row_ms


@dataclass(frozen=True)
class Decision:
    """A change of the read limit, as recorded in the offset and the log."""

    tick: int
    limit: int
    reason: str


@dataclass(frozen=True)
class Memory:
    """The barrier's buffer and the groupings' state after the latest commit (sink gauges)."""

    buffered_rows: float = 0.0
    state_bytes: float = 0.0

    def over(self, budget: Budget) -> str:
        """Which memory budget is exceeded ("" if none)."""
        if budget.max_buffered_rows is not None and self.buffered_rows > budget.max_buffered_rows:
            return f"buffer {self.buffered_rows:.0f} rows > {budget.max_buffered_rows}"
        if budget.max_state_bytes is not None and self.state_bytes > budget.max_state_bytes:
            return f"state {self.state_bytes:.0f} bytes > {budget.max_state_bytes}"
        return ""


def decide(
    budget: Budget,
    model: CostModel | None,
    current: int,
    memory: Memory | None = None,
    largest: int = 0,
) -> tuple[int, str]:
    """The next tick's read limit under ``model`` and ``memory``, and why (pure).

    Over a memory budget: half the largest recent tick (``largest``) or the current limit.
    """
    over = memory.over(budget) if memory is not None else ""
    if over:
        return budget.clamp(0.5 * min(current, largest or current)), over + ": halve"
    if model is None:
        return current, "no measurement yet"
    per_tick = budget.target_latency_ms / 2  # one tick waiting, one tick processing
    if model.overhead_ms >= per_tick:
        # the fixed cost alone exceeds the budget: the largest batches amortize it best
        return budget.clamp(float("inf")), (
            f"overhead {model.overhead_ms:.0f} ms >= {per_tick:.0f} ms: over budget at any size"
        )
    wanted = budget.clamp(model.rows_within(per_tick))
    reason = (
        f"model {model.overhead_ms:.0f} ms + {model.per_row_ms * 1000:.3f} ms/1k rows: "
        f"{wanted} rows fit {per_tick:.0f} ms"
    )
    return wanted, reason


@dataclass
class AdmissionController:
    """One front reader's controller (lives in the reader's driver-side process)."""

    budget: Budget
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    limit: int = 0
    tick: int = -1
    decisions: int = 0
    history: deque[Tick] = field(default_factory=lambda: deque(maxlen=HISTORY))
    log: list[Decision] = field(default_factory=list)
    #: the cost model decisions are made with: the newest exact fit, else a guess
    model: CostModel | None = None
    #: the sink's latest memory gauges for this controller (with the JVM shim)
    memory: Memory | None = None
    #: planning of the previous tick: (monotonic seconds, rows, its end offset's seq)
    _planned: tuple[float, int, int] | None = None
    _warm: bool = False

    def __post_init__(self) -> None:
        if not self.limit:
            first = self.budget.initial_rows
            self.limit = self.budget.clamp(UNBOUNDED if first is None else first)

    def resume(self, recorded: Mapping[str, Any] | None) -> None:
        """Continue from what the last offset recorded (a restart keeps limit and count)."""
        if recorded and not self.history:
            self.id = str(recorded.get("id", self.id))
            self.limit = self.budget.clamp(int(recorded.get("limit", self.limit)))
            self.decisions = int(recorded.get("decisions", 0))

    def observe_planning(self, seq: int, now: float | None = None) -> None:
        """A planning for the batch after ``seq`` began: the previous tick has finished.

        The run's first tick is not kept: it pays for starting the query (in a fresh JVM,
        tens of seconds) and says nothing about the next ones.
        """
        now = time.monotonic() if now is None else now
        if self._planned is not None:
            started, rows, planned_seq = self._planned
            if planned_seq == seq and rows > 0:  # that batch ran (not a replan of the same)
                if self._warm:
                    self.history.append(Tick(rows, (now - started) * 1000))
                self._warm = True
            self._planned = None

    def observe_progress(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Replace own timings by the progress listener's, for batches that carry our id."""
        exact: list[Tick] = []
        for event in events:
            if not any(self.id in str(s.get("endOffset", "")) for s in event.get("sources", [])):
                continue
            rows = records_of(event)
            duration = float(event.get("durationMs", {}).get("triggerExecution", 0))
            if rows > 0 and duration > 0:
                exact.append(Tick(rows, duration))
        if exact:
            self.history.clear()
            self.history.extend(exact[-HISTORY:])

    def _update_model(self) -> None:
        """Adopt a new fit if exact; a guess only if the last tick speaks to the limit.

        That is: the tick was cut by the limit, or overran the budget. Small ticks of a quiet
        input measure mostly overhead and would make a poor guess.
        """
        fitted = CostModel.fit(list(self.history))
        if fitted is None or (self.model is not None and self.model.exact and not fitted.exact):
            return
        last = self.history[-1]
        informative = last.rows >= 0.9 * self.limit or (
            last.duration_ms > self.budget.target_latency_ms / 2
        )
        if fitted.exact or informative:
            self.model = fitted

    def observe_gauges(self, gauges: Mapping[str, float]) -> None:
        """The sink's memory gauges pushed for this controller (``controller.<id>.*``)."""
        prefix = f"controller.{self.id}."
        mine = {k[len(prefix) :]: v for k, v in gauges.items() if k.startswith(prefix)}
        if mine:
            self.memory = Memory(mine.get("bufferedRows", 0.0), mine.get("stateBytes", 0.0))

    def next_limit(self) -> int:
        """Decide the coming tick's limit.

        A change is a decision only if it matters and moves beyond the deadband. Raising
        matters when the ticks reach the limit; without a trusted cost model the limit is then
        lifted altogether (the next, larger tick tells overhead from per-row cost). Lowering
        matters when the budget is broken (a record that waited through the previous tick and
        was processed in the last took longer than the budget, or a memory budget is
        exceeded) and a recent tick was larger than the new limit: a limit that binds while
        the budget holds only delays records.
        """
        self.tick += 1
        self._update_model()
        largest = max((t.rows for t in self.history), default=0)
        wanted, reason = decide(self.budget, self.model, self.limit, self.memory, largest)
        reached = bool(self.history) and self.history[-1].rows >= 0.9 * self.limit
        memory_over = bool(self.memory is not None and self.memory.over(self.budget))
        if reached and not memory_over and (self.model is None or not self.model.exact):
            last = self.history[-1].duration_ms
            if last < self.budget.target_latency_ms / 2:
                # the limit binds with room in the budget and no trusted model says how far
                # it can go: lift it; the next tick's size then tells overhead from per-row
                wanted, reason = (
                    self.budget.clamp(UNBOUNDED),
                    (f"limit reached in {last:.0f} ms, within budget: lifted"),
                )
        recent = [t.duration_ms for t in list(self.history)[-2:]]
        broken = sum(recent) > self.budget.target_latency_ms or memory_over
        matters = (wanted > self.limit and reached) or (
            wanted < self.limit and largest > wanted and broken
        )
        if matters and max(wanted, self.limit) > DEADBAND * min(wanted, self.limit):
            self.limit = wanted
            self.decisions += 1
            decision = Decision(self.tick, wanted, reason)
            self.log.append(decision)
            log.info(
                "controller %s tick %d: read limit %d (%s)", self.id, self.tick, wanted, reason
            )
        return self.limit

    def planned(self, seq: int, rows: int, now: float | None = None) -> None:
        """The tick was planned with ``rows`` records as batch ``seq`` of the source."""
        self._planned = (time.monotonic() if now is None else now, rows, seq)

    def record(self) -> dict[str, Any]:
        """What the end offset keeps (stable key order)."""
        last = self.log[-1].reason if self.log else ""
        return {
            "id": self.id,
            "tick": self.tick,
            "limit": self.limit,
            "decisions": self.decisions,
            "targetLatencyMs": self.budget.target_latency_ms,
            "reason": last,
        }


def records_of(event: Mapping[str, Any]) -> int:
    """The records a progress event's batch read, which the read limit is in.

    ``flamestream.records`` when ``apply`` observed them (a front running a graph's first
    stage sends blocks, and Spark's ``numInputRows`` counts those), else ``numInputRows``.
    """
    observed = (event.get("observedMetrics") or {}).get("flamestream") or {}
    return int(observed.get("records", event.get("numInputRows", 0)))
