"""Elastic key layout: key ranges (slots) move between keyed partitions between ticks.

A keyed stage's keys fall into ``slots`` = ``SLOTS_PER_PARTITION`` times the partitions
(``slot_of``: CRC-32 of the encoded key). A tick's *layout* assigns every slot to a partition;
rows entering the stage carry a ``route`` column that lands them in their slot's partition
(``Layout.route``), and each task keeps its groupings' state *per slot*, so a slot's state
moves with it: a task restores the snapshots of the slots the tick gives it, merges them,
runs the batch, and saves one snapshot per slot again (``GroupingState.split`` / ``merge``).

The layout of batch ``b`` is in the query's offset log, as the end offset of an internal
source, the *control channel* (``format("flamestream").option("channel", "control")``, unioned in
by ``apply`` with ``elastic=True``). Its reader runs in the driver's source process: at each
planning it reads how many items each slot received in the last batch (written by the keyed
tasks), and if one partition carries much more than its share, it packs the slots anew
(largest first onto the least loaded partition: a *split* of the hot partition's key range);
when the load would be even again under the default layout, it goes back to it (a *merge*
of the ranges it had split). A new
layout changes the control channel's offset; an unchanged one does not, so the control channel
never makes a batch happen by itself except to carry a decision. A replayed batch reads the
same offsets, hence the same layout, hence restores the same slots.

Of the ``P`` key partitions (the shuffle's, fixed per checkpoint), ``n`` are *active*: the
slots are laid out over partitions ``0 … n-1`` only. A rescale request changes ``n``: the
reader computes a target layout (:func:`rescale_target`) and moves a bounded number of slots
towards it per batch (:func:`migration_step`), the target staying in the offset until it is
reached (the protocol: ``ControlReader.latestOffset``). Every function here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from flamestream.errors import ConfigError
from flamestream.model.keys import slot_of as slot_of  # the rule lives below every layer
from flamestream.spark.durable import (
    QueryCheckpoint,
)
from flamestream.spark.exec.general.partitioning import SALT_PREFIX, is_salt, landing_keys

#: Slots per key partition: how finely key ranges can be moved.
SLOTS_PER_PARTITION = 4


#: Route values start with this byte (salts, which mark invalidator copies, with ``\\x00``).
ROUTE_PREFIX = b"\x01"


#: A partition carrying more than this times the mean load is hot.
SKEW = 1.5


#: A moved layout goes back to the default once that would carry at most this times the mean
#: (below SKEW, so that a layout does not flip back and forth at the threshold).
EVEN = 1.2


#: Below this many items in a batch, loads say too little to move anything.
MIN_ITEMS = 200


#: A new packing must cut the hottest partition's load by this factor to be worth a move.
GAIN = 0.8


@cache
def routes(partitions: int) -> tuple[bytes, ...]:
    """One route value per partition: ``repartition(n, "route")`` puts ``routes(n)[p]`` in p."""
    return landing_keys(ROUTE_PREFIX, partitions)


@dataclass(frozen=True)
class Layout:
    """Which partition holds each slot."""

    partitions: int
    assignment: tuple[int, ...]

    @classmethod
    def default(cls, partitions: int, active: int | None = None) -> Layout:
        """Slot ``s`` in partition ``s mod n`` of the ``n`` active ones (all by default)."""
        slots = partitions * SLOTS_PER_PARTITION
        n = partitions if active is None else active
        return cls(partitions, tuple(s % n for s in range(slots)))

    @property
    def slots(self) -> int:
        """How many slots there are."""
        return len(self.assignment)

    def partition_of(self, key: bytes) -> int:
        """The partition holding the encoded key's slot."""
        return self.assignment[slot_of(key, self.slots)]

    def route(self, key: bytes | None) -> bytes | None:
        """The ``route`` value of a row with ``key``: None (everywhere) and salts stay."""
        if key is None or is_salt(key):
            return key
        return routes(self.partitions)[self.partition_of(key)]

    def slots_of(self, partition: int) -> list[int]:
        """The slots of ``partition``."""
        return [s for s, p in enumerate(self.assignment) if p == partition]

    def loads(self, slot_loads: Mapping[int, int]) -> list[int]:
        """Items per partition, given items per slot."""
        out = [0] * self.partitions
        for slot, items in slot_loads.items():
            out[self.assignment[slot]] += items
        return out

    def holders(self) -> int:
        """How many partitions hold at least one slot."""
        return len(set(self.assignment))

    def moves_to(self, target: Layout) -> list[int]:
        """The slots ``target`` puts in another partition than this layout does."""
        return [
            s
            for s, (a, b) in enumerate(zip(self.assignment, target.assignment, strict=True))
            if a != b
        ]


#: Batches in a row a count desired from the cluster's cores must hold before it is acted upon.
FOLLOW_SETTLE = 2


#: How errors name an elastic policy's options.
POLICY = "elastic policy"


#: Without ``max_move_slots``, at most this share of the slots moves into one batch (and at
#: least ``SLOTS_PER_PARTITION``): a rescale from 1 to ``P`` >= 8 partitions takes 8 batches.
MOVE_SHARE = 8


@dataclass(frozen=True)
class ElasticPolicy:
    """How the control channel lays key ranges out and moves them (``SparkGraph(elastic=...)``).

    ``active``: the partitions holding slots when a checkpoint starts (None: all ``P``, the
    key partitions); afterwards ``QueryControl.rescale(n)`` changes it. ``max_move_slots`` and
    ``max_move_bytes``: at most this many slots, and this many bytes of their newest state
    snapshots, move into one batch (None: ``max(4, slots // 8)`` slots, no byte bound); one
    slot always moves, so a migration ends whatever its slots weigh. ``follow_cluster``: the
    active count follows the cores the application has (:mod:`.cluster`), changed once the
    same count was desired after ``settle`` batches in a row, and held while batches take at
    most half of ``target_latency_ms`` (None: no budget, the cores decide). ``skew``,
    ``even``, ``min_items``, ``gain``: when loads alone move slots (see :func:`plan_layout`).
    """

    active: int | None = None
    max_move_slots: int | None = None
    max_move_bytes: int | None = None
    follow_cluster: bool = False
    settle: int = FOLLOW_SETTLE
    target_latency_ms: int | None = None
    skew: float = SKEW
    even: float = EVEN
    min_items: int = MIN_ITEMS
    gain: float = GAIN

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("active", self.active, "an int >= 1 (at most the key partitions), or None for all"),
            ("max_move_slots", self.max_move_slots, "an int >= 1, or None for slots // 8"),
            ("max_move_bytes", self.max_move_bytes, "an int >= 1, or None for no byte bound"),
            ("settle", self.settle, "an int >= 1"),
            ("target_latency_ms", self.target_latency_ms, "an int >= 1, or None for no budget"),
        ):
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(POLICY, name, value, allowed)

    def check(self, partitions: int, where: str = POLICY) -> None:
        """Raise if ``active`` exceeds the key partitions ``partitions`` (``P``)."""
        if self.active is not None and self.active > partitions:
            allowed = f"an int from 1 to {partitions} (the key partitions, P)"
            raise ConfigError(where, "active", self.active, allowed)

    def move_slots(self, slots: int) -> int:
        """At most this many slots move into one batch, of ``slots``."""
        if self.max_move_slots is not None:
            return self.max_move_slots
        return max(SLOTS_PER_PARTITION, slots // MOVE_SHARE)

    def options(self) -> dict[str, str]:
        """As control channel options."""
        out = {
            "skew": str(self.skew),
            "even": str(self.even),
            "minItems": str(self.min_items),
            "gain": str(self.gain),
        }
        for name, value in (
            ("active", self.active),
            ("maxMoveSlots", self.max_move_slots),
            ("maxMoveBytes", self.max_move_bytes),
            ("targetLatencyMs", self.target_latency_ms),
        ):
            if value is not None:
                out[name] = str(value)
        if self.follow_cluster:
            out["followCluster"] = "true"
            out["settle"] = str(self.settle)
        return out


def plan_layout(
    current: Layout,
    slot_loads: Mapping[int, int],
    policy: ElasticPolicy | None = None,
    active: int | None = None,
    home: Layout | None = None,
) -> tuple[Layout | None, str]:
    """A better layout over ``active`` partitions for these loads, or None (pure).

    See the module docstring; ``active`` (default: all) partitions hold slots. ``home`` is
    the layout a merge goes back to: the last rescale's target (default: slot ``s`` in
    partition ``s mod active``), so that a rescaled layout is not moved again for nothing.
    """
    policy = policy or ElasticPolicy()
    n = current.partitions if active is None else active
    total = sum(slot_loads.values())
    if total < policy.min_items:
        return None, f"{total} items: too few to judge"
    mean = total / n
    loads = current.loads(slot_loads)
    hottest = max(loads)
    default = home or Layout.default(current.partitions, n)
    if current != default and max(default.loads(slot_loads)) <= policy.even * mean:
        return default, f"even under the home layout (max {max(default.loads(slot_loads))})"
    if hottest <= policy.skew * mean:
        return None, f"balanced (max {hottest}, mean {mean:.0f})"
    packed = [0] * n
    assignment = list(current.assignment)
    for slot in sorted(range(current.slots), key=lambda s: (-slot_loads.get(s, 0), s)):
        target = min(range(n), key=lambda p: (packed[p], p))
        assignment[slot] = target
        packed[target] += slot_loads.get(slot, 0)
    if max(packed) > policy.gain * hottest:
        return None, f"no packing cuts the hot partition's {hottest} items enough"
    return Layout(current.partitions, tuple(assignment)), (
        f"split: max partition load {hottest} -> {max(packed)} (mean {mean:.0f})"
    )


def rescale_target(
    current: Layout, active: int, slot_loads: Mapping[int, int] | None = None
) -> Layout:
    """Where the slots go when ``active`` partitions (0 … active-1) hold them (pure).

    A slot weighs 1 + its items in the last batch (without loads the slots spread evenly by
    count). An active partition keeps its slots, heaviest first, while they fit its fair
    share (one at least); the rest, and every slot of a partition no longer active, go
    heaviest first to the active partition holding the least weight. If that does not lower
    the heaviest partition's weight and no inactive partition holds a slot, nothing moves.
    Loads that changed may repack a layout already over ``active`` partitions: a request for
    the count already held does not come here (:func:`decide_rescale`).
    """
    if not 1 <= active <= current.partitions:
        msg = f"active {active} is not in 1..{current.partitions}"
        raise ValueError(msg)
    loads = slot_loads or {}
    weight = [1 + loads.get(s, 0) for s in range(current.slots)]
    fair = sum(weight) / active
    assignment = list(current.assignment)
    held = [0] * active
    pool = []
    for partition in range(current.partitions):
        for slot in sorted(current.slots_of(partition), key=lambda s: (-weight[s], s)):
            if partition < active and (
                held[partition] + weight[slot] <= fair or not held[partition]
            ):
                held[partition] += weight[slot]
            else:
                pool.append(slot)
    for slot in sorted(pool, key=lambda s: (-weight[s], s)):
        partition = min(range(active), key=lambda q: (held[q], q))
        assignment[slot] = partition
        held[partition] += weight[slot]
    target = Layout(current.partitions, tuple(assignment))
    weights = dict(enumerate(weight))
    if max(current.assignment) < active and max(target.loads(weights)) >= max(
        current.loads(weights)
    ):
        return current
    return target


@dataclass(frozen=True)
class RescaleDecision:
    """What a rescale request leaves: the active count, the migration's target, ``home``.

    ``target``: the layout the migration goes to from now on (None: nothing left to move);
    ``home``: where a merge after a split goes back to (None: the default over the active
    partitions); ``moves``: the slots ``target`` moves from the current layout; ``text``:
    the decision in words.
    """

    active: int
    target: Layout | None
    home: Layout | None
    moves: int
    text: str


def decide_rescale(
    current: Layout,
    held: int,
    asked: int,
    target: Layout | None = None,
    home: Layout | None = None,
    slot_loads: Mapping[int, int] | None = None,
) -> RescaleDecision:
    """A request for ``asked`` active partitions, ``held`` being active now (pure).

    ``current``: the layout now; ``target``, ``home``: the migration in progress and the
    merge's home now; ``slot_loads``: items per slot in the last batch. The count already
    held (the last one asked, or the one the checkpoint started with) changes nothing,
    whatever the loads: the layout, the migration in progress and ``home`` stay, so asking
    twice for a count moves slots once. Another count gets a target over ``asked``
    partitions (:func:`rescale_target`), which is also ``home``, replacing the target in
    progress: the migration goes on from ``current``. ``1 <= asked <= P`` is the caller's
    to check.
    """
    if asked == held:
        left = len(current.moves_to(target)) if target is not None else 0
        going = f", the migration in progress goes on ({left} slots to move)" if left else ""
        return RescaleDecision(
            held, target, home, left, f"{held} active partitions already: nothing new{going}"
        )
    new = rescale_target(current, asked, slot_loads)
    moves = len(current.moves_to(new))
    return RescaleDecision(
        asked,
        new if moves else None,
        new,
        moves,
        f"{held} -> {asked} active partitions, {moves} slots to move",
    )


def migration_step(
    current: Layout,
    target: Layout,
    max_slots: int,
    max_bytes: int | None = None,
    sizes: Mapping[int, int] | None = None,
) -> tuple[Layout, list[int]]:
    """The next batch's layout on the way from ``current`` to ``target``, and its moved slots.

    The slots still to move are taken in turns over their destinations (each destination's
    first slot, then each one's second …, slot order within a turn), so that every new
    partition gets work early and every leaving one sheds it evenly; they move while at most
    ``max_slots`` slots and ``max_bytes`` bytes (``sizes``: bytes of each slot's newest
    snapshot) are moved. The first always moves: a migration of ``m`` slots ends in
    ``ceil(m / max_slots)`` batches without a byte bound, and in at most ``m`` with one.
    """
    turns: dict[int, int] = {}
    order = []
    for slot in current.moves_to(target):
        destination = target.assignment[slot]
        order.append((turns.get(destination, 0), slot))
        turns[destination] = turns.get(destination, 0) + 1
    moved: list[int] = []
    used = 0
    for _, slot in sorted(order):
        size = (sizes or {}).get(slot, 0)
        if moved and (
            len(moved) >= max_slots or (max_bytes is not None and used + size > max_bytes)
        ):
            break
        moved.append(slot)
        used += size
    assignment = list(current.assignment)
    for slot in moved:
        assignment[slot] = target.assignment[slot]
    return Layout(current.partitions, tuple(assignment)), moved


def desired_active(
    cores: int,
    partitions: int,
    current: int,
    *,
    batch_ms: float | None = None,
    target_ms: float | None = None,
    slot_loads: Mapping[int, int] | None = None,
) -> int:
    """The active count a controller following the cluster asks for (pure).

    ``cores``: the task slots the cluster has now (executors times cores each); ``partitions``:
    ``P``; ``current``: the active count now; ``batch_ms``: the last batch's duration;
    ``target_ms``: the latency budget; ``slot_loads``: items per slot in the last batch.

    1. The ceiling is the least of ``P``, the cores (more active partitions than cores only
       queue their tasks) and the slots that got items (a partition without one has nothing
       to do); never below 1.
    2. Well within the budget (``batch_ms <= target_ms / 2``), no growth: the current count,
       if under the ceiling.
    3. Otherwise (over half the budget, or no budget known): the ceiling.
    """
    ceiling = min(partitions, max(cores, 1))
    if slot_loads:
        ceiling = min(ceiling, max(1, sum(1 for items in slot_loads.values() if items > 0)))
    ceiling = max(ceiling, 1)
    if batch_ms is not None and target_ms is not None and batch_ms <= target_ms / 2:
        return max(1, min(current, ceiling))
    return ceiling


_LAYOUTS: dict[tuple[str, int], Layout] = {}


def read_layout(checkpoint: str, batch_id: int, partitions: int) -> Layout:
    """Batch ``batch_id``'s layout, from the control channel's line of the offset log."""
    cached = _LAYOUTS.get((checkpoint, batch_id))
    if cached is not None:
        return cached
    layout = Layout.default(partitions)
    offsets = QueryCheckpoint(checkpoint).source_offsets(batch_id) if batch_id >= 0 else None
    if offsets is not None:
        for offset in offsets:
            if isinstance(offset, dict) and offset.get("flamestreamLayout") == 1:
                layout = Layout(int(offset["partitions"]), tuple(offset["assignment"]))
        if len(_LAYOUTS) > 64:
            _LAYOUTS.clear()
        _LAYOUTS[(checkpoint, batch_id)] = layout
    return layout


__all__ = [
    "SALT_PREFIX",
    "ElasticPolicy",
    "Layout",
    "RescaleDecision",
    "decide_rescale",
    "desired_active",
    "migration_step",
    "plan_layout",
    "read_layout",
    "rescale_target",
    "routes",
    "slot_of",
]
