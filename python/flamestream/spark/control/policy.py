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
   slots' bytes now plus the rows landing on it times the state growth per item. Growth per
   item: bytes grown over items received, over the last ``GROWTH_WINDOW`` ticks (so the
   key-creating first ticks are forgotten), never below the last tick's rate of a partition
   near its budget. Rows landing on a partition: at most its *burst bound*, ``burst_share``
   x its slots' share of the rows over the same ticks (at least their share of the slots),
   capped at 1. The policy first *spreads*: when a partition's expected state (its share of
   the tick's growth) would pass ``high_water`` x the budget, it moves that partition's
   largest slots to the partition with the least state, activating more partitions when
   the active ones are full. Then it *caps admission* so that the bound fits: ``limit <=
   (budget - bytes) / (growth x bound)`` for every partition. So the budget holds while no
   partition receives more than its bound of a tick and no item grows the state by more than
   the estimate; a tick that broke either is reported (``surprise`` in the reasons), and the
   half-budget spread keeps headroom for it.
   With ``exact_or_approximate`` steps (``sketch_bytes_per_key``), a partition whose cap
   would fall below ``min_rows`` (or half the rows the next tick would read) first
   *sketches* key slots
   (:func:`sketch_slots`): the slots whose keys would hold fewer bytes as sketches, largest
   saving first, until the saving brings it under the high water. A sketched slot's keys turn
   their exact values into a sketch at their next update, so the cap of a partition holding
   sketched slots stays at least ``min_rows`` (its state shrinks only as keys are read).
3. **CPU.** With ``max_cpu_us_per_record``, the cheaper of equal-output settings while the
   CPU per record over the last ``cpu_window_ms`` is over it (:mod:`.cpu`): batches large
   enough to amortize a batch's fixed CPU (the fronts wait for them, at most half the
   latency budget), then fewer active partitions; memory first, then latency, then CPU, and
   a ``cpu: not held`` reason when no such setting holds it.
4. **Balance.** When one partition carries more than ``SKEW`` x the mean items, its slots
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

from flamestream.spark.control import cpu as cpu_rule
from flamestream.spark.control.admission import HISTORY, Budget, CostModel, Tick, decide

#: Slots per maximum partition (as the elastic key layout has them).
SLOTS_PER_PARTITION = 4

#: A partition carrying more than this times the mean items is hot (as the key layout's).
SKEW = 1.5

#: Ticks over which growth per item and each partition's share of the rows are measured.
GROWTH_WINDOW = 4


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
    * ``burst_share`` (``burstShare``): the declared burst bound: a partition receives at
      most this times its observed share of a tick's rows (capped at 1). The memory budget
      is guaranteed while the input keeps to it; ``inf`` bounds nothing (every row of a
      tick may land in one partition, the most cautious).
    * ``sketch_bytes_per_key`` (``sketchBytesPerKey``): the graph has
      ``exact_or_approximate`` steps and a key of theirs holds at most this many bytes once
      its slot is sketched; None: no slot is ever sketched.
    * ``max_cpu_us_per_record`` (``maxCpuMicrosPerRecord``): CPU time per record, over the
      last ``cpu_window_ms`` (``cpuWindowMs``) of batches; None: no CPU budget.
    """

    target_latency_ms: float = 5000.0
    partitions: int = 4
    max_state_bytes_per_partition: int | None = None
    min_rows: int = 100
    max_rows: int | None = None
    initial_rows: int | None = None
    max_moves: int = 4
    high_water: float = 0.5
    burst_share: float = 2.0
    sketch_bytes_per_key: int | None = None
    max_cpu_us_per_record: float | None = None
    cpu_window_ms: float = 60_000.0

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
    task saw them when it restored and saved the slot); ``slot_keys``: each slot's keys after
    the tick (summed over the groupings); ``cpu_ms``: the CPU the application's processes
    used during the tick (None: not measured); ``active``: its active partitions (0: not
    known).
    """

    rows: int
    duration_ms: float
    slot_items: tuple[int, ...]
    slot_bytes: tuple[int, ...]
    slot_growth: tuple[int, ...] = ()
    backlog: int = 0
    cores: int = 1
    slot_keys: tuple[int, ...] = ()
    cpu_ms: float | None = None
    active: int = 0


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

    ``growth_per_item``: the state growth per item the last decision used (None: not
    measured yet); the next decision falls back on it when the recent ticks received nothing.
    ``sketched``: the slots whose ``exact_or_approximate`` keys are sketched (only grows).
    ``wait_rows`` / ``max_wait_ms``: fronts hold a batch until that many rows wait, at most
    that long (the CPU rule's larger batches; 0: no wait); ``cpu_ceiling``: the CPU rule's
    most active partitions (None: none).
    """

    limit: int
    active: int
    assignment: tuple[int, ...]
    growth_per_item: float | None = None
    tick: int = 0
    sketched: tuple[int, ...] = ()
    wait_rows: int = 0
    max_wait_ms: float = 0.0
    cpu_ceiling: int | None = None

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


def _window(history: Sequence[Measurement]) -> Sequence[Measurement]:
    return history[-GROWTH_WINDOW:]


def _rate(measured: Sequence[Measurement], slots: Sequence[int]) -> float | None:
    """Bytes grown per item received by ``slots`` over ``measured`` (None: no items)."""
    items = sum(m.slot_items[s] for m in measured for s in slots if s < len(m.slot_items))
    grown = sum(m.slot_growth[s] for m in measured for s in slots if s < len(m.slot_growth))
    return max(0.0, grown / items) if items > 0 else None


def growth_per_item(
    previous: float | None,
    history: Sequence[Measurement],
    near_budget: Sequence[Sequence[int]] = (),
) -> float | None:
    """State growth per item: over the last ``GROWTH_WINDOW`` ticks, all slots together.

    Never below the last tick's rate over the slots of a partition near its budget
    (``near_budget``: their slot lists). ``previous`` when the window received nothing.
    """
    window = _window(history)
    slots = range(max((len(m.slot_items) for m in window), default=0))
    rates = [_rate(window, slots)] + [_rate(window[-1:], p) for p in near_budget]
    found = [r for r in rates if r is not None]
    return max(found) if found else previous


def burst_bounds(
    budgets: Budgets, assignment: Sequence[int], active: int, history: Sequence[Measurement]
) -> list[float]:
    """Per partition: the most of a tick's rows it may receive (the declared burst bound).

    ``burst_share`` x the share of the rows its slots received over the last
    ``GROWTH_WINDOW`` ticks (at least its share of the slots), capped at 1.
    """
    window = _window(history)
    rows = sum(sum(m.slot_items) for m in window)
    out = []
    for p in range(max(active, *assignment, 0) + 1):
        slots = [s for s, q in enumerate(assignment) if q == p]
        got = sum(m.slot_items[s] for m in window for s in slots if s < len(m.slot_items))
        share = max(got / rows if rows else 0.0, len(slots) / len(assignment))
        out.append(min(1.0, budgets.burst_share * share) if slots else 0.0)
    return out


def surprises(budgets: Budgets, setting: Setting, history: Sequence[Measurement]) -> list[str]:
    """What the last tick did beyond the bounds the decision before it assumed.

    A partition receiving more than its burst bound of the tick's rows, or growing by more
    per item than the estimate: the memory guarantee did not cover that tick.
    """
    if len(history) < 2 or budgets.max_state_bytes_per_partition is None:
        return []
    last, before = history[-1], history[:-1]
    bounds = burst_bounds(budgets, setting.assignment, setting.active, before)
    total = sum(last.slot_items)
    found = []
    for p, bound in enumerate(bounds):
        slots = [s for s, q in enumerate(setting.assignment) if q == p]
        got = sum(last.slot_items[s] for s in slots if s < len(last.slot_items))
        if total and got > bound * total:
            found.append(
                f"surprise: partition {p} received {got} of {total} rows, "
                f"over its burst bound {bound:.2f} (burstShare {budgets.burst_share})"
            )
        rate = _rate([last], slots)
        estimate = setting.growth_per_item
        if estimate is not None and rate is not None and got and rate > estimate * 1.000001:
            found.append(
                f"surprise: partition {p} grew {rate:.1f} bytes per item, "
                f"over the estimate {estimate:.1f}"
            )
    return found


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
            if draft.active < 2:  # nowhere to spread to (one core, or the CPU rule's one)
                break
            slots = sorted(draft.slots_of(p), key=lambda s: (-draft.slot_bytes[s], s))
            target = draft.emptiest(p)
            fits = [s for s in slots[:-1] if draft.bytes_of(target) + draft.slot_bytes[s] <= high]
            if not fits:
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
    draft: _Draft, budget: int, growth: float, bounds: Sequence[float], in_flight: int = 0
) -> tuple[int | None, str]:
    """The most rows a tick may read so that no partition passes ``budget`` bytes.

    Partition ``p`` receives at most ``bounds[p]`` of a tick's rows, each growing it by
    ``growth``, after the ``in_flight`` rows already admitted did the same.
    """
    if growth <= 0:
        return None, ""
    best: tuple[int, int, int] | None = None  # (cap, partition, room)
    for p in range(draft.active):
        found = partition_cap(draft, p, budget, growth, bounds, in_flight)
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], p, found[1])
    if best is None:
        return None, ""
    cap, p, room = best
    share = bounds[p] if p < len(bounds) else 1.0
    return cap, (
        f"partition {p}: {room} bytes of room / ({growth:.1f} per item x burst bound "
        f"{share:.2f}) = {cap} rows"
    )


def partition_cap(
    draft: _Draft,
    p: int,
    budget: int,
    growth: float,
    bounds: Sequence[float],
    in_flight: int = 0,
) -> tuple[int, int] | None:
    """Partition ``p``'s (cap, room): :func:`memory_cap`'s rule for one partition."""
    per_row = growth * (bounds[p] if p < len(bounds) else 1.0)
    if per_row <= 0:
        return None
    free = budget - draft.bytes_of(p)
    room = free - math.ceil(in_flight * per_row)
    cap = max(0, math.floor(room / per_row))
    if in_flight:  # the next tick is in flight too: share the room with it (no 2-cycle
        # of a large limit leaving a small room, then the converse)
        cap = min(cap, max(0, math.floor(free / (2 * per_row))))
    return cap, room


def sketch_slots(
    budgets: Budgets,
    draft: _Draft,
    growth: float,
    bounds: Sequence[float],
    demand: int,
    sketched: Sequence[int],
    slot_keys: Sequence[int],
    in_flight: int = 0,
) -> tuple[tuple[int, ...], str]:
    """The slots sketched after this tick (``sketched`` and the new ones), and why.

    A partition whose cap would fall below ``min_rows`` (or half ``demand``, the rows the next
    tick would read: the latency rule's limit, at most twice what is waiting) would throttle
    reading: it sketches its slots not sketched yet whose keys would hold fewer bytes as
    sketches (``bytes - keys x sketch_bytes_per_key`` > 0), largest saving first, until the
    savings bring it under the high water. Sketching bounds the bytes per key, not the keys: a slot
    whose keys are small saves nothing and is left exact.
    """
    budget, per_key = budgets.max_state_bytes_per_partition, budgets.sketch_bytes_per_key
    if budget is None or per_key is None or growth <= 0:
        return tuple(sketched), ""
    floor = max(budgets.min_rows, demand // 2)
    chosen = set(sketched)
    said = []
    for p in range(draft.active):
        found = partition_cap(draft, p, budget, growth, bounds, in_flight)
        if found is None or found[0] >= floor:
            continue
        saving = {
            s: draft.slot_bytes[s] - (slot_keys[s] if s < len(slot_keys) else 0) * per_key
            for s in draft.slots_of(p)
            if s not in chosen
        }
        over = draft.bytes_of(p) - draft.high
        for s in sorted((s for s in saving if saving[s] > 0), key=lambda s: (-saving[s], s)):
            if over <= 0:
                break
            chosen.add(s)
            over -= saving[s]
            said.append(f"{s}:{saving[s]}")
    why = f"sketch slots {' '.join(said)} (slot:bytes saved)" if said else ""
    return tuple(sorted(chosen)), why


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
    budget = budgets.max_state_bytes_per_partition
    slots = len(setting.assignment)  # a measurement may leave out the slots with nothing
    slot_bytes = [*last.slot_bytes[:slots], *[0] * (slots - len(last.slot_bytes))]
    items = [*last.slot_items[:slots], *[0] * (slots - len(last.slot_items))]
    growth = growth_per_item(setting.growth_per_item, history, _near(budgets, setting, slot_bytes))
    limit = latency_limit(budgets, setting, history)
    reasons = [f"latency: {limit} rows", *surprises(budgets, setting, history)]
    high = math.inf if budget is None else budgets.high_water * budget
    if budget is not None:  # a partition receiving slots must still take the in-flight rows
        high = min(high, budget - in_flight * (growth or 0.0))
    draft = _Draft(list(setting.assignment), setting.active, slot_bytes, items, [], high)
    # the next tick reads at most the limit, and about what is waiting (twice: it grows)
    rows = min(limit, 2 * (last.rows + last.backlog))
    n, why = wanted_active(
        budgets, last.cores, sum(slot_bytes), growth or 0.0, rows, setting.active
    )
    # the partitions the state budget alone needs: a floor under the CPU rule's ceiling
    needed, _ = wanted_active(budgets, 1, sum(slot_bytes), growth or 0.0, rows, setting.active)
    cpu = _cpu_choice(budgets, setting, history, limit, needed)
    if cpu.active_ceiling is not None and max(cpu.active_ceiling, needed) < n:
        n = max(cpu.active_ceiling, needed)
        why = f"{n} for the CPU budget (the state needs {needed})"
    steps = [_rescale(draft, n, budgets.max_moves)]
    if budget is not None:
        steps.append(_spread(draft, rows * (growth or 0.0), budgets.max_moves))
    steps.append(_balance(draft, budgets.max_moves))
    reasons += [f"active: {why}"] + [s for s in steps if s]
    sketched = setting.sketched
    if budget is not None:
        bounds = burst_bounds(budgets, draft.assignment, draft.active, history)
        keys = [*last.slot_keys[:slots], *[0] * (slots - len(last.slot_keys))]
        sketched, why = sketch_slots(
            budgets, draft, growth or 0.0, bounds, rows, sketched, keys, in_flight
        )
        reasons += [why] if why else []
        cap, because = memory_cap(draft, budget, growth or 0.0, bounds, in_flight)
        if growth is None:  # no growth measured yet: read the least until it is
            cap, because = budgets.min_rows, "growth per item not measured yet"
        elif (
            cap is not None
            and cap < budgets.min_rows
            and _all_sketched(budgets, draft, growth, bounds, sketched, in_flight)
        ):
            # sketched keys shrink only as they are updated: keep reading them
            cap, because = budgets.min_rows, f"{because}; sketched slots: minRows still read"
        if cap is not None and cap < limit:
            limit = cap
            reasons.append(f"memory: {because}")
    reasons += cpu.reasons
    wait = min(cpu.wait_rows, limit)
    new = Setting(
        limit,
        draft.active,
        tuple(draft.assignment),
        growth,
        setting.tick + 1,
        sketched,
        wait_rows=wait,
        max_wait_ms=cpu.max_wait_ms if wait else 0.0,
        cpu_ceiling=cpu.active_ceiling,
    )
    return Plan(new, tuple(draft.moves), tuple(reasons))


def _cpu_choice(
    budgets: Budgets,
    setting: Setting,
    history: Sequence[Measurement],
    limit: int,
    memory_active: int,
) -> cpu_rule.CpuChoice:
    """The CPU rule's choice (:mod:`.cpu`).

    ``limit``: the latency rule's; ``memory_active``: the partitions the state budget needs
    (a floor for the CPU rule's ceiling, which :func:`plan` applies too). A tick that read its
    whole limit is latency pressure (rows were waiting): the ceiling goes.
    """
    if budgets.max_cpu_us_per_record is None:
        return cpu_rule.CpuChoice()
    ticks = [
        cpu_rule.CpuTick(
            m.rows,
            m.duration_ms,
            m.cpu_ms,
            m.active or setting.active,
            max(m.backlog, 1 + m.rows if m is history[-1] and m.rows >= setting.limit else 0),
        )
        for m in history
    ]
    return cpu_rule.choose(
        budgets.max_cpu_us_per_record,
        budgets.cpu_window_ms,
        budgets.target_latency_ms,
        ticks,
        budgets.admission().clamp(limit),
        setting.active,
        memory_active,
        setting.cpu_ceiling,
        setting.wait_rows,
    )


def _all_sketched(
    budgets: Budgets,
    draft: _Draft,
    growth: float,
    bounds: Sequence[float],
    sketched: Sequence[int],
    in_flight: int,
) -> bool:
    """Whether every partition capped below ``min_rows`` holds sketched slots."""
    budget = budgets.max_state_bytes_per_partition
    assert budget is not None  # noqa: S101
    for p in range(draft.active):
        found = partition_cap(draft, p, budget, growth, bounds, in_flight)
        capped = found is not None and found[0] < budgets.min_rows
        if capped and not set(draft.slots_of(p)) & set(sketched):
            return False
    return True


def _near(budgets: Budgets, setting: Setting, slot_bytes: Sequence[int]) -> list[list[int]]:
    """The slot lists of the partitions past the high water (their last rate is a floor)."""
    budget = budgets.max_state_bytes_per_partition
    if budget is None:
        return []
    out = []
    for p in range(max(setting.assignment, default=0) + 1):
        slots = [s for s, q in enumerate(setting.assignment) if q == p]
        if sum(slot_bytes[s] for s in slots) >= budgets.high_water * budget:
            out.append(slots)
    return out


def apply_moves(setting: Setting, moves: Sequence[Move]) -> Setting:
    """``setting`` with ``moves`` done (a caller replaying a recorded plan)."""
    assignment = list(setting.assignment)
    for move in moves:
        assignment[move.slot] = move.target
    return replace(setting, assignment=tuple(assignment))
