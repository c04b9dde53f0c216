"""The reference runtime: in-process, single-threaded, deterministic. The oracle for the others.

It interprets a logical graph item by item. Items in flight sit in a pool of envelopes; a
:class:`Scheduler` picks which one is delivered next, so tests can reorder and delay
deliveries at will (FIFO, seeded random, or held back on purpose). Fronts stamp global times,
send reports and close; the acker, the groupings and the barrier sinks do the rest, exactly as
``docs/architecture.md`` describes. Nothing here imports Spark.

>>> from flamestream import Dataflow
>>> flow = Dataflow("parity")
>>> numbers = flow.source("numbers")
>>> flow.sink("out", flow.grouping("by_parity", numbers, window=3, key=lambda n: n % 2))
>>> runtime = ReferenceRuntime(flow)
>>> for n in range(1, 9):
...     _ = runtime.admit(0, n)
>>> runtime.close()
>>> runtime.run_until_idle()
>>> [r.payload for r in runtime.released()]
[(1,), (2,), (1, 3), (2, 4), (1, 3, 5), (2, 4, 6), (3, 5, 7), (4, 6, 8)]
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from flamestream.errors import FlameStreamError, ScheduleError, StepError
from flamestream.graph import (
    Broadcast,
    Dataflow,
    Filter,
    FlatMap,
    Grouping,
    LogicalGraph,
    Map,
    MapBatches,
    Merge,
    Sink,
    Source,
    Step,
)
from flamestream.graph.steps import STATELESS
from flamestream.model import (
    MAX_FRONT,
    MAX_TS,
    DataItem,
    GlobalTime,
    LocalTime,
    Meta,
    Trace,
    lineage,
)
from flamestream.runtime.acker import Acker, item_id
from flamestream.runtime.barrier import BarrierBuffer
from flamestream.runtime.batches import as_batch_error, one
from flamestream.runtime.grouping import GroupingState
from flamestream.runtime.swaps import Versions, swapped

if TYPE_CHECKING:
    from flamestream.approx.schedule import SketchSchedule

_STATELESS_LOCAL = LocalTime(0, 0)


@dataclass(frozen=True, slots=True, eq=False)
class Envelope:
    """An item in flight towards step ``dest``; ``seq`` is the order it was sent in."""

    seq: int
    dest: str
    item: DataItem


class Scheduler(Protocol):
    """Chooses which ready envelope is delivered next."""

    def pick(self, ready: Sequence[Envelope]) -> int:
        """Return an index into ``ready`` (which is in send order and never empty)."""
        ...


class FifoScheduler:
    """Deliver in the order things were sent."""

    def pick(self, ready: Sequence[Envelope]) -> int:
        """The oldest envelope."""
        return 0


class RandomScheduler:
    """Deliver a uniformly random ready envelope: any item may be overtaken, any number of times.

    Seeded, so a run is reproducible.
    """

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)  # noqa: S311 - a reproducible schedule, not a secret

    def pick(self, ready: Sequence[Envelope]) -> int:
        """A random envelope."""
        return self._rng.randrange(len(ready))


@dataclass(frozen=True, slots=True)
class FrontPosition:
    """The default replay determinant: which front admitted the item, as its how-many-th."""

    front: int
    offset: int

    def __str__(self) -> str:
        return f"front {self.front} record #{self.offset}"


@dataclass(frozen=True, slots=True)
class Released:
    """An item a barrier sink released, as the sink releases it.

    ``trace`` is the released trace: the item's :func:`~flamestream.model.lineage`, a function
    of the input alone, as every released column is. ``meta`` is the item's meta as the
    barrier held it, for checks of the runtime's own rules: its trace's logical times count
    what the groupings did, replays included, so they depend on the order items arrived in.
    """

    sink: str
    global_time: GlobalTime
    payload: Any
    trace: Trace
    meta: Meta


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery, as recorded when the runtime runs with ``record=True``."""

    step: str
    item: DataItem
    outputs: tuple[tuple[str, DataItem], ...]


@dataclass
class RuntimeStats:
    """What a run did, summed over its steps."""

    admitted: int = 0
    delivered: int = 0
    released: int = 0
    replayed: int = 0
    invalidated: int = 0
    stale: int = 0
    tombstones: int = 0
    state_entries: int = 0


@dataclass
class _Front:
    front_id: int
    source: str
    last_ts: int | None = None
    admitted: int = 0
    closed: bool = False
    recent: deque[GlobalTime] = field(default_factory=deque)


Handler = Callable[[DataItem], list[tuple[str, DataItem]]]


class ReferenceRuntime:
    """Runs a logical graph over scripted fronts, one delivery at a time.

    ``fronts`` binds front ids to source steps: an int ``n`` binds fronts ``0..n-1`` to the
    graph's only source; a mapping binds each front id to the named source.
    """

    def __init__(
        self,
        flow: Dataflow | LogicalGraph,
        *,
        fronts: int | Mapping[int, str] = 1,
        scheduler: Scheduler | None = None,
        record: bool = False,
    ) -> None:
        self.graph = flow.build() if isinstance(flow, Dataflow) else flow
        self._scheduler = scheduler or FifoScheduler()
        self._acker = Acker()
        self._fronts = self._bind_fronts(fronts)
        for front in self._fronts:
            self._acker.register_front(front)
        # a deque: the FIFO scheduler takes the oldest, which a list shifts the rest for (a
        # record fanned out to 100k items of one global time made the run quadratic)
        self._pool: deque[Envelope] = deque()
        self._seq = 0
        self._holds: list[Callable[[Envelope], bool]] = []
        self._groupings: dict[str, GroupingState] = {}
        self._barriers: dict[str, BarrierBuffer] = {}
        self._handlers: dict[str, Handler] = {
            sid: self._handler(step) for sid, step in self.graph.steps.items()
        }
        self._versions: dict[str, Versions] = {}
        self._determinants: dict[GlobalTime, Any] = {}
        self._released: dict[str, list[Released]] = {sink: [] for sink in self.graph.sinks}
        self._min_time = self._acker.min_time
        self._delivered = 0
        self._admitted = 0
        self._tombstones = 0
        self._failed: FlameStreamError | None = None
        self.log: list[Delivery] | None = [] if record else None

    # --- fronts --------------------------------------------------------------------------

    def admit(
        self, front: int, payload: Any, *, ts: int | None = None, determinant: Any = None
    ) -> GlobalTime:
        """Admit ``payload`` at ``front``; return the global time it was stamped with.

        Without ``ts`` the front stamps ``max(last ts + 1, its report)``. An explicit ``ts`` must
        exceed the front's last ts and respect its report. The front's report then moves to
        ``ts + 1``.
        """
        self._check_alive()
        state = self._front(front)
        floor = self._acker.report_of(front)
        assert floor is not None  # an open front always has a report  # noqa: S101
        if ts is None:
            ts = floor if state.last_ts is None else max(state.last_ts + 1, floor)
        elif isinstance(ts, bool) or not isinstance(ts, int):
            msg = f"front {front}: ts must be an int, got {ts!r}"
            raise ScheduleError(msg)
        elif ts < floor or (state.last_ts is not None and ts <= state.last_ts):
            msg = (
                f"front {front}: ts {ts} is not above its last ts {state.last_ts} and its "
                f"report {floor}; a front's ts must strictly increase"
            )
            raise ScheduleError(msg)
        if ts > MAX_TS:
            msg = f"front {front}: ts {ts} exceeds the largest ts {MAX_TS}"
            raise ScheduleError(msg)
        global_time = GlobalTime(ts, front)
        state.last_ts = ts
        state.recent.append(global_time)
        self._determinants[global_time] = (
            determinant if determinant is not None else FrontPosition(front, state.admitted)
        )
        state.admitted += 1
        self._admitted += 1
        item = DataItem(payload, Meta(global_time, ()))
        self._send(self.graph.consumer(state.source), item)
        self._acker.report(front, ts + 1)
        self._advance()
        return global_time

    def report(self, front: int, ts: int) -> None:
        """Front ``front`` promises it will assign no ts below ``ts`` any more."""
        self._check_alive()
        state = self._front(front)
        if state.last_ts is not None and ts <= state.last_ts:
            msg = f"front {front}: report {ts} is not above its last ts"
            raise ScheduleError(msg)
        self._acker.report(front, ts)
        self._advance()

    def close(self, front: int | None = None) -> None:
        """Close one front (or, with no argument, every open one): it admits nothing more."""
        self._check_alive()
        states = [self._front(front)] if front is not None else self._open_states()
        for state in states:
            state.closed = True
            self._acker.close(state.front_id)
        self._advance()

    def open_fronts(self) -> list[int]:
        """Ids of the fronts not closed yet."""
        return [state.front_id for state in self._open_states()]

    def front_report(self, front: int) -> int:
        """The least ts open front ``front`` may still assign."""
        self._front(front)
        report = self._acker.report_of(front)
        assert report is not None  # open fronts have reports  # noqa: S101
        return report

    def _open_states(self) -> list[_Front]:
        return [state for state in self._fronts.values() if not state.closed]

    def swap(
        self, step_id: str, fn: Callable[[Any], Any], at: GlobalTime | None = None
    ) -> GlobalTime:
        """Give step ``step_id`` the function ``fn`` for items of global time ``at`` and above.

        Items below ``at`` keep going through the function in force before (all versions of an
        item have its global time, so they all see the same function). Without ``at``, the
        swap takes effect at :meth:`frontier`: after everything admitted so far, as the Spark
        runtime chooses. Only a map's, flat_map's or filter's function can be swapped
        (:mod:`flamestream.runtime.swaps`); anything else raises :class:`SwapError` and
        changes nothing. A grouping downstream keeps its state. Returns ``at``.
        """
        self._check_alive()
        new = swapped(self.graph, step_id, fn)
        if at is None:
            at = self.frontier()
        elif not isinstance(at, tuple) or len(at) != 2:
            msg = f"swap of step {step_id!r}: at must be a GlobalTime (ts, front), got {at!r}"
            raise ScheduleError(msg)
        at = GlobalTime(*at)
        versions = self._versions.get(step_id) or Versions(self.graph.step(step_id))
        versions = self._versions[step_id] = versions.then(at, new)
        targets = [self.graph.consumer(step_id, p) for p in range(new.outputs)]
        self._handlers[step_id] = versioned_handler(versions, targets, self._call)
        return at

    def sketch(self, schedule: SketchSchedule) -> None:
        """Fold the ``exact_or_approximate`` steps' items lowered as ``schedule`` says.

        An item of a key whose slot the schedule sketched at or below the item's global time
        folds with the lowered fold (``exact_limit=floor``): what a Spark query's budget
        policy recorded (``flamestream.approx.schedule``), to compare with its output.
        """
        from flamestream.graph.approximate import lowered_step

        for sid, step in self.graph.steps.items():
            lowered = lowered_step(step)
            if lowered is not None:
                targets = [self.graph.consumer(sid, p) for p in range(step.outputs)]
                self._handlers[sid] = scheduled_handler(
                    step, lowered, schedule, targets, self._call
                )

    def frontier(self) -> GlobalTime:
        """A global time above everything admitted so far: ``(the largest next ts, 0)``.

        Every front's items so far have ts below its next ts (its last ts + 1, or its report if
        higher), so below the largest one of them. The Spark runtime's swaps take effect at
        the same place (from the offset log's fronts).
        """
        highest = 0
        for front in self._fronts.values():
            if front.last_ts is not None:
                highest = max(highest, front.last_ts + 1)
            report = None if front.closed else self._acker.report_of(front.front_id)
            if report is not None:
                highest = max(highest, report)
        return GlobalTime(highest, 0)

    # --- delivery ------------------------------------------------------------------------

    def hold(self, *, step: str | None = None, front: int | None = None) -> None:
        """Keep back envelopes headed to ``step`` and/or of items from ``front`` until released.

        Held envelopes stay in flight (their acks stay open), so sinks wait for them.
        """
        if step is not None:
            self.graph.step(step)
        if front is not None:
            self._front(front)

        def held(envelope: Envelope) -> bool:
            return (step is None or envelope.dest == step) and (
                front is None or envelope.item.global_time.front == front
            )

        self._holds.append(held)

    def release_holds(self) -> None:
        """Let every held envelope be delivered again."""
        self._holds.clear()

    def step(self) -> bool:
        """Deliver one ready envelope; return False if none was ready."""
        self._check_alive()
        if self._holds:
            ready_at = [i for i, e in enumerate(self._pool) if not any(h(e) for h in self._holds)]
            if not ready_at:
                return False
            index = ready_at[self._scheduler.pick([self._pool[i] for i in ready_at])]
        elif self._pool:
            index = self._scheduler.pick(self._pool)
        else:
            return False
        envelope = self._pool[index]
        del self._pool[index]
        self._deliver(envelope)
        return True

    def run_until_idle(self, max_deliveries: int = 10_000_000) -> None:
        """Deliver until nothing ready is left (held envelopes stay in flight)."""
        for _ in range(max_deliveries):
            if not self.step():
                return
        msg = f"no quiescence after {max_deliveries} deliveries: a cycle may circulate forever"
        raise ScheduleError(msg)

    # --- inspection ----------------------------------------------------------------------

    @property
    def min_time(self) -> GlobalTime:
        """The current min-time (see :mod:`flamestream.runtime.acker`)."""
        return self._min_time

    @property
    def in_flight_count(self) -> int:
        """How many envelopes are in flight (held ones included)."""
        return len(self._pool)

    @property
    def in_flight(self) -> tuple[Envelope, ...]:
        """Envelopes sent and not yet delivered, in send order."""
        return tuple(self._pool)

    def released(self, sink: str | None = None) -> list[Released]:
        """Everything sink ``sink`` (default: the only sink) released so far, in order."""
        return list(self._released[self._sink_id(sink)])

    def grouping(self, step_id: str) -> GroupingState:
        """The state of grouping ``step_id``."""
        if step_id not in self._groupings:
            self.graph.step(step_id)
            msg = f"step {step_id!r} is not a grouping"
            raise FlameStreamError(msg)
        return self._groupings[step_id]

    def barrier(self, sink: str | None = None) -> BarrierBuffer:
        """The buffer of barrier sink ``sink``."""
        return self._barriers[self._sink_id(sink)]

    @property
    def stats(self) -> RuntimeStats:
        """Counters summed over the steps."""
        groupings = self._groupings.values()
        barriers = self._barriers.values()
        return RuntimeStats(
            admitted=self._admitted,
            delivered=self._delivered,
            released=sum(len(r) for r in self._released.values()),
            replayed=sum(g.stats.replayed for g in groupings),
            invalidated=sum(g.stats.invalidated for g in groupings)
            + sum(b.stats.invalidated for b in barriers),
            stale=sum(g.stats.stale for g in groupings) + sum(b.stats.stale for b in barriers),
            tombstones=self._tombstones,
            state_entries=sum(g.entries() for g in groupings),
        )

    # --- internals -----------------------------------------------------------------------

    def _bind_fronts(self, fronts: int | Mapping[int, str]) -> dict[int, _Front]:
        if isinstance(fronts, bool) or not isinstance(fronts, int | Mapping):
            msg = f"fronts must be a count or a mapping front id -> source, got {fronts!r}"
            raise ScheduleError(msg)
        if isinstance(fronts, int):
            if len(self.graph.sources) != 1:
                msg = (
                    f"fronts={fronts} binds to the only source, but the graph has sources "
                    f"{list(self.graph.sources)}; pass a mapping front id -> source"
                )
                raise ScheduleError(msg)
            if fronts < 1:
                msg = f"fronts must be >= 1, got {fronts}"
                raise ScheduleError(msg)
            fronts = dict.fromkeys(range(fronts), self.graph.sources[0])
        bound: dict[int, _Front] = {}
        for front, source in fronts.items():
            if not isinstance(front, int) or not 0 <= front <= MAX_FRONT:
                msg = f"front ids are ints in 0..{MAX_FRONT}, got {front!r}"
                raise ScheduleError(msg)
            if not isinstance(self.graph.step(source), Source):
                msg = f"front {front}: {source!r} is not a source step"
                raise ScheduleError(msg)
            bound[front] = _Front(front, source)
        unfed = set(self.graph.sources) - {f.source for f in bound.values()}
        if unfed:
            msg = f"sources {sorted(unfed)} have no front bound to them"
            raise ScheduleError(msg)
        return bound

    def _front(self, front: int) -> _Front:
        state = self._fronts.get(front)
        if state is None:
            msg = f"front {front}: no such front; fronts are {sorted(self._fronts)}"
            raise ScheduleError(msg)
        if state.closed:
            msg = f"front {front}: already closed"
            raise ScheduleError(msg)
        return state

    def _sink_id(self, sink: str | None) -> str:
        if sink is None:
            if len(self._released) != 1:
                msg = f"several sinks {list(self._released)}: name one"
                raise FlameStreamError(msg)
            return next(iter(self._released))
        if sink not in self._released:
            msg = f"no sink {sink!r}; sinks are {list(self._released)}"
            raise FlameStreamError(msg)
        return sink

    def _check_alive(self) -> None:
        if self._failed is not None:
            msg = "the runtime stopped after an error and cannot go on"
            raise FlameStreamError(msg) from self._failed

    def _send(self, dest: str, item: DataItem) -> None:
        self._acker.ack(item.global_time, item_id(item))
        self._pool.append(Envelope(self._seq, dest, item))
        self._seq += 1
        if item.tombstone:
            self._tombstones += 1

    def _deliver(self, envelope: Envelope) -> None:
        item = envelope.item
        try:
            outputs = self._handlers[envelope.dest](item)
        except StepError as exc:
            error = exc.with_determinant(self._determinants.get(item.global_time))
            self._failed = error
            raise error from exc.cause
        self._delivered += 1
        # Receive and sends are acked together: the slot of a time can only be zero when
        # nothing of it is in flight, and what a delivery sends is never below what it got.
        self._acker.ack(item.global_time, item_id(item))
        for dest, out in outputs:
            self._send(dest, out)
        if self.log is not None:
            self.log.append(Delivery(envelope.dest, item, tuple(outputs)))
        self._advance()

    def _advance(self) -> None:
        """React to a possibly moved min-time: release sinks, collect garbage."""
        min_time = self._acker.min_time
        if min_time == self._min_time:
            return
        self._min_time = min_time
        for sink, barrier in self._barriers.items():
            self._released[sink].extend(
                Released(sink, i.global_time, i.payload, lineage(i.meta.trace), i.meta)
                for i in barrier.release(min_time)
            )
        for grouping in self._groupings.values():
            grouping.collect_garbage(min_time)
        for front in self._fronts.values():
            while front.recent and front.recent[0] < min_time:
                self._determinants.pop(front.recent.popleft(), None)

    def _call(
        self, step: Step, fn: Callable[[Any], Any], item: DataItem, *, as_list: bool = False
    ) -> Any:
        try:
            return list(fn(item.payload)) if as_list else fn(item.payload)
        except Exception as exc:  # a user function failed: name the step and the item
            raise StepError(step.step_id, fn, item.global_time, None, exc) from exc

    def _handler(self, step: Step) -> Handler:
        sid = step.step_id
        if isinstance(step, Source):
            return self._never
        if isinstance(step, Sink):
            barrier = self._barriers[sid] = BarrierBuffer(sid)

            def sink(item: DataItem) -> list[tuple[str, DataItem]]:
                barrier.receive(item)
                return []

            return sink
        targets = [self.graph.consumer(sid, port) for port in range(step.outputs)]
        if isinstance(step, Grouping):
            dest = targets[0]
            state = self._groupings[sid] = GroupingState(sid, step.window, step.key)
            return lambda item: [(dest, out) for out in state.receive(item)]
        if isinstance(step, STATELESS):
            return stateless_handler(step, targets, self._call)
        msg = f"step {sid!r}: no reference implementation for {step.kind}"
        raise FlameStreamError(msg)

    @staticmethod
    def _never(item: DataItem) -> list[tuple[str, DataItem]]:
        msg = "a source step receives nothing"
        raise FlameStreamError(msg)


def stateless_handler(
    step: Step,
    targets: Sequence[str],
    call: Callable[..., Any],
) -> Handler:
    """What a stateless step does with one item: the model's rules, written once.

    ``targets`` are the consumers of the step's output ports; ``call(step, fn, item,
    as_list=...)`` runs a user function (and turns its exceptions into ``StepError``). Used by
    the reference runtime and by the Spark runtime's keyed stages.
    """
    if isinstance(step, Broadcast):

        def broadcast(item: DataItem) -> list[tuple[str, DataItem]]:
            if item.tombstone:
                return [(t, item.as_tombstone(LocalTime(0, p))) for p, t in enumerate(targets)]
            return [(t, item.derive(item.payload, LocalTime(0, p))) for p, t in enumerate(targets)]

        return broadcast
    dest = targets[0]
    if isinstance(step, Merge):
        return lambda item: [(dest, _pass(item, item.payload))]
    if isinstance(step, Map):
        fn = step.fn

        def map_(item: DataItem) -> list[tuple[str, DataItem]]:
            if item.tombstone:
                return [(dest, _pass(item, None))]
            return [(dest, _pass(item, call(step, fn, item)))]

        return map_
    if isinstance(step, MapBatches):
        return _map_batches_handler(step, dest, call)
    if isinstance(step, Filter):
        predicate = step.predicate

        def filter_(item: DataItem) -> list[tuple[str, DataItem]]:
            if item.tombstone or call(step, predicate, item):
                return [(dest, _pass(item, item.payload))]
            if item.may_invalidate and not step.version_stable:
                # dropped, but what it would have invalidated must still be dropped
                return [(dest, item.as_tombstone(_STATELESS_LOCAL))]
            return []

        return filter_
    if isinstance(step, FlatMap):
        flat = step.fn

        def flat_map(item: DataItem) -> list[tuple[str, DataItem]]:
            if item.tombstone:
                return [(dest, _pass(item, None))]
            payloads = call(step, flat, item, as_list=True)
            if not payloads and item.may_invalidate:
                return [(dest, item.as_tombstone(_STATELESS_LOCAL))]
            return [(dest, item.derive(p, LocalTime(0, i))) for i, p in enumerate(payloads)]

        return flat_map
    msg = f"step {step.step_id!r}: {step.kind} is not a stateless step"
    raise FlameStreamError(msg)


def _map_batches_handler(step: MapBatches, dest: str, call: Callable[..., Any]) -> Handler:
    """A map_batches step, item by item: each payload a batch of one.

    The contract makes that the same as any batching (:mod:`flamestream.runtime.batches`).
    """
    single = one(step, step.fn)

    def map_batches(item: DataItem) -> list[tuple[str, DataItem]]:
        if item.tombstone:
            return [(dest, _pass(item, None))]
        try:
            result = call(step, single, item)
        except StepError as exc:
            raise as_batch_error(step, exc) from exc.cause
        return [(dest, _pass(item, result))]

    return map_batches


def versioned_handler(
    versions: Versions, targets: Sequence[str], call: Callable[..., Any]
) -> Handler:
    """A swapped stateless step: each item handled by the version its global time picks."""
    handlers = [stateless_handler(step, targets, call) for step in versions.all()]

    def versioned(item: DataItem) -> list[tuple[str, DataItem]]:
        return handlers[versions.index_at(item.global_time)](item)

    return versioned


def scheduled_handler(
    step: Step,
    lowered: Step,
    schedule: SketchSchedule,
    targets: Sequence[str],
    call: Callable[..., Any],
) -> Handler:
    """An ``exact_or_approximate`` reduce: lowered for the items ``schedule`` says.

    The item's global time and the key of its tuple's mapped item pick (a tombstone passes
    the same either way).
    """
    exact, sketched = (stateless_handler(s, targets, call) for s in (step, lowered))

    def scheduled(item: DataItem) -> list[tuple[str, DataItem]]:
        payload = item.payload
        if item.tombstone or not payload:
            return exact(item)
        key = payload[-1].key
        return (sketched if schedule.lowered(item.global_time, key) else exact)(item)

    return scheduled


def _pass(item: DataItem, payload: Any) -> DataItem:
    """What a one-output stateless step sends on for ``item`` (tombstones stay tombstones)."""
    if item.tombstone:
        return item.as_tombstone(_STATELESS_LOCAL)
    return item.derive(payload, _STATELESS_LOCAL)
