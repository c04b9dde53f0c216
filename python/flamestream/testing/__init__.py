"""Public testing helpers: scripted arrival schedules and in-order runs on the reference runtime.

A :class:`Script` says which front admits what and when, when fronts report or close, and
how many in-flight deliveries happen in between (the scheduler picks which ones), like Beam's
``TestStream``. :func:`run_in_order` is the oracle: every item processed to quiescence in
global-time order.

>>> from flamestream import Dataflow
>>> flow = Dataflow("last_two")
>>> numbers = flow.source("numbers")
>>> flow.sink("out", flow.grouping("pairs", numbers, window=2, key=lambda n: 0))
>>> script = Script().admit(1, "b", ts=5).admit(0, "a", ts=7).admit(1, "c", ts=9)
>>> [r.payload for r in run_script(flow, script, scheduler=RandomScheduler(1)).released()]
[('b',), ('b', 'a'), ('a', 'c')]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flamestream.approx.schedule import SketchSchedule
from flamestream.errors import ScheduleError
from flamestream.graph import Dataflow, LogicalGraph
from flamestream.model import GlobalTime, Trace
from flamestream.runtime import (
    FifoScheduler,
    RandomScheduler,
    ReferenceRuntime,
    Released,
    RuntimeStats,
    Scheduler,
)

__all__ = [
    "Admit",
    "Close",
    "Deliver",
    "FifoScheduler",
    "Hold",
    "RandomScheduler",
    "ReleaseHolds",
    "Report",
    "RunResult",
    "Script",
    "Swap",
    "run_in_order",
    "run_script",
]


@dataclass(frozen=True, slots=True)
class Admit:
    """Front ``front`` admits ``payload`` (stamped with ``ts``, or by the front's clock)."""

    front: int
    payload: Any
    ts: int | None = None


@dataclass(frozen=True, slots=True)
class Report:
    """Front ``front`` reports it will assign no ts below ``ts``."""

    front: int
    ts: int


@dataclass(frozen=True, slots=True)
class Close:
    """Front ``front`` (or every front) closes."""

    front: int | None = None


@dataclass(frozen=True, slots=True)
class Deliver:
    """Deliver ``count`` ready envelopes (or all, until idle), in the scheduler's order."""

    count: int | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    """Hold back envelopes headed to ``step`` and/or from ``front`` (a delay)."""

    step: str | None = None
    front: int | None = None


@dataclass(frozen=True, slots=True)
class ReleaseHolds:
    """Release every hold."""


@dataclass(frozen=True, slots=True)
class Swap:
    """Step ``step`` gets function ``fn`` from global time ``at`` on.

    Without ``at``: after every item admitted so far (see :meth:`ReferenceRuntime.swap`).
    """

    step: str
    fn: Callable[[Any], Any]
    at: GlobalTime | None = None


Action = Admit | Report | Close | Deliver | Hold | ReleaseHolds | Swap

#: Deliveries after which ``Deliver()`` (until idle) gives up on reaching quiescence.
MAX_DELIVERIES = 10_000_000


@dataclass
class Script:
    """A scripted arrival schedule, built fluently."""

    actions: list[Action] = field(default_factory=list)

    def admit(self, front: int, payload: Any, ts: int | None = None) -> Script:
        """Append an admission."""
        self.actions.append(Admit(front, payload, ts))
        return self

    def report(self, front: int, ts: int) -> Script:
        """Append a front report."""
        self.actions.append(Report(front, ts))
        return self

    def close(self, front: int | None = None) -> Script:
        """Append a close."""
        self.actions.append(Close(front))
        return self

    def deliver(self, count: int | None = None) -> Script:
        """Append deliveries."""
        self.actions.append(Deliver(count))
        return self

    def hold(self, *, step: str | None = None, front: int | None = None) -> Script:
        """Append a hold."""
        self.actions.append(Hold(step, front))
        return self

    def swap(self, step: str, fn: Callable[[Any], Any], at: GlobalTime | None = None) -> Script:
        """Append a function swap."""
        self.actions.append(Swap(step, fn, at))
        return self

    def release_holds(self) -> Script:
        """Append a release of all holds."""
        self.actions.append(ReleaseHolds())
        return self

    def fronts(self) -> list[int]:
        """The front ids the script mentions."""
        ids = {a.front for a in self.actions if isinstance(a, Admit | Report | Close | Hold)}
        return sorted(i for i in ids if i is not None) or [0]


@dataclass
class RunResult:
    """The outcome of a run: what each sink released, and the runtime for inspection."""

    runtime: ReferenceRuntime

    def released(self, sink: str | None = None) -> list[Released]:
        """The released items of ``sink`` (default: the only sink), in release order."""
        return self.runtime.released(sink)

    def payloads(self, sink: str | None = None) -> list[Any]:
        """Just the released payloads."""
        return [r.payload for r in self.released(sink)]

    def timed(self, sink: str | None = None) -> list[tuple[GlobalTime, Any]]:
        """``(global time, payload)`` pairs, in release order."""
        return [(r.global_time, r.payload) for r in self.released(sink)]

    def rows(self, sink: str | None = None) -> list[tuple[GlobalTime, Trace, Any]]:
        """``(global time, released trace, payload)``: what the determinism contract is about.

        Every column a sink releases but the determinant, in release order: equal for every
        arrival order of the same input (the trace is the released one, a
        :func:`~flamestream.model.lineage`).
        """
        return [(r.global_time, r.trace, r.payload) for r in self.released(sink)]

    @property
    def stats(self) -> RuntimeStats:
        """The run's counters."""
        return self.runtime.stats


def _bind_all(flow: Dataflow | LogicalGraph, fronts: Iterable[int]) -> dict[int, str]:
    graph = flow.build() if isinstance(flow, Dataflow) else flow
    if len(graph.sources) != 1:
        msg = f"the graph has sources {list(graph.sources)}: pass fronts={{front id: source}}"
        raise ScheduleError(msg)
    return dict.fromkeys(fronts, graph.sources[0])


def run_script(
    flow: Dataflow | LogicalGraph,
    script: Script | Iterable[Action],
    *,
    fronts: Mapping[int, str] | None = None,
    scheduler: Scheduler | None = None,
    record: bool = False,
    finish: bool = True,
    on_event: Callable[[ReferenceRuntime], None] | None = None,
) -> RunResult:
    """Run ``script`` on the reference runtime.

    ``fronts`` binds front ids to sources; by default every front the script mentions feeds
    the graph's only source. With ``finish`` (the default) the run ends by closing every open
    front, releasing holds and delivering until idle, so everything admitted is released.
    ``on_event(runtime)``, if given, is called after every admission, report, close and single
    delivery: the place for invariant checks while the run goes on.
    """
    script = script if isinstance(script, Script) else Script(list(script))
    runtime = ReferenceRuntime(
        flow,
        fronts=fronts if fronts is not None else _bind_all(flow, script.fronts()),
        scheduler=scheduler,
        record=record,
    )
    observe = on_event or _ignore
    for action in script.actions:
        _apply(runtime, action, observe)
    if finish:
        runtime.close()
        observe(runtime)
        runtime.release_holds()
        _apply(runtime, Deliver(), observe)
    return RunResult(runtime)


def _ignore(runtime: ReferenceRuntime) -> None:
    """The default ``on_event``: observe nothing."""


def _apply(
    runtime: ReferenceRuntime, action: Action, observe: Callable[[ReferenceRuntime], None]
) -> None:
    if isinstance(action, Deliver):
        limit = action.count if action.count is not None else MAX_DELIVERIES
        delivered = 0
        while delivered < limit and runtime.step():
            delivered += 1
            observe(runtime)
        if action.count is None and delivered == limit:
            msg = f"no quiescence after {limit} deliveries: a cycle may circulate forever"
            raise ScheduleError(msg)
        return
    if isinstance(action, Admit):
        runtime.admit(action.front, action.payload, ts=action.ts)
    elif isinstance(action, Report):
        runtime.report(action.front, action.ts)
    elif isinstance(action, Close):
        runtime.close(action.front)
    elif isinstance(action, Hold):
        runtime.hold(step=action.step, front=action.front)
    elif isinstance(action, ReleaseHolds):
        runtime.release_holds()
    elif isinstance(action, Swap):
        runtime.swap(action.step, action.fn, action.at)
    else:
        msg = f"not a script action: {action!r}"
        raise ScheduleError(msg)
    observe(runtime)


def run_in_order(
    flow: Dataflow | LogicalGraph,
    inputs: Sequence[Any] | Mapping[int, Sequence[tuple[int, Any]]],
    *,
    fronts: Mapping[int, str] | None = None,
    record: bool = False,
    swaps: Sequence[tuple[str, Callable[[Any], Any], GlobalTime]] = (),
    sketch: SketchSchedule | None = None,
) -> RunResult:
    """The in-order oracle: admit every item in global-time order, each run to quiescence.

    ``inputs`` is either a list of payloads (one front, ts 0, 1, 2 …) or a mapping
    ``front id -> [(ts, payload), …]`` with strictly increasing ts per front. After every item
    each front reports its next ts (or closes when it has no more), so sinks release as they
    would in a live run. ``swaps``: ``(step, fn, at)`` function swaps, in force from the start
    (each for the items at or above its ``at``, see :meth:`ReferenceRuntime.swap`), e.g. the
    swaps a Spark query recorded, to compare with its output. ``sketch``: the slots a Spark
    query's budget policy sketched and from when (``SketchSchedule``, read from its offset
    log with ``flamestream.spark.control.approx.recorded_schedule``): its
    ``exact_or_approximate`` steps fold those keys' items lowered, as the query did.
    """
    per_front: dict[int, deque[tuple[int, Any]]] = (
        {int(f): deque(items) for f, items in inputs.items()}
        if isinstance(inputs, Mapping)
        else {0: deque(enumerate(inputs))}
    )
    runtime = ReferenceRuntime(
        flow,
        fronts=fronts if fronts is not None else _bind_all(flow, sorted(per_front)),
        record=record,
    )
    for step, fn, at in swaps:
        runtime.swap(step, fn, at)
    if sketch is not None:
        runtime.sketch(sketch)
    while any(per_front.values()):
        _, front = min((queue[0][0], f) for f, queue in per_front.items() if queue)
        ts, payload = per_front[front].popleft()
        runtime.admit(front, payload, ts=ts)
        runtime.run_until_idle()
        for other in runtime.open_fronts():
            queue = per_front.get(other)
            if not queue:
                runtime.close(other)
            elif queue[0][0] > runtime.front_report(other):
                runtime.report(other, queue[0][0])
    runtime.close()
    runtime.run_until_idle()
    return RunResult(runtime)
