"""The validated logical graph: steps plus edges, cycles allowed, malformations rejected."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from flamestream.errors import GraphError
from flamestream.graph.steps import (
    BATCH_FORMATS,
    Broadcast,
    Grouping,
    MapBatches,
    Sink,
    Source,
    Step,
)


@dataclass(frozen=True, slots=True)
class Edge:
    """Output port ``port`` of step ``src`` feeds step ``dst``."""

    src: str
    port: int
    dst: str


def check_step_id(step_id: object, *, allow_dots: bool = False) -> str:
    """Check that ``step_id`` is a usable step id and return it.

    Dots are reserved: composite helpers such as ``map_reduce`` name their inner steps
    ``outer.inner``, so a user id with a dot could collide with one of those.
    """
    if not isinstance(step_id, str) or not step_id:
        raise GraphError(
            None, "a non-empty string step id", repr(step_id), "every step needs a unique name"
        )
    if "." in step_id and not allow_dots:
        raise GraphError(
            step_id,
            "a step id without dots",
            repr(step_id),
            "dots separate the parts of composite steps; use '_' or '-' instead",
        )
    return step_id


def check_parameters(step: Step) -> None:
    """Check a step's own parameters (window, copies, functions), before it is wired."""
    sid = step.step_id
    if isinstance(step, Grouping) and (
        isinstance(step.window, bool) or not isinstance(step.window, int) or step.window < 1
    ):
        raise GraphError(sid, "a window >= 1", repr(step.window), "the window is a count")
    if isinstance(step, Broadcast) and (
        isinstance(step.n, bool) or not isinstance(step.n, int) or step.n < 2
    ):
        raise GraphError(sid, "n >= 2 copies", repr(step.n), "for one copy use the stream itself")
    if isinstance(step, MapBatches):
        _check_batch_format(step)
    for attr in ("fn", "predicate", "key"):
        fn = getattr(step, attr, callable)
        if not callable(fn):
            raise GraphError(
                sid,
                f"a callable {attr}",
                f"{type(fn).__name__} {fn!r}",
                f"pass a function for the {step.kind}'s {attr}",
            )


def _check_batch_format(step: MapBatches) -> None:
    """A map_batches' ``format`` is one of :data:`BATCH_FORMATS`; ``input_type`` an Arrow type."""
    sid = step.step_id
    if step.format not in BATCH_FORMATS:
        raise GraphError(
            sid,
            f"format one of {', '.join(map(repr, BATCH_FORMATS))}",
            repr(step.format),
            "the format says what the function gets: an Arrow array, a pandas Series or a list",
        )
    if step.input_type is None:
        return
    if step.format == "list":
        raise GraphError(
            sid,
            "no input_type with format='list'",
            f"input_type={step.input_type!r}",
            "a list holds the payloads as they are; use format='arrow' to convert them",
        )
    import pyarrow as pa  # the graph imports Arrow only when a step names an Arrow type

    if not isinstance(step.input_type, pa.DataType):
        raise GraphError(
            sid,
            "input_type a pyarrow.DataType",
            f"{type(step.input_type).__name__} {step.input_type!r}",
            "e.g. input_type=pyarrow.string()",
        )


class LogicalGraph:
    """A complete, validated logical graph. Immutable once built.

    Construct it from steps and edges (or with :class:`flamestream.Dataflow`); the constructor
    rejects duplicate or empty step ids, bad step parameters (a window < 1, a broadcast to
    fewer than 2, a function that is not callable), dangling edges, wrong input or output
    counts, steps that no source reaches, and cycles that have no grouping on them. Dotted ids
    are allowed here because composite helpers name their inner steps ``outer.inner``; the
    :class:`~flamestream.Dataflow` rejects them in user step ids.
    """

    def __init__(self, steps: Iterable[Step], edges: Iterable[Edge], *, name: str = "flow") -> None:
        self.name = name
        self._steps: dict[str, Step] = {}
        for step in steps:
            check_step_id(step.step_id, allow_dots=True)
            if step.step_id in self._steps:
                raise GraphError(
                    step.step_id, "a unique step id", "it used twice", "rename one of the steps"
                )
            check_parameters(step)
            self._steps[step.step_id] = step
        self._edges = tuple(edges)
        self._inputs: dict[str, list[Edge]] = {sid: [] for sid in self._steps}
        self._outputs: dict[str, dict[int, Edge]] = {sid: {} for sid in self._steps}
        for edge in self._edges:
            self._add_edge(edge)
        for step in self._steps.values():
            self._check_step(step)
        self._check_whole()

    # --- queries -------------------------------------------------------------------------

    @property
    def steps(self) -> Mapping[str, Step]:
        """Steps by id, in the order they were added."""
        return self._steps

    @property
    def edges(self) -> tuple[Edge, ...]:
        """All edges."""
        return self._edges

    def step(self, step_id: str) -> Step:
        """The step with this id."""
        try:
            return self._steps[step_id]
        except KeyError:
            raise GraphError(
                step_id, "a step of this graph", "no such step", f"steps: {sorted(self._steps)}"
            ) from None

    def consumer(self, step_id: str, port: int = 0) -> str:
        """The step fed by output ``port`` of ``step_id``."""
        outputs = self._outputs[self.step(step_id).step_id]
        if port not in outputs:
            raise GraphError(step_id, f"output ports {sorted(outputs)}", f"port {port!r}", "")
        return outputs[port].dst

    def producers(self, step_id: str) -> tuple[str, ...]:
        """The steps feeding ``step_id`` (repeated if one feeds it twice)."""
        return tuple(edge.src for edge in self._inputs[self.step(step_id).step_id])

    @property
    def sources(self) -> tuple[str, ...]:
        """Ids of the source steps."""
        return tuple(sid for sid, step in self._steps.items() if isinstance(step, Source))

    @property
    def sinks(self) -> tuple[str, ...]:
        """Ids of the sink steps."""
        return tuple(sid for sid, step in self._steps.items() if isinstance(step, Sink))

    def groupings(self) -> tuple[Grouping, ...]:
        """The grouping steps."""
        return tuple(step for step in self._steps.values() if isinstance(step, Grouping))

    def describe(self) -> str:
        """A readable listing of the graph, one step per line with where its output goes."""
        lines = [f"graph {self.name!r}:"]
        for sid, step in self._steps.items():
            detail = ""
            if isinstance(step, Grouping):
                detail = f" window={step.window}"
            elif isinstance(step, Broadcast):
                detail = f" n={step.n}"
            elif isinstance(step, MapBatches):
                detail = f" format={step.format}"
                detail += f" input_type={step.input_type}" if step.input_type is not None else ""
            targets = ", ".join(self._outputs[sid][p].dst for p in sorted(self._outputs[sid]))
            arrow = f" -> {targets}" if targets else ""
            lines.append(f"  {step.kind:<9} {sid}{detail}{arrow}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"LogicalGraph({self.name!r}, {len(self._steps)} steps, {len(self._edges)} edges)"

    # --- validation ----------------------------------------------------------------------

    def _add_edge(self, edge: Edge) -> None:
        for end in (edge.src, edge.dst):
            if end not in self._steps:
                raise GraphError(
                    end,
                    "a step of this graph at both ends of every edge",
                    f"a dangling edge {edge.src}[{edge.port}] -> {edge.dst}",
                    "add the step, or connect streams of one Dataflow only",
                )
        src = self._steps[edge.src]
        if not 0 <= edge.port < src.outputs:
            raise GraphError(
                edge.src,
                f"output ports 0..{src.outputs - 1}" if src.outputs else "no outputs (a sink)",
                f"an edge from port {edge.port} to {edge.dst!r}",
                "a sink feeds nothing"
                if isinstance(src, Sink)
                else "only broadcast has several outputs",
            )
        taken = self._outputs[edge.src].get(edge.port)
        if taken is not None:
            raise GraphError(
                edge.src,
                "each output to feed exactly one step",
                f"output {edge.port} feeding both {taken.dst!r} and {edge.dst!r}",
                "use broadcast(...) to send one stream to several steps",
            )
        self._outputs[edge.src][edge.port] = edge
        self._inputs[edge.dst].append(edge)

    def _check_step(self, step: Step) -> None:
        sid = step.step_id
        n_in = len(self._inputs[sid])
        if step.inputs is None and n_in == 0:
            raise GraphError(sid, "one or more inputs", "none", "merge needs at least one input")
        if step.inputs is not None and n_in != step.inputs:
            hint = "a sink needs an input stream" if isinstance(step, Sink) else ""
            if step.inputs > 1 or n_in > 1:
                hint = "only merge takes several inputs"
            if isinstance(step, Source):
                hint = "a source is fed by fronts, not by steps"
            raise GraphError(sid, f"{step.inputs} input(s)", f"{n_in}", hint)
        missing = [p for p in range(step.outputs) if p not in self._outputs[sid]]
        if missing:
            raise GraphError(
                sid,
                "every output to feed a step",
                f"output(s) {missing} feeding nothing",
                "connect it to a sink or another step, or remove the step",
            )

    def _check_whole(self) -> None:
        if not self.sources:
            raise GraphError(None, "at least one source", "none", "add flow.source(...)")
        if not self.sinks:
            raise GraphError(None, "at least one sink", "none", "add flow.sink(...)")
        reached: set[str] = set()
        todo = list(self.sources)
        while todo:
            sid = todo.pop()
            if sid not in reached:
                reached.add(sid)
                todo.extend(edge.dst for edge in self._outputs[sid].values())
        for sid in self._steps:
            if sid not in reached:
                raise GraphError(
                    sid,
                    "to be reachable from a source",
                    "no path from any source",
                    "connect it downstream of a source, or remove it",
                )
        cycle = self._cycle_without_grouping()
        if cycle:
            path = " -> ".join([*cycle, cycle[0]])
            raise GraphError(
                cycle[0],
                "a grouping on every cycle",
                f"the cycle {path}",
                "items would circulate forever; put a grouping (and a filter) on the cycle",
            )

    def _cycle_without_grouping(self) -> list[str]:
        """A cycle through non-grouping steps only, as a list of step ids, or []."""
        white, grey, black = 0, 1, 2
        color = dict.fromkeys(self._steps, white)
        stack: list[str] = []

        def visit(sid: str) -> list[str]:
            color[sid] = grey
            stack.append(sid)
            for edge in self._outputs[sid].values():
                nxt = edge.dst
                if isinstance(self._steps[nxt], Grouping):
                    continue
                if color[nxt] == grey:
                    return stack[stack.index(nxt) :]
                if color[nxt] == white:
                    found = visit(nxt)
                    if found:
                        return found
            stack.pop()
            color[sid] = black
            return []

        for sid, step in self._steps.items():
            if color[sid] == white and not isinstance(step, Grouping):
                found = visit(sid)
                if found:
                    return found
        return []
