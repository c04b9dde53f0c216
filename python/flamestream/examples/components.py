"""Connected components over a stream of edges: a cycle whose items change key.

Each input line is an edge ``"u v"``. Every node keeps, as an item going round the cycle,
its state: its component's label (the least node id it has heard of) and its neighbours. An
edge tells both ends about each other; a node whose label drops tells all its neighbours,
and a node that gains a neighbour tells it its label. Those hints go to *other* nodes: the
cycle hands items from key to key (on Spark, through the loop channel when the other node's
state lives in another partition). Every state update is released, so the last released
label of a node is its component, at every point of the stream.

>>> from flamestream.testing import run_in_order
>>> result = run_in_order(components(), {0: [(1, "1 2"), (2, "3 4"), (3, "2 3"), (4, "5 5")]})
>>> labels(result.payloads())
{1: 1, 2: 1, 3: 1, 4: 1, 5: 5}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter

from flamestream.graph.dataflow import Dataflow


@dataclass(frozen=True)
class Hint:
    """To ``node``: a component label it may take, and a neighbour it may not know yet."""

    node: int
    label: int
    neighbour: int | None = None


@dataclass(frozen=True)
class NodeState:
    """A node's state after an update, and whom the update must be told to."""

    node: int
    label: int
    neighbours: tuple[int, ...]
    notify: tuple[int, ...]


def edge_hints(line: str) -> list[Hint]:
    """``"u v"``: each end learns of the other (and of a label no greater than its id)."""
    u, v = (int(part) for part in line.split())
    return [Hint(u, v, v), Hint(v, u, u)]


def ends_with_hint(window: tuple[object, ...]) -> bool:
    """Only a hint changes a node; a state arriving after a hint is that hint's own result."""
    return isinstance(window[-1], Hint)


def update(window: tuple[object, ...]) -> NodeState:
    """The node's state after the hint that ends ``window`` (the state before it, if any)."""
    hint = window[-1]
    assert isinstance(hint, Hint)  # noqa: S101  (ends_with_hint let only these through)
    before = window[0] if len(window) == 2 and isinstance(window[0], NodeState) else None
    if before is None:
        first: tuple[int, ...] = () if hint.neighbour is None else (hint.neighbour,)
        return NodeState(hint.node, min(hint.node, hint.label), first, first)
    label = min(before.label, hint.label)
    neighbours: tuple[int, ...] = before.neighbours
    notify: tuple[int, ...] = ()
    if hint.neighbour is not None and hint.neighbour not in neighbours:
        neighbours = tuple(sorted((*neighbours, hint.neighbour)))
        notify = (hint.neighbour,)
    if label < before.label:
        notify = neighbours
    return NodeState(hint.node, label, neighbours, notify)


def tell(state: NodeState) -> list[Hint]:
    """Hints to the neighbours the update concerns: this node's label."""
    return [Hint(other, state.label) for other in state.notify if other != state.node]


def components() -> Dataflow:
    """The graph: one grouping by node, a cycle back to it, hints hopping to other nodes.

    edges -> hints -> merge (cycle) -> grouping by node (w=2) -> filter -> update ->
    broadcast: to the sink, back to the merge (the state), and as hints to neighbours.
    """
    flow = Dataflow("components")
    hints = flow.flat_map("edge_hints", flow.source("edges"), edge_hints)
    inbox = flow.merge("inbox", hints)
    windows = flow.grouping("by_node", inbox, window=2, key=attrgetter("node"))
    fresh = flow.filter("hint_last", windows, ends_with_hint, version_stable=True)
    states = flow.map("update", fresh, update)
    out, back, told = flow.broadcast("fan_out", states, 3)
    flow.add_merge_input(inbox, back)
    flow.add_merge_input(inbox, flow.flat_map("tell", told, tell))
    flow.sink("labels", flow.map("show", out, lambda s: f"{s.node}:{s.label}"))
    return flow


def labels(released: Iterable[str]) -> dict[int, int]:
    """The component of every node: the last label released for it."""
    last: dict[int, int] = {}
    for line in released:
        node, label = line.split(":")
        last[int(node)] = int(label)
    return dict(sorted(last.items()))
