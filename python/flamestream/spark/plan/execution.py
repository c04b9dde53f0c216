"""The execution plan: a graph compiled into stages, and what runs where. Needs no Spark.

``plan_execution(graph)`` decides everything that depends on the graph alone: the stages
(:func:`~flamestream.spark.plan.stages.plan_stages`), the loop edges, the key function of
every keyed entry, the map-side pre-combiners of ``release="latest"``, the path each stage
takes (:func:`~flamestream.spark.plan.paths.plan_paths`), the source and the sinks.
``SparkGraph`` wires the plan onto DataFrames; ``describe()`` prints it.

>>> from flamestream import Dataflow
>>> flow = Dataflow("clean")
>>> words = flow.flat_map("split", flow.source("lines"), str.split)
>>> flow.sink("out", flow.map("upper", words, str.upper))
>>> print(plan_execution(flow.build()).describe())
graph clean: 1 stage, fusion on
  source lines -> stage 1
  fronts given as readers: stage 1 runs in their reads
  crossings JVM/Python per item, at most: 4 (apply on loaded fronts), 2 (write_stream)
  stage 1 [fused: split -> upper] (one mapInArrow pass; path general) -> sink out
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flamestream.errors import GraphError
from flamestream.graph.approximate import approximate_fold
from flamestream.graph.logical import LogicalGraph
from flamestream.graph.steps import Merge, Sink, Source
from flamestream.spark.plan.paths import GENERAL_PATH, StagePath, plan_paths
from flamestream.spark.plan.stages import (
    Stage,
    keyed_entries,
    loop_edges,
    plan_stages,
    precombiners,
    reduce_step_of,
)

#: The release modes: every update the model releases, or the latest value per key per batch.
RELEASES = ("every", "latest")


@dataclass(frozen=True)
class ExecutionPlan:
    """A graph's stages and their wiring, decided once per graph (not per DataFrame)."""

    graph: LogicalGraph
    fusion: bool
    release: str  #: "every" or "latest"
    stages: tuple[Stage, ...]  #: producers first
    cut: frozenset[tuple[str, str]]  #: edges whose items go through the loop channel
    keys: Mapping[str, Callable[[Any], Any]]  #: per keyed entry, the key it is shuffled by
    precombine: Mapping[str, Callable[[Any, Any], Any]]  #: per keyed entry, map-side combiner
    source: str
    sinks: tuple[str, ...]
    #: stateless stages that run in the tasks of the keyed stage they read from (index ->
    #: the keyed stage's index): no Spark pass of their own (see :func:`tails_of_keyed`)
    hosts: Mapping[int, int] = field(default_factory=dict)
    #: what a front may run in its own read tasks (:func:`front_work`): None (nothing), 0
    #: (keying the rows for the shuffle) or the index of the stage that reads the source
    in_front: int | None = None
    #: the keyed stage whose work (with its tails) a barrier sink's write tasks can do, when
    #: everything it and its tails send goes to sinks (:func:`sink_work`), or None
    in_sink: int | None = None
    #: key ranges move between partitions (a Router pass before each keyed stage's shuffle)
    elastic: bool = False
    #: steps' functions may be swapped while the query runs (a control channel is unioned in)
    swappable: bool = False
    #: per stage index, the path its runner takes (:mod:`.paths`: the one place that decides)
    paths: Mapping[int, StagePath] = field(default_factory=dict)
    stage_of: Mapping[str, Stage] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_step = {sid: stage for stage in self.stages for sid in stage.steps}
        object.__setattr__(self, "stage_of", by_step)

    def path(self, stage: Stage) -> StagePath:
        """The path ``stage``'s runner takes (the general one for a stage the plan lacks)."""
        return self.paths.get(stage.index, GENERAL_PATH) if stage.steps else GENERAL_PATH

    @property
    def passthrough(self) -> bool:
        """Whether the source feeds a sink directly: no stage, the rows need only rendering.

        Given readers, the fronts render them in their reads (and, for ``write_stream``, send
        them to the sink in blocks); a loaded DataFrame's rows get one render pass
        (:mod:`flamestream.spark.exec.general.passthrough`).
        """
        return isinstance(self.graph.step(self.graph.consumer(self.source)), Sink)

    def tails(self, stage: Stage) -> tuple[Stage, ...]:
        """The stateless stages that run in ``stage``'s tasks, after it, in stage order."""
        return tuple(s for s in self.stages if self.hosts.get(s.index) == stage.index)

    def passes(self, *, front: bool = False, sink: bool = False) -> int:
        """Python passes (``mapInArrow``) over one micro-batch's rows.

        Every stage but the tails, plus the keying of the source rows when a grouping reads
        them directly; ``front=True``: when the fronts run :attr:`in_front` in their reads;
        ``sink=True``: when the sink's write tasks run :attr:`in_sink`.
        """
        if self.passthrough:  # the render: in the fronts' reads, or a pass of its own
            return 0 if front else 1
        keyed_source = self.graph.consumer(self.source) in self.keys
        passes = len(self.stages) - len(self.hosts) + keyed_source
        passes -= front and self.in_front is not None
        return passes - (sink and self.in_sink is not None)

    def crossings(self, *, front: bool = False, sink: bool = False) -> int:
        """How often a record's items cross between the JVM and Python, at most.

        Out of the front's reader, into and out of every pass, into the sink's writer: exact
        for a chain of stages (word count), an upper bound where branches split the passes.
        ``write_stream`` given readers is ``front=True, sink=True``.
        """
        return 2 + 2 * self.passes(front=front, sink=sink)

    @property
    def keyed(self) -> bool:
        """Whether the graph has groupings (keyed stages with state)."""
        return any(stage.grouping for stage in self.stages)

    def key_local(self, stage: Stage) -> bool:
        """Whether items coming round the stage's cycle keep their key (map_reduce's do).

        Other cycles may hand an item to another key, whose state may live in another
        partition: those stages route such items through the loop channel.
        """
        return key_local(self.graph, stage)

    def reentry(self, stage: Stage) -> frozenset[str]:
        """The stage's steps from which an item reaches the grouping through merges only."""
        found = set()
        for sid in stage.steps:
            current = sid
            while isinstance(self.graph.step(current), Merge):
                current = self.graph.consumer(current)
            if current == stage.grouping:
                found.add(sid)
        return frozenset(found)

    def leaving(self, stage: Stage) -> list[tuple[str, str]]:
        """(step, destination) of the edges leaving ``stage``."""
        inside = set(stage.steps)
        return [
            (sid, self.graph.consumer(sid, port))
            for sid in stage.steps
            for port in range(self.graph.step(sid).outputs)
            if self.graph.consumer(sid, port) not in inside
        ]

    def packed_into(self) -> int | None:
        """The keyed stage the fronts' rows may travel to packed (``exec.shuffle.packed``), or None.

        :meth:`blocked_into`'s stage, if it combines nothing before the shuffle (a combined
        stage's rows are distinct items already).
        """
        index = self.blocked_into()
        stage = next((s for s in self.stages if s.index == index), None)
        if stage is None or any(entry in self.precombine for entry in stage.entries):
            return None
        return index

    def blocked_into(self) -> int | None:
        """The keyed stage the fronts' rows may travel to in blocks (``exec.shuffle.blocks``).

        None when they may not.

        When the fronts run :attr:`in_front` in their reads and all that it sends (or, when
        the fronts only key the rows, all the source sends) goes to one keyed stage that
        reads nothing else and keeps its keys round its cycle (no loop channel), and no
        elastic layout routes the rows and no control channel joins them: then no other
        consumer meets the rows.
        """
        if self.in_front is None or self.elastic or self.swappable:
            return None  # the control channel's (empty) rows join the fronts' as items
        front = {sid for s in self.stages if s.index == self.in_front for sid in s.steps}
        senders = {self.source, *front}
        targets = {
            self.graph.consumer(sid, port)
            for sid in senders
            for port in range(self.graph.step(sid).outputs)
        } - front
        keyed = {self.stage_of.get(target) for target in targets}
        if len(keyed) != 1:
            return None
        (stage,) = keyed
        if stage is None or stage.grouping is None or not self.key_local(stage):
            return None
        for entry in stage.entries:
            for producer in self.graph.producers(entry):
                inside = producer in stage.steps
                if (producer, entry) in self.cut or not (inside or producer in senders):
                    return None
        return stage.index

    def where(self, step_id: str) -> str:
        """``stage N`` for a step, ``sink S`` for a sink."""
        stage = self.stage_of.get(step_id)
        return f"stage {stage.index}" if stage else f"sink {step_id}"

    def describe(self) -> str:
        """What runs where: the stages, the steps fused into each, and where items go."""
        mode = "on" if self.fusion else "off"
        count = len(self.stages)
        lines = [f"graph {self.graph.name}: {count} stage{'s' * (count != 1)}, fusion {mode}"]
        lines.append(f"  source {self.source} -> {self.where(self.graph.consumer(self.source))}")
        if self.passthrough:
            lines.append(
                "  path passthrough: fronts given as readers render the rows in their reads "
                "(write_stream: and send them to the sink in blocks); loaded, one render pass"
            )
        if self.in_front:
            lines.append(f"  fronts given as readers: stage {self.in_front} runs in their reads")
        elif self.in_front == 0:
            lines.append("  fronts given as readers: they key the rows for the shuffle")
        packed, blocked = self.packed_into(), self.blocked_into()
        if packed is not None:
            lines.append(f"  their rows travel packed to stage {packed} (one per distinct item)")
        if blocked is not None:
            lines.append(f"  their rows travel to stage {blocked} in blocks, one per key partition")
        if self.in_sink is not None:
            lines.append(f"  write_stream: stage {self.in_sink} runs in the sink's write tasks")
        lines.append(
            f"  crossings JVM/Python per item, at most: {self.crossings()} (apply on loaded "
            f"fronts), {self.crossings(front=True, sink=True)} (write_stream)"
        )
        if self.swappable:
            lines.append(
                "  swappable: a batch with swapped steps runs their stages the general way "
                "(no declared count, cycle or render in Arrow for them)"
            )
        if self.release == "latest":
            combined = ", ".join(sorted(self.precombine)) or "none"
            lines.append(
                f"  release latest: one value per key per batch; map-side pre-combining "
                f"into: {combined}"
            )
        lines.extend(self._describe_approximate())
        lines.extend(self._describe_stage(stage) for stage in self.stages)
        return "\n".join(lines)

    def _describe_approximate(self) -> list[str]:
        """One line per approximate aggregation: its sketch and how approximate it releases."""
        lines = []
        for step_id, step in sorted(self.graph.steps.items()):
            fold = approximate_fold(step)
            if fold is not None:
                name = step_id.removesuffix(".reduce")
                lines.append(f"  approximate {name}: {fold.describe()}")
        return lines

    def _describe_stage(self, stage: Stage) -> str:
        leaving = sorted(
            {
                f"loop channel -> {self.where(dest)}"
                if (sid, dest) in self.cut
                else self.where(dest)
                for sid, dest in self.leaving(stage)
            }
        )
        if stage.grouping and self.key_local(stage):
            kind = f"keyed by {stage.grouping}: "
            how = "shuffled by key, state per partition"
            how += ", its cycle runs in the task" if len(stage.steps) > 1 else ""
        elif stage.grouping:
            kind = f"keyed by {stage.grouping}: "
            how = (
                "shuffled by key, state per partition; items the cycle hands to a key of "
                "another partition go through the loop channel"
            )
        else:
            kind = "fused: " if len(stage.steps) > 1 else ""
            host = self.hosts.get(stage.index)
            how = "one mapInArrow pass" if host is None else f"in stage {host}'s tasks, after it"
        how += f"; {self.path(stage).describe()}"
        return (
            f"  stage {stage.index} [{kind}{' -> '.join(stage.steps)}] ({how}) "
            f"-> {', '.join(leaving)}"
        )


def plan_execution(
    graph: LogicalGraph,
    *,
    fusion: bool = True,
    release: str = "every",
    elastic: bool = False,
    swappable: bool = False,
    default_render: bool = True,
) -> ExecutionPlan:
    """Compile ``graph`` into its execution plan; a ``GraphError`` names what cannot run.

    ``default_render``: sink payloads are rendered by the default render (``render_default``,
    which a ``Template`` tail's Arrow path reproduces), not by a render of the caller's.
    """
    if release not in RELEASES:
        raise GraphError(graph.name, "release 'every' or 'latest'", repr(release), "")
    cut = loop_edges(graph)
    stages = plan_stages(graph, fusion=fusion, cut=cut)
    if release == "latest":
        for stage in stages:
            if stage.grouping and reduce_step_of(graph, stage) is None:
                raise GraphError(
                    stage.grouping,
                    "release='latest' on graphs whose groupings are map_reduce's",
                    "a grouping without a reduce step",
                    "use release='every', or build the aggregation with map_reduce",
                )
    sources = [sid for sid, step in graph.steps.items() if isinstance(step, Source)]
    if len(sources) != 1:
        raise GraphError(
            graph.name,
            "exactly one source (the DataFrame's rows enter there)",
            f"{len(sources)} sources: {', '.join(sources) or 'none'}",
            "merge several fronts into one DataFrame (union) and give the graph one source",
        )
    sinks = tuple(sid for sid, step in graph.steps.items() if isinstance(step, Sink))
    hosts = tails_of_keyed(graph, stages, cut) if fusion else {}
    keys = keyed_entries(graph, stages)
    precombine = precombiners(graph, stages) if release == "latest" else {}
    paths = plan_paths(
        graph,
        stages,
        keys=keys,
        precombine=precombine,
        hosts=hosts,
        default_render=default_render,
        swappable=swappable,
    )
    return ExecutionPlan(
        hosts=hosts,
        paths=paths,
        in_front=front_work(graph, stages, sources[0], cut) if fusion else None,
        in_sink=sink_work(graph, stages, hosts, sinks, cut) if fusion else None,
        graph=graph,
        fusion=fusion,
        release=release,
        stages=tuple(stages),
        cut=cut,
        keys=keys,
        precombine=precombine,
        source=sources[0],
        sinks=sinks,
        elastic=elastic,
        swappable=swappable,
    )


def key_local(graph: LogicalGraph, stage: Stage) -> bool:
    """Whether items coming round ``stage``'s cycle keep their key (map_reduce's do)."""
    cyclic = any(p in stage.steps for sid in stage.steps for p in graph.producers(sid))
    return not cyclic or reduce_step_of(graph, stage) is not None


def tails_of_keyed(
    graph: LogicalGraph, stages: list[Stage], cut: frozenset[tuple[str, str]]
) -> dict[int, int]:
    """Stateless stages whose every input comes from one keyed stage: index -> its index.

    Such a stage reads rows that never leave the keyed stage's task but to reach it, so it
    runs there, right after the keyed stage, on the same Arrow batches: two crossings of the
    Python/JVM boundary less per row (out of the keyed stage's worker, into its own), and one
    consumer less of the keyed stage's output (Spark runs a keyed stage once per consumer of
    its output in a batch). Not for a stage the loop channel feeds (a cut edge's merge).
    """
    stage_of = {sid: stage for stage in stages for sid in stage.steps}
    hosts: dict[int, int] = {}
    for stage in stages:
        if stage.grouping is not None:
            continue
        inputs = [
            (producer, entry)
            for entry in stage.entries
            for producer in graph.producers(entry)
            if producer not in stage.steps
        ]
        host = {stage_of.get(producer) for producer, _ in inputs}
        if len(host) != 1 or any(edge in cut for edge in inputs):
            continue
        (keyed,) = host
        if keyed is not None and keyed.grouping is not None:
            hosts[stage.index] = keyed.index
    return hosts


def front_work(
    graph: LogicalGraph, stages: list[Stage], source: str, cut: frozenset[tuple[str, str]]
) -> int | None:
    """What the fronts can do in their read tasks, before the rows first leave Python.

    0 when the source feeds a grouping directly (the rows' keys for the shuffle); the index
    of the stateless stage that reads the source, when the source is all that stage reads
    (no other stage, no loop channel); None otherwise.
    """
    consumer = graph.consumer(source)
    stage = next((s for s in stages if consumer in s.steps), None)
    if stage is None:  # the source goes straight to a sink
        return None
    if stage.grouping is not None:
        return 0 if consumer in stage.entries else None
    for entry in stage.entries:
        for producer in graph.producers(entry):
            if producer in stage.steps:
                continue
            if producer != source or (producer, entry) in cut:
                return None
    return stage.index


def sink_work(
    graph: LogicalGraph,
    stages: list[Stage],
    hosts: Mapping[int, int],
    sinks: tuple[str, ...],
    cut: frozenset[tuple[str, str]],
) -> int | None:
    """The keyed stage a barrier sink's write tasks can run, or None.

    The last keyed stage, when it and its tails send everything to sinks and every sink gets
    everything from them: then the shuffled rows can go straight to the sink's writer, which
    runs the stage (and the tails) on them in its own task, as the stage's ``mapInArrow``
    would have in the same task. Not with loop edges (their writers need the stage's output
    as a DataFrame) nor for a cycle that hands items to other keys.
    """
    keyed = [stage for stage in stages if stage.grouping is not None]
    if cut or not keyed:
        return None
    last = keyed[-1]
    inside = set(last.steps).union(*(s.steps for s in stages if hosts.get(s.index) == last.index))
    for sid in inside:
        step = graph.step(sid)
        outside = {graph.consumer(sid, port) for port in range(step.outputs)} - inside
        if not outside <= set(sinks):
            return None
    if any(p not in inside for sink in sinks for p in graph.producers(sink)):
        return None
    return last.index if key_local(graph, last) else None  # else items change key: loop
