"""The fluent builder users write graphs with. Pure and inert: nothing here runs user code.

>>> flow = Dataflow("evens")
>>> numbers = flow.source("numbers")
>>> evens = flow.filter("evens", numbers, lambda n: n % 2 == 0)
>>> flow.sink("out", evens)
>>> print(flow.build().describe())
graph 'evens':
  source    numbers -> evens
  filter    evens -> out
  sink      out
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from flamestream.errors import GraphError
from flamestream.graph.logical import Edge, LogicalGraph, check_parameters, check_step_id
from flamestream.graph.steps import (
    Broadcast,
    Filter,
    FlatMap,
    Grouping,
    Map,
    MapBatches,
    Merge,
    Sink,
    Source,
    Step,
)


@dataclass(frozen=True, slots=True)
class Stream:
    """A handle on one output of a step; pass it to the next operation."""

    flow_id: int
    step_id: str
    port: int = 0


class Dataflow:
    """Builds a logical graph step by step. Every operation takes a unique ``step_id`` first.

    Cycles are closed with :meth:`add_merge_input`, since merge is the only op with several
    inputs. :meth:`build` validates the whole graph and returns a :class:`LogicalGraph`.
    """

    def __init__(self, name: str = "flow") -> None:
        self.name = name
        self._steps: dict[str, Step] = {}
        self._edges: list[Edge] = []
        self._consumed: dict[tuple[str, int], str] = {}

    # --- the core operations -------------------------------------------------------------

    def source(self, step_id: str) -> Stream:
        """An entry point; fronts are bound to it by the runtime."""
        return self._add(Source(check_step_id(step_id)), ())[0]

    def map(self, step_id: str, up: Stream, fn: Callable[[Any], Any]) -> Stream:
        """Apply ``fn`` to every payload."""
        return self._add(Map(check_step_id(step_id), fn), (up,))[0]

    def map_batches(
        self,
        step_id: str,
        up: Stream,
        fn: Callable[[Any], Any],
        *,
        format: str = "arrow",
        input_type: Any = None,
    ) -> Stream:
        """Apply ``fn`` to batches of payloads at once: a map for vectorized code.

        ``fn`` gets the payloads of a batch (a ``pyarrow.Array`` by default; ``format="pandas"``
        a ``pandas.Series``, ``format="list"`` a list) and returns one result per payload, in
        order (an Arrow array, a list or a Series). It must be element-wise: each result a pure
        function of its own payload, so how items are batched cannot change the output.
        ``input_type`` (a ``pyarrow.DataType``) fixes the Arrow type payloads are converted to;
        without it, each payload's Python type picks it (``str`` -> ``string``, ``int`` ->
        ``int64`` …). See :mod:`flamestream.runtime.batches` for the full contract.

        >>> import pyarrow.compute as pc
        >>> flow = Dataflow("lower")
        >>> lowered = flow.map_batches("lower", flow.source("words"), pc.utf8_lower)
        >>> flow.sink("out", lowered)
        >>> from flamestream.testing import run_in_order
        >>> run_in_order(flow, ["Spark", "FLAME"]).payloads()
        ['spark', 'flame']
        """
        step = MapBatches(check_step_id(step_id), fn, format, input_type)
        return self._add(step, (up,))[0]

    def flat_map(self, step_id: str, up: Stream, fn: Callable[[Any], Iterable[Any]]) -> Stream:
        """Replace every payload by the payloads ``fn`` returns (siblings, same global time)."""
        return self._add(FlatMap(check_step_id(step_id), fn), (up,))[0]

    def filter(
        self,
        step_id: str,
        up: Stream,
        predicate: Callable[[Any], bool],
        *,
        version_stable: bool = False,
    ) -> Stream:
        """Keep the payloads for which ``predicate`` is true.

        See :class:`~flamestream.graph.Filter` for ``version_stable``; leave it off unless the
        predicate provably answers alike for every replayed version of an item.
        """
        step = Filter(check_step_id(step_id), predicate, version_stable)
        return self._add(step, (up,))[0]

    def broadcast(self, step_id: str, up: Stream, n: int) -> tuple[Stream, ...]:
        """Copy every item to ``n`` output streams."""
        return self._add(Broadcast(check_step_id(step_id), n), (up,))

    def merge(self, step_id: str, *ups: Stream) -> Stream:
        """Union the given streams; add more inputs later with :meth:`add_merge_input`."""
        return self._add(Merge(check_step_id(step_id)), ups)[0]

    def add_merge_input(self, merge: Stream, up: Stream) -> None:
        """Feed ``up`` into an existing merge; this is how a cycle is closed."""
        self._check_stream(getattr(merge, "step_id", None), merge, "a merge stream of this flow")
        target = self._steps[merge.step_id]
        if not isinstance(target, Merge):
            raise GraphError(
                merge.step_id,
                "a merge step to add an input to",
                f"a {target.kind} step",
                "only merge takes several inputs",
            )
        self._check_stream(merge.step_id, up, "a stream of this flow")
        self._check_free(merge.step_id, [up])
        self._connect(up, merge.step_id)

    def grouping(
        self, step_id: str, up: Stream, *, window: int, key: Callable[[Any], Hashable]
    ) -> Stream:
        """For each item, the tuple of the last ``window`` items with its key, up to it."""
        return self._add(Grouping(check_step_id(step_id), window, key), (up,))[0]

    def sink(self, step_id: str, up: Stream) -> None:
        """Release ``up`` through a barrier sink named ``step_id``."""
        self._add(Sink(check_step_id(step_id)), (up,))

    # --- building ------------------------------------------------------------------------

    def build(self) -> LogicalGraph:
        """Validate the whole graph and return it."""
        return LogicalGraph(self._steps.values(), self._edges, name=self.name)

    def add_step(self, step: Step, *ups: Stream) -> tuple[Stream, ...]:
        """Add a prepared step (composite helpers use this for their ``outer.inner`` steps)."""
        check_step_id(step.step_id, allow_dots=True)
        return self._add(step, ups)

    def _add(self, step: Step, ups: tuple[Stream, ...]) -> tuple[Stream, ...]:
        # Check everything before changing anything: a failed call leaves the flow as it was.
        if step.step_id in self._steps:
            raise GraphError(
                step.step_id, "a unique step id", "it used twice", "rename one of the steps"
            )
        check_parameters(step)
        for up in ups:
            self._check_stream(step.step_id, up, "a stream of this flow")
        self._check_free(step.step_id, ups)
        self._steps[step.step_id] = step
        for up in ups:
            self._connect(up, step.step_id)
        return tuple(Stream(id(self), step.step_id, port) for port in range(step.outputs))

    def _check_stream(self, step_id: object, up: object, expected: str) -> None:
        where = step_id if isinstance(step_id, str) else None
        if not isinstance(up, Stream):
            raise GraphError(
                where, f"{expected} as input", f"{type(up).__name__} {up!r}", "pass a Stream"
            )
        if up.flow_id != id(self) or up.step_id not in self._steps:
            raise GraphError(
                where,
                f"{expected} as input",
                f"stream {up.step_id!r} of another Dataflow",
                "build each graph from one Dataflow object",
            )

    def _check_free(self, step_id: str, ups: Iterable[Stream]) -> None:
        """Each output feeds exactly one step: reject outputs already (or twice) consumed."""
        seen: set[tuple[str, int]] = set()
        for up in ups:
            port = (up.step_id, up.port)
            taken = self._consumed.get(port) or (step_id if port in seen else None)
            if taken is not None:
                raise GraphError(
                    step_id,
                    "an input stream no other step consumes",
                    f"{up.step_id!r}, which already feeds {taken!r}",
                    "use broadcast(...) to send one stream to several steps",
                )
            seen.add(port)

    def _connect(self, up: Stream, dst: str) -> None:
        self._consumed[(up.step_id, up.port)] = dst
        self._edges.append(Edge(up.step_id, up.port, dst))
