"""Who invalidates whom among the items of one global time, indexed by trace, not pair by pair.

Within one global time, :func:`~flamestream.model.invalidates` looks at traces only: ``newer``
invalidates ``older`` when their first difference is a local time whose logical time is greater
in ``newer`` (a first difference in a child index: siblings; no difference: one a prefix of the
other; neither invalidates). In a trie of traces that first difference is a node both paths
pass through, where they take different children:

* **Is ``trace`` invalidated** by a held may-invalidate trace? Walking ``trace`` down, some
  node on its path has a child, holding a may-invalidate trace below it, of a greater logical
  time than ``trace``'s next local time. Each node keeps the greatest such logical time
  (``top``), so the answer costs the length of ``trace``.
* **What does ``trace`` invalidate?** At each node on ``trace``'s path, every trace below a
  child of a smaller logical time than ``trace``'s next local time: whole subtrees, found
  through a heap of each node's children. Each held trace is taken out once, so over a run
  the search costs the traces' lengths, not their pairs.

A cycle keeps every item's admission global time, so one global time may hold thousands of
items (a connected-components label wave, a flat_map's fan-out round a loop): the pairwise
check made each arrival linear in its peers, a global time quadratic (a sink commit of the
barrier's rows took minutes; a grouping's replays as long). ``tests/unit/test_invalidation.py``
checks every answer against :func:`~flamestream.model.invalidates` pair by pair.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from flamestream.model import DataItem, LocalTime, Trace

H = TypeVar("H")
E = TypeVar("E")


class _Node(Generic[H]):
    """A trie node: the traces that pass through one prefix."""

    __slots__ = ("children", "here", "lows", "top")

    def __init__(self) -> None:
        self.children: dict[LocalTime, _Node[H]] = {}
        #: the children's local times, least first (a heap): the search for what a trace
        #: invalidates pops those of a smaller logical time than its own, and only those
        self.lows: list[LocalTime] = []
        #: the greatest logical time of a child that holds a may-invalidate trace (-1: none)
        self.top = -1
        self.here: list[H] | None = None  #: handles of the traces that end at this node


class TraceIndex(Generic[H]):
    """Traces of one global time's items, each with a handle, as a trie of who invalidates whom.

    Invariant: a node's ``top`` is the greatest logical time among its children whose subtree
    holds a may-invalidate trace. Traces leave the index only through :meth:`supersede`, which
    takes out what a may-invalidate trace invalidates and adds that trace: at every node where
    it takes children out, they have a smaller logical time than the child it adds its trace
    under, so ``top`` stays exact without being recomputed.
    """

    __slots__ = ("_root",)

    def __init__(self, traces: Iterable[tuple[Trace, H, bool]] = ()) -> None:
        self._root: _Node[H] = _Node()
        for trace, handle, flagged in traces:
            self.add(trace, handle, flagged=flagged)

    def add(self, trace: Trace, handle: H, *, flagged: bool) -> None:
        """Hold ``trace`` under ``handle``; ``flagged``: it may invalidate (a replay's item)."""
        node = self._root
        for local in trace:
            if flagged and local.logical > node.top:
                node.top = local.logical
            child = node.children.get(local)
            if child is None:
                child = node.children[local] = _Node()
                heapq.heappush(node.lows, local)
            node = child
        if node.here is None:
            node.here = [handle]
        else:
            node.here.append(handle)

    def invalidated(self, trace: Trace) -> bool:
        """Whether a held may-invalidate trace invalidates an item with ``trace``."""
        node = self._root
        for local in trace:
            if node.top > local.logical:
                return True
            found = node.children.get(local)
            if found is None:
                return False
            node = found
        return False

    def supersede(self, trace: Trace, handle: H) -> list[H]:
        """Take out every held trace ``trace`` invalidates, then hold ``trace`` (may-invalidate).

        Returns the handles taken out, in no particular order.
        """
        taken: list[H] = []
        node = self._root
        for local in trace:
            lows = node.lows
            while lows and lows[0].logical < local.logical:
                _collect(node.children.pop(heapq.heappop(lows)), taken)
            found = node.children.get(local)
            if found is None:
                break
            node = found
        self.add(trace, handle, flagged=True)
        return taken


def _collect(node: _Node[H], into: list[H]) -> None:
    """Every handle held in ``node``'s subtree (iteratively: traces round a loop grow long)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.here is not None:
            into.extend(current.here)
        stack.extend(current.children.values())


class HeldVersions(Generic[E]):
    """One global time's held entries ``(tag, item)`` in arrival order, indexed by trace.

    What a grouping's index (tag: the bucket's key, None for a tombstone) and a barrier's
    buffer (tag None) keep of a global time once a may-invalidate item of it came. Iterating
    gives the entries in arrival order, those taken out left out, as a list kept in that
    order by removal would. The trace index is made on first use (a snapshot restores the
    entries only).
    """

    __slots__ = ("_entries", "_flagged", "_index", "_next")

    def __init__(self, entries: Iterable[tuple[E, DataItem]] = ()) -> None:
        self._entries: dict[int, tuple[E, DataItem]] = {}
        self._next = 0  #: the next entry's serial number (arrival order)
        self._index: TraceIndex[int] | None = None
        #: whether a may-invalidate entry is held (one always is, once one came: only
        #: :meth:`supersede` takes entries out, and it holds its own)
        self._flagged = False
        for entry in entries:
            self.append(entry)

    def __reduce__(self) -> tuple[type[HeldVersions[E]], tuple[list[tuple[E, DataItem]]]]:
        # pickled as its entries: the trace index is made again when first needed
        return HeldVersions, (list(self._entries.values()),)

    def __iter__(self) -> Iterator[tuple[E, DataItem]]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def _traces(self) -> TraceIndex[int]:
        index = self._index
        if index is None:
            index = self._index = TraceIndex(
                (item.meta.trace, serial, item.may_invalidate)
                for serial, (_, item) in self._entries.items()
            )
        return index

    def append(self, entry: tuple[E, DataItem]) -> None:
        """Hold ``entry`` last, as a list would (unchecked: :meth:`stale`, :meth:`supersede`)."""
        serial = self._next
        self._next = serial + 1
        self._entries[serial] = entry
        item = entry[1]
        self._flagged = self._flagged or item.may_invalidate
        if self._index is not None:
            self._index.add(item.meta.trace, serial, flagged=item.may_invalidate)

    def stale(self, item: DataItem) -> bool:
        """Whether a held may-invalidate item invalidates ``item``."""
        return self._flagged and self._traces().invalidated(item.meta.trace)

    def supersede(self, tag: E, item: DataItem) -> list[tuple[E, DataItem]]:
        """Take out what ``item`` (may-invalidate) invalidates, in arrival order; hold ``item``."""
        serial = self._next
        self._next = serial + 1
        taken = self._traces().supersede(item.meta.trace, serial)
        entries = self._entries
        victims = [entries.pop(s) for s in sorted(taken)]
        entries[serial] = (tag, item)
        self._flagged = True
        return victims
