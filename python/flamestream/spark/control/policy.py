"""One policy over read limit, active partitions and slot moves, from declared budgets (pure).

Each tick the policy takes what the last ticks measured (:class:`Measurement`: rows read,
tick duration, items and state bytes per key slot, backlog, cores) and the query's current
:class:`Setting` (read limit, active partition count ``n <= P``, slot assignment), and
decides the next tick's setting together (:func:`plan`):

1. **Latency.** The read limit the admission controller would pick
   (:func:`flamestream.spark.control.admission.decide` on the same cost model): the largest
   batch that ends within half of ``targetLatencyMs``. Active partitions: as many as there
   are cores (more run no faster), at most ``P``.
2. **Memory, before it is passed.** A partition's state after the next tick is at most its
   slots' bytes now plus the limit times the largest state growth per item seen so far
   (every row of the tick may land in one partition: a hot key range). The policy first
   *spreads*: when a partition's expected state (its share of the tick's growth) would pass
   ``high_water`` x the budget, it moves that partition's largest slots to the partition
   with the least state, activating more partitions when the active ones are full. Then
   it *caps admission* so that even the worst case fits: ``limit <= (budget - bytes) /
   growth`` for the fullest partition. So the budget holds whatever the next tick's keys.
3. **Balance.** When one partition carries more than ``SKEW`` x the mean items, its slots
   move to the least loaded partitions while that cuts the hottest one's load.

Moves per tick are bounded (``max_moves``): a rescale is spread over ticks. Ties are broken
by partition and slot number, so a decision is a function of its inputs alone
(deterministic; the caller records it in the tick's offset so a replay does not re-decide).
No Spark import: the policy runs wherever the control channel's reader runs, and in tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from flamestream.spark.control.admission import HISTORY, Budget, CostModel, Tick, decide

#: Slots per maximum partition (as the elastic key layout has them).
SLOTS_PER_PARTITION = 4

#: A partition carrying more than this times the mean items is hot (as the key layout's).
SKEW = 1.5


@dataclass(frozen=True)
class Budgets:
    """What the user declares.

    * ``target_latency_ms`` (``targetLatencyMs``), ``min_rows`` / ``max_rows`` /
      ``initial_rows``: as :class:`~flamestream.spark.control.admission.Budget`.
    * ``partitions``: the keyed stage's maximum parallelism ``P``.
    * ``max_state_bytes_per_partition`` (``maxStateBytesPerPartition``): a keyed
      partition's state never passes it; None: no memory budget.
    * ``max_moves``: slots moved per tick at most (a rescale spreads over ticks).
    * ``high_water``: a partition expected above this share of the budget is spread.
    """

    target_latency_ms: float = 5000.0
    partitions: int = 4
    max_state_bytes_per_partition: int | None = None
    min_rows: int = 100
    max_rows: int | None = None
    initial_rows: int | None = None
    max_moves: int = 4
    high_water: float = 0.5

    def admission(self) -> Budget:
        """The latency part, as the admission controller's budget."""
        return Budget(self.target_latency_ms, self.min_rows, self.max_rows, self.initial_rows)

    @property
    def slots(self) -> int:
        """Key slots of the stage."""
        return self.partitions * SLOTS_PER_PARTITION


@dataclass(frozen=True)
class Measurement:
    """One finished tick.

    ``slot_items``: items each slot received; ``slot_bytes``: each slot's state bytes after
    the tick; ``slot_growth``: each slot's bytes after minus before the tick (as the keyed
    task saw them when it restored and saved the slot).
    """

    rows: int
    duration_ms: float
    slot_items: tuple[int, ...]
    slot_bytes: tuple[int, ...]
    slot_growth: tuple[int, ...] = ()
    backlog: int = 0
    cores: int = 1


@dataclass(frozen=True)
class Move:
    """Slot ``slot`` leaves partition ``source`` for ``target`` with its ``bytes`` of state."""

    slot: int
    source: int
    target: int
    bytes: int


@dataclass(frozen=True)
class Setting:
    """What a tick runs with (recorded in its offset): the policy's input and output.

    ``growth_per_item``: the largest state growth per item seen so far (None: not measured
    yet), kept so that the worst-case bound never forgets a burst.
    """

    limit: int
    active: int
    assignment: tuple[int, ...]
    growth_per_item: float | None = None
    tick: int = 0

    @classmethod
    def initial(cls, budgets: Budgets, cores: int) -> Setting:
        """Before any measurement: one partition per core, slot ``s`` on ``s mod n``.

        The read limit is the admission controller's first (``min_rows`` under a memory
        budget: the growth per item is not known yet).
        """
        active = max(1, min(budgets.partitions, cores))
        first = budgets.initial_rows
        if first is None and budgets.max_state_bytes_per_partition is not None:
            first = budgets.min_rows  # a memory budget: read little until growth is measured
        limit = budgets.admission().clamp(2**31 - 1 if first is None else first)
        return cls(limit, active, tuple(s % active for s in range(budgets.slots)))


@dataclass(frozen=True)
class Plan:
    """The next tick's setting, the moves that lead there, and why."""

    setting: Setting
    moves: tuple[Move, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)


def growth_per_item(previous: float | None, measured: Measurement) -> float | None:
    """The largest growth per item of any slot, over ``previous`` and this tick."""
    rates = [
        max(0.0, grown / items)
        for items, grown in zip(measured.slot_items, measured.slot_growth, strict=False)
        if items > 0
    ]
    if not rates:
        return previous
    return max(previous or 0.0, *rates)


def latency_limit(budgets: Budgets, setting: Setting, history: Sequence[Measurement]) -> int:
    """The admission controller's rule over the same ticks (memory aside)."""
    model = CostModel.fit([Tick(m.rows, m.duration_ms) for m in history[-HISTORY:]])
    return decide(budgets.admission(), model, setting.limit)[0]


@dataclass
class _Draft:
    """The setting being decided: assignment, bytes and items per partition, moves."""

    assignment: list[int]
    active: int
    slot_bytes: Sequence[int]
    slot_items: Sequence[int]
    moves: list[Move]
    #: a partition receiving a slot must stay at or below this many bytes (high water)
    high: float

    def bytes_of(self, partition: int) -> int:
        return sum(b for s, b in enumerate(self.slot_bytes) if self.assignment[s] == partition)

    def items_of(self, partition: int) -> int:
        return sum(i for s, i in enumerate(self.slot_items) if self.assignment[s] == partition)

    def slots_of(self, partition: int) -> list[int]:
        return [s for s, p in enumerate(self.assignment) if p == partition]

    def move(self, slot: int, target: int) -> None:
        source = self.assignment[slot]
        self.moves.append(Move(slot, source, target, self.slot_bytes[slot]))
        self.assignment[slot] = target

    def emptiest(self, exclude: int) -> int:
        """The active partition with the least state (then fewest items, lowest number)."""
        others = [p for p in range(self.active) if p != exclude]
        return min(others, key=lambda p: (self.bytes_of(p), self.items_of(p), p))


def wanted_active(
    budgets: Budgets, cores: int, total_bytes: int, growth: float, rows: int, current: int
) -> tuple[int, str]:
    """Active partitions: one per core, more when the state needs them under the budget.

    ``rows``: the rows the next tick is expected to read. Scaling in waits until the state
    would fill the fewer partitions to half the high water only (no flapping at the mark).
    """
    n = max(1, min(budgets.partitions, cores))
    why = f"{n} for {cores} cores"
    budget = budgets.max_state_bytes_per_partition
    if budget is not None:
        expected = total_bytes + rows * growth
        need = math.ceil(expected / (budgets.high_water * budget))
        if need < current:  # hysteresis
            need = max(need, math.ceil(2 * expected / (budgets.high_water * budget)))
        if need > n:
            n = min(budgets.partitions, need)
            why = f"{n} for {total_bytes} bytes of state + {rows} rows x {growth:.0f}"
    return n, why


def _rescale(draft: _Draft, target: int, max_moves: int) -> str:
    """Scale out to ``target`` partitions at once, or in as far as the moves allow."""
    if target > draft.active:
        before, draft.active = draft.active, target
        return f"scale out {before} -> {target}"
    if target == draft.active:
        return ""
    leaving = [s for s in range(len(draft.assignment)) if draft.assignment[s] >= target]
    first = draft.active
    draft.active = target
    for slot in leaving:
        into = draft.emptiest(-1)
        if (
            len(draft.moves) >= max_moves
            or draft.bytes_of(into) + draft.slot_bytes[slot] > draft.high
        ):
            break
        draft.move(slot, into)
    draft.active = max([target, *(p + 1 for p in draft.assignment)])
    return f"scale in {first} -> {target}: now {draft.active}"


def _spread(draft: _Draft, expected_growth: float, max_moves: int) -> str:
    """Move the largest slots off partitions whose expected state passes the high water."""
    high = draft.high
    total_items = max(1, sum(draft.slot_items))
    spread: list[str] = []
    for p in range(draft.active):
        while len(draft.moves) < max_moves:
            share = draft.items_of(p) / total_items
            if draft.bytes_of(p) + share * expected_growth <= high:
                break
            slots = sorted(draft.slots_of(p), key=lambda s: (-draft.slot_bytes[s], s))
            target = draft.emptiest(p)
            fits = [s for s in slots[:-1] if draft.bytes_of(target) + draft.slot_bytes[s] <= high]
            if not fits or draft.active < 2:
                break
            draft.move(fits[0], target)
            spread.append(f"{fits[0]}:{p}->{target}")
    return f"spread slots {' '.join(spread)}" if spread else ""


def _balance(draft: _Draft, max_moves: int) -> str:
    """Move slots off the hottest partition while that cuts its items (latency skew)."""
    moved: list[str] = []
    while len(draft.moves) < max_moves:
        loads = [draft.items_of(p) for p in range(draft.active)]
        mean = sum(loads) / draft.active
        hot = max(range(draft.active), key=lambda p: (loads[p], -p))
        if not mean or loads[hot] <= SKEW * mean:
            break
        cool = min(range(draft.active), key=lambda p: (loads[p], p))
        slots = sorted(draft.slots_of(hot), key=lambda s: (-draft.slot_items[s], s))
        best = [s for s in slots if loads[cool] + draft.slot_items[s] < loads[hot]]
        fitting = [s for s in best if draft.bytes_of(cool) + draft.slot_bytes[s] <= draft.high]
        if len(slots) < 2 or not fitting:
            break
        draft.move(fitting[0], cool)
        moved.append(f"{fitting[0]}:{hot}->{cool}")
    return f"balance {' '.join(moved)}" if moved else ""


def memory_cap(
    draft: _Draft, budget: int, growth: float, in_flight: int = 0
) -> tuple[int | None, str]:
    """The most rows a tick may read so that no partition passes ``budget`` bytes.

    Worst case: every row lands in the fullest partition and grows it by ``growth``, after
    the ``in_flight`` rows already admitted did the same.
    """
    if growth <= 0:
        return None, ""
    fullest = max(range(draft.active), key=lambda p: (draft.bytes_of(p), -p))
    free = budget - draft.bytes_of(fullest)
    room = free - math.ceil(in_flight * growth)
    cap = max(0, math.floor(room / growth))
    if in_flight:  # the next tick is in flight too: share the room with it (no 2-cycle of
        # a large limit leaving a small room, then the converse)
        cap = min(cap, max(0, math.floor(free / (2 * growth))))
    return cap, f"partition {fullest}: {room} bytes of room / {growth:.1f} per item = {cap} rows"


def plan(
    budgets: Budgets, setting: Setting, history: Sequence[Measurement], in_flight: int = 0
) -> Plan:
    """The next tick's setting from the last ticks (``history``, oldest first; pure).

    ``in_flight``: rows a tick already admitted under an earlier decision will add before
    this decision's limit applies (a caller whose readers pick up the limit a tick late).
    The moves apply at once.
    """
    if not history:
        return Plan(setting, (), ("no measurement yet",))
    last = history[-1]
    growth = growth_per_item(setting.growth_per_item, last)
    limit = latency_limit(budgets, setting, history)
    reasons = [f"latency: {limit} rows"]
    budget = budgets.max_state_bytes_per_partition
    slots = len(setting.assignment)  # a measurement may leave out the slots with nothing
    slot_bytes = [*last.slot_bytes[:slots], *[0] * (slots - len(last.slot_bytes))]
    items = [*last.slot_items[:slots], *[0] * (slots - len(last.slot_items))]
    high = math.inf if budget is None else budgets.high_water * budget
    if budget is not None:  # a partition receiving slots must still take the in-flight rows
        high = min(high, budget - in_flight * (growth or 0.0))
    draft = _Draft(list(setting.assignment), setting.active, slot_bytes, items, [], high)
    # the next tick reads at most the limit, and about what is waiting (twice: it grows)
    rows = min(limit, 2 * (last.rows + last.backlog))
    n, why = wanted_active(
        budgets, last.cores, sum(slot_bytes), growth or 0.0, rows, setting.active
    )
    steps = [_rescale(draft, n, budgets.max_moves)]
    if budget is not None:
        steps.append(_spread(draft, rows * (growth or 0.0), budgets.max_moves))
    steps.append(_balance(draft, budgets.max_moves))
    reasons += [f"active: {why}"] + [s for s in steps if s]
    if budget is not None:
        cap, because = memory_cap(draft, budget, growth or 0.0, in_flight)
        if growth is None:  # no growth measured yet: read the least until it is
            cap, because = budgets.min_rows, "growth per item not measured yet"
        if cap is not None and cap < limit:
            limit = cap
            reasons.append(f"memory: {because}")
    new = Setting(limit, draft.active, tuple(draft.assignment), growth, setting.tick + 1)
    return Plan(new, tuple(draft.moves), tuple(reasons))


def apply_moves(setting: Setting, moves: Sequence[Move]) -> Setting:
    """``setting`` with ``moves`` done (a caller replaying a recorded plan)."""
    assignment = list(setting.assignment)
    for move in moves:
        assignment[move.slot] = move.target
    return replace(setting, assignment=tuple(assignment))
