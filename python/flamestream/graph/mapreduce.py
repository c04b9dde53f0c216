"""MapReduce on a stream: exactly the paper's §2.3 graph, built from the core operations.

map -> merge -> grouping(window 2, by key) -> filter -> map (reduce) -> broadcast
                ^                                                        |
                '----------------------- cycle -------------------------'

Every input item yields the updated reduced item for its key.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from flamestream.errors import GraphError
from flamestream.graph.dataflow import Dataflow, Stream
from flamestream.graph.logical import check_step_id
from flamestream.graph.steps import Broadcast, Filter, Grouping, Map, Merge

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Mapped(Generic[K, V]):
    """A mapped item: what the map step made of one input."""

    key: K
    value: V

    def __init__(self, key: K, value: V) -> None:
        # what the dataclass' __init__ does (frozen: object.__setattr__ per field), through
        # the slots' own descriptors at half the cost: runtimes make one per item
        _set_mapped_key(self, key)
        _set_mapped_value(self, value)

    def __reduce__(self) -> tuple[type[Mapped[K, V]], tuple[K, V]]:
        # cheaper than a slots dataclass' default (a per-field state and setattr)
        return Mapped, (self.key, self.value)

    def __repr__(self) -> str:
        # the dataclass' own text, 4x faster: its recursion guard costs a set and a thread id
        # per call (a container's repr guards itself), and default renders call it per item
        return f"{type(self).__qualname__}(key={self.key!r}, value={self.value!r})"


_set_mapped_key = vars(Mapped)["key"].__set__  # the slot's member descriptor
_set_mapped_value = vars(Mapped)["value"].__set__  # the slot's member descriptor


@dataclass(frozen=True, slots=True)
class Reduced(Generic[K, V]):
    """A reduced item: the key's value after combining every mapped item so far."""

    key: K
    value: V

    def __init__(self, key: K, value: V) -> None:
        # what the dataclass' __init__ does (frozen: object.__setattr__ per field), through
        # the slots' own descriptors at half the cost: runtimes make one per item
        _set_reduced_key(self, key)
        _set_reduced_value(self, value)

    def __reduce__(self) -> tuple[type[Reduced[K, V]], tuple[K, V]]:
        # groupings' snapshots hold one reduced item per key: keep their pickling cheap
        return Reduced, (self.key, self.value)

    def __repr__(self) -> str:
        # what the dataclass' repr prints (see Mapped.__repr__): the default render of a
        # reduced item, once per released update
        return f"{type(self).__qualname__}(key={self.key!r}, value={self.value!r})"


_set_reduced_key = vars(Reduced)["key"].__set__  # the slot's member descriptor
_set_reduced_value = vars(Reduced)["value"].__set__  # the slot's member descriptor


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class MapStep:
    """Wraps the user's mapper so its (key, value) pair becomes a :class:`Mapped` item.

    Public so runtimes can recognize map_reduce's map step (``isinstance(fn, MapStep)``) and
    call ``mapper`` themselves, e.g. to combine pairs before making items of them.
    """

    mapper: Callable[[Any], tuple[Any, Any]]

    def __call__(self, payload: Any) -> Mapped[Any, Any]:
        """The mapped item of ``payload``."""
        key, value = self.mapper(payload)
        return Mapped(key, value)


def mapped_key(item: Mapped[Any, Any] | Reduced[Any, Any]) -> Any:
    """The grouping key of map_reduce's grouping: a mapped or reduced item's key.

    One module-level function, so it is recognizable (``step.key is mapped_key``) also after
    the graph was pickled to Spark's workers (see :func:`is_map_reduce_grouping`).
    """
    return item.key


def ends_with_mapped(window: tuple[Any, ...]) -> bool:
    """The filter: drop tuples ending in a reduced item, i.e. (mapped, reduced).

    A reduced item reaching the grouping has been combined already; only a tuple ending in a
    fresh mapped item carries news.
    """
    return isinstance(window[-1], Mapped)


@dataclass(frozen=True, slots=True)
class ReduceStep:
    """The second map: (mapped) -> initial value; (reduced, mapped) -> combined value.

    Any other tuple ending in a mapped item, e.g. (mapped, mapped), exists only transiently
    while items are out of order; it is treated like (mapped) and its output is invalidated
    by the replay that follows. It must still produce an item: that item is what invalidates
    the outputs of the replayed tuple's older version.
    """

    initial: Callable[[Any], Any]
    reducer: Callable[[Any, Any], Any]
    #: The user declared ``reducer`` associative and commutative (see :func:`map_reduce`).
    commutative: bool = False

    @property
    def combinable(self) -> bool:
        """Whether mapped values may be pre-combined: commutative, and no ``initial``."""
        return self.commutative and self.initial is _identity

    @property
    def sums(self) -> bool:
        """Whether it adds values up: ``operator.add``, no ``initial`` (``count``'s reduce).

        On ints that is a sum per key, which a runtime may compute without calling Python per
        item (the Spark runtime's keyed stage does so, see
        ``flamestream.spark.exec.declared.summed``).
        """
        return self.reducer is operator.add and self.initial is _identity

    def __call__(self, window: tuple[Any, ...]) -> Reduced[Any, Any]:
        """The reduced item for a grouping's tuple ending in a mapped item."""
        mapped = window[-1]
        return self.fold(window[0] if len(window) == 2 else None, mapped.key, mapped.value)

    def fold(self, before: Any, key: Any, value: Any) -> Reduced[Any, Any]:
        """The output for a tuple ``(before, Mapped(key, value))`` (``before`` None: one item).

        The Spark keyed stage's fast path calls it without making the tuple.
        """
        if isinstance(before, Reduced):
            return Reduced(key, self.reducer(before.value, value))
        return Reduced(key, self.initial(value))


def map_reduce(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    mapper: Callable[[Any], tuple[Any, Any]],
    reducer: Callable[[Any, Any], Any],
    initial: Callable[[Any], Any] = _identity,
    commutative: bool = False,
) -> Stream:
    """Add the §2.3 MapReduce graph to ``flow`` and return its stream of :class:`Reduced`.

    ``mapper(payload)`` returns ``(key, value)``; the first value of a key becomes
    ``initial(value)``, and each later one is folded in with ``reducer(acc, value)``. The inner
    steps are named ``{step_id}.map``, ``.merge``, ``.grouping``, ``.filter``, ``.reduce`` and
    ``.broadcast``.

    ``commutative=True`` declares ``reducer`` associative and commutative over values (as
    addition is). It changes nothing in the model; where only the latest value per key and
    tick is released (``SparkGraph(..., release="latest")``), it lets the Spark runtime
    pre-combine a task's mapped values per key before the shuffle (with the default
    ``initial`` only: values and accumulators must be alike).

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("count")
    >>> words = flow.source("words")
    >>> counts = map_reduce(
    ...     flow, "count", words, mapper=lambda w: (w, 1), reducer=lambda a, b: a + b
    ... )
    >>> flow.sink("out", counts)
    >>> [r.payload for r in run_in_order(flow, ["dog", "cat", "dog"]).released()]
    [Reduced(key='dog', value=1), Reduced(key='cat', value=1), Reduced(key='dog', value=2)]
    """
    check_step_id(step_id)
    for name, fn in (("mapper", mapper), ("reducer", reducer), ("initial", initial)):
        if not callable(fn):
            raise GraphError(
                step_id,
                f"a callable {name}",
                f"{type(fn).__name__} {fn!r}",
                "map_reduce(..., mapper=lambda x: (key, value), reducer=lambda acc, v: ...)",
            )
    (mapped,) = flow.add_step(Map(f"{step_id}.map", MapStep(mapper)), up)
    (merged,) = flow.add_step(Merge(f"{step_id}.merge"), mapped)
    (tuples,) = flow.add_step(Grouping(f"{step_id}.grouping", 2, mapped_key), merged)
    # Every version of a tuple ends in a version of the same last item, mapped or reduced
    # alike, so the filter's answer is version-stable and dropped replays need no tombstone.
    filter_step = Filter(f"{step_id}.filter", ends_with_mapped, version_stable=True)
    (fresh,) = flow.add_step(filter_step, tuples)
    reduce_step = Map(f"{step_id}.reduce", ReduceStep(initial, reducer, commutative))
    (reduced,) = flow.add_step(reduce_step, fresh)
    out, back = flow.add_step(Broadcast(f"{step_id}.broadcast", 2), reduced)
    flow.add_merge_input(merged, back)
    return out


@dataclass(frozen=True, slots=True)
class CountMapper:
    """:func:`count`'s mapper: ``(key(item), 1)``, or ``(item, 1)`` without a ``key``.

    A class of its own (not a lambda) so runtimes can recognize a count and run it without
    calling Python per item: the Spark runtime counts text in Arrow (see
    ``docs/architecture.md``, "Declared counts"). Its results are the same either way.
    """

    key: Callable[[Any], Any] | None = None

    def __call__(self, payload: Any) -> tuple[Any, int]:
        """The pair counted for ``payload``."""
        return (payload if self.key is None else self.key(payload)), 1


def count(
    flow: Dataflow, step_id: str, up: Stream, *, key: Callable[[Any], Any] | None = None
) -> Stream:
    """Count items per key: a stream of ``Reduced(key, how many so far)``.

    :func:`map_reduce` with the mapper ``(key(item), 1)`` (``key`` None: the item itself is
    the key), ``operator.add`` as the reducer, declared commutative. The same items and
    results as writing that map_reduce out; declared this way, runtimes may count without
    calling Python per item (the Spark runtime does so for text, see :class:`CountMapper`).

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("count")
    >>> counts = count(flow, "count", flow.flat_map("split", flow.source("lines"), str.split))
    >>> flow.sink("out", counts)
    >>> [r.payload for r in run_in_order(flow, ["dog cat", "dog"]).released()]
    [Reduced(key='dog', value=1), Reduced(key='cat', value=1), Reduced(key='dog', value=2)]
    """
    if key is not None and not callable(key):
        raise GraphError(
            step_id,
            "a callable key or None",
            f"{type(key).__name__} {key!r}",
            "count(flow, 'count', words, key=str.lower)",
        )
    mapper = CountMapper(key)
    return map_reduce(flow, step_id, up, mapper=mapper, reducer=operator.add, commutative=True)


@dataclass(frozen=True, slots=True)
class AggregateMapper:
    """The mapper of :func:`sum_by`, :func:`min_by`, :func:`max_by`: ``(key(i), value(i))``.

    Either part is the item itself when not given. A class of its own (not a lambda), as
    :class:`CountMapper` is: what an aggregation maps is declared, so a runtime may
    recognize it.
    """

    key: Callable[[Any], Any] | None = None
    value: Callable[[Any], Any] | None = None

    def __call__(self, payload: Any) -> tuple[Any, Any]:
        """The pair aggregated for ``payload``."""
        key = payload if self.key is None else self.key(payload)
        return key, (payload if self.value is None else self.value(payload))


def _aggregate(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    reducer: Callable[[Any, Any], Any],
    key: Callable[[Any], Any] | None,
    value: Callable[[Any], Any] | None,
) -> Stream:
    """map_reduce with :class:`AggregateMapper` and a commutative ``reducer``."""
    for name, fn in (("key", key), ("value", value)):
        if fn is not None and not callable(fn):
            raise GraphError(
                step_id,
                f"a callable {name} or None",
                f"{type(fn).__name__} {fn!r}",
                "sum_by(flow, 'spent', orders, key=lambda o: o[0], value=lambda o: o[1])",
            )
    mapper = AggregateMapper(key, value)
    return map_reduce(flow, step_id, up, mapper=mapper, reducer=reducer, commutative=True)


def sum_by(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
) -> Stream:
    """Sum ``value(item)`` per ``key(item)``: a stream of ``Reduced(key, sum so far)``.

    :func:`map_reduce` with the mapper ``(key(item), value(item))`` (either None: the item
    itself) and ``operator.add``, declared commutative. On int values the Spark runtime's
    keyed stage sums in Arrow, as it does for :func:`count`.

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("spent")
    >>> spent = sum_by(flow, "spent", flow.source("orders"), key=lambda o: o[0],
    ...                value=lambda o: o[1])
    >>> flow.sink("out", spent)
    >>> [r.payload for r in run_in_order(flow, [("ann", 3), ("bob", 1), ("ann", 4)]).released()]
    [Reduced(key='ann', value=3), Reduced(key='bob', value=1), Reduced(key='ann', value=7)]
    """
    return _aggregate(flow, step_id, up, operator.add, key, value)


def min_by(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
) -> Stream:
    """The least ``value(item)`` per ``key(item)`` so far: ``Reduced(key, minimum)`` items.

    :func:`map_reduce` with the mapper ``(key(item), value(item))`` and ``min``, declared
    commutative.

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("low")
    >>> flow.sink("out", min_by(flow, "low", flow.source("x"), key=len))
    >>> [r.payload.value for r in run_in_order(flow, ["b", "a", "cc"]).released()]
    ['b', 'a', 'cc']
    """
    return _aggregate(flow, step_id, up, min, key, value)


def max_by(
    flow: Dataflow,
    step_id: str,
    up: Stream,
    *,
    key: Callable[[Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
) -> Stream:
    """The greatest ``value(item)`` per ``key(item)`` so far: ``Reduced(key, maximum)`` items.

    :func:`map_reduce` with the mapper ``(key(item), value(item))`` and ``max``, declared
    commutative.

    >>> from flamestream.testing import run_in_order
    >>> flow = Dataflow("high")
    >>> flow.sink("out", max_by(flow, "high", flow.source("x"), key=len))
    >>> [r.payload.value for r in run_in_order(flow, ["a", "b", "cc"]).released()]
    ['a', 'b', 'cc']
    """
    return _aggregate(flow, step_id, up, max, key, value)


def is_map_reduce_grouping(step: Any) -> bool:
    """Whether ``step`` is the grouping :func:`map_reduce` made (window 2, by the mapped key).

    map_reduce's steps are tagged by what they hold, all public here: the grouping's key is
    :func:`mapped_key`, the filter's predicate :func:`ends_with_mapped`, the reduce map's
    function a :class:`ReduceStep`. Runtimes recognize the cycle by these, never by names.
    """
    return isinstance(step, Grouping) and step.window == 2 and step.key is mapped_key
