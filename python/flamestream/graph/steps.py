"""Inert definitions of the core operations. They hold user functions but never run them."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Step:
    """A node of the logical graph. ``step_id`` is unique in its graph and names its state."""

    step_id: str

    #: How many input edges the step takes: an exact number, or None for "one or more".
    inputs: ClassVar[int | None] = 1

    @property
    def outputs(self) -> int:
        """How many output ports the step has; each feeds exactly one consumer."""
        return 1

    @property
    def kind(self) -> str:
        """The operation's name as users write it (``map``, ``grouping`` …)."""
        return _KIND_NAMES[type(self)]


@dataclass(frozen=True)
class Source(Step):
    """Where the items of one or more fronts enter the graph."""

    inputs: ClassVar[int | None] = 0


@dataclass(frozen=True)
class Map(Step):
    """One output per input: ``fn(payload)``; global time unchanged."""

    fn: Callable[[Any], Any]


#: What a :class:`MapBatches` function receives: an Arrow array, a pandas Series, or a list.
BATCH_FORMATS = ("arrow", "pandas", "list")


@dataclass(frozen=True)
class MapBatches(Step):
    """A map written over batches: ``fn(payloads)`` returns one result per payload, in order.

    Element-wise in meaning: each output item is its input item's ``map`` (same global time,
    trace plus ``(0, 0)``), so the output cannot depend on how the runtime batches items. The
    function gets a batch's payloads (tombstones left out) as ``format``: ``"arrow"`` (a
    ``pyarrow.Array`` of ``input_type``, or of the type each payload's Python type maps to),
    ``"pandas"`` (that array as a ``pandas.Series``) or ``"list"``; it returns an Arrow array,
    a list or a pandas Series (anything with ``tolist``) of the same length. Nothing is
    dropped: follow the step with a ``filter`` for that. See :mod:`flamestream.runtime.batches`.
    """

    fn: Callable[[Any], Any]
    format: str = "arrow"
    #: the ``pyarrow.DataType`` the payloads are converted to (``"arrow"``/``"pandas"`` only)
    input_type: Any = None


@dataclass(frozen=True)
class FlatMap(Step):
    """Any number of outputs per input, siblings with distinct child indexes."""

    fn: Callable[[Any], Iterable[Any]]


@dataclass(frozen=True)
class Filter(Step):
    """The input when ``predicate(payload)`` is true, nothing otherwise.

    ``version_stable`` declares that the predicate answers alike for every version of an item
    (all versions a replay can produce of it, e.g. it looks only at the type of a tuple's last
    element). Then dropping a replayed version needs no tombstone: the older versions were
    dropped too. Declaring it falsely loses invalidations.
    """

    predicate: Callable[[Any], bool]
    version_stable: bool = False


@dataclass(frozen=True)
class Broadcast(Step):
    """Copies each input to ``n`` output ports (child index = port). The only multi-output op."""

    n: int

    @property
    def outputs(self) -> int:
        """One output port per copy."""
        return self.n


@dataclass(frozen=True)
class Merge(Step):
    """Unions its inputs, in no particular order. The only multi-input op; closes cycles."""

    inputs: ClassVar[int | None] = None


@dataclass(frozen=True)
class Grouping(Step):
    """The only stateful op: per key, the tuple of the last ``window`` items up to each item."""

    window: int
    key: Callable[[Any], Hashable]


@dataclass(frozen=True)
class Sink(Step):
    """Where released items leave the graph (behind the barrier)."""

    @property
    def outputs(self) -> int:
        """A sink feeds nothing."""
        return 0


_KIND_NAMES: dict[type[Step], str] = {
    Source: "source",
    Map: "map",
    MapBatches: "map_batches",
    FlatMap: "flat_map",
    Filter: "filter",
    Broadcast: "broadcast",
    Merge: "merge",
    Grouping: "grouping",
    Sink: "sink",
}

#: Operations that keep no state; consecutive ones may be fused.
STATELESS: tuple[type[Step], ...] = (Map, MapBatches, FlatMap, Filter, Broadcast, Merge)
