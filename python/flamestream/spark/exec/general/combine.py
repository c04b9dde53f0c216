"""Items on their way through a stage, and the map-side combine of ``release="latest"``.

:class:`Items` are parallel lists (input row, trace suffix, payload, flags), one per step's
input queue. Two facts about them are kept so the combine need not rediscover them per item:

* ``ordered``: the items come in meta order. A front's rows, when they are in meta order, stay
  so through any chain of map, flat_map and filter (each keeps its inputs' order and appends
  increasing child indexes); a queue fed by two producers is no longer known to be ordered.
* ``pairs``: the payloads are map_reduce's ``(key, value)`` pairs rather than ``Mapped``
  items. map_reduce's map step sends pairs when the map-side combine is next: only one item
  per key leaves the stage, so only that one needs to be made a ``Mapped`` item. A pair is
  exactly what ``Mapped(key, value)`` holds: :meth:`Items.materialize` makes the items.

The combine (:func:`combined`) folds a key's mapped items into one with the meta of the
latest of them; with ``release="latest"`` and a reducer declared commutative the key's value
at the end of the tick is the same, whichever items were combined where. Flagged items
(replays, tombstones) pass as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

from flamestream.graph.mapreduce import Mapped
from flamestream.model import LocalTime
from flamestream.spark.exec.general.items import TOMBSTONE

#: A trace suffix: the local times a stage's steps appended to an input row's trace.
Suffix = tuple[LocalTime, ...]


class Items:
    """Items on their way to one step: parallel lists (input row, suffix id, payload, flags).

    An item's trace suffix is ``table[sids[k]]``: a batch's items carry only a handful of
    distinct suffixes (one per position in a flat_map's output, say), so each is made once,
    and a step that appends the same local time to every item (map, filter, merge) extends
    the table, not each item. Items made from others share the table (``derived``); lists
    are never changed in place once another queue may hold them (``take`` copies).
    """

    __slots__ = ("flags", "ordered", "pairs", "payloads", "rows", "sids", "table")

    def __init__(
        self, *, ordered: bool = False, pairs: bool = False, table: Sequence[Suffix] = ((),)
    ) -> None:
        self.rows: list[int] = []
        self.sids: list[int] = []  # per item, the index of its suffix in ``table``
        self.table: Sequence[Suffix] = table
        self.payloads: list[Any] = []
        self.flags: list[int] = []
        #: known to be in meta order (see the module's docstring)
        self.ordered = ordered
        #: payloads are (key, value) pairs of map_reduce's mapped items (tombstones: None)
        self.pairs = pairs

    @classmethod
    def derived(cls, items: Items, *, ordered: bool | None = None) -> Items:
        """No items yet, with ``items``' suffix table (and order, unless given)."""
        return cls(ordered=items.ordered if ordered is None else ordered, table=items.table)

    def suffix(self, nth: int) -> Suffix:
        """The trace suffix of the ``nth`` item."""
        return self.table[self.sids[nth]]

    def add_nth(self, items: Items, nth: int, payload: Any, flag: int) -> None:
        """``items``' ``nth`` item (its row and suffix) with ``payload`` and ``flag``.

        ``items`` must share this queue's table (see :meth:`derived`).
        """
        self.rows.append(items.rows[nth])
        self.sids.append(items.sids[nth])
        self.payloads.append(payload)
        self.flags.append(flag)

    def take(self, other: Items) -> None:
        """Append ``other``'s items (another producer's, or the stage's input rows)."""
        if not other.rows:
            return
        sids = other.sids
        if self.rows:  # two producers: their items interleave in no known order
            self.ordered = False
            if self.pairs != other.pairs:
                self.materialize()
                other.materialize()
            if other.table is not self.table:  # one table for both: the other's ids move up
                offset = len(self.table)
                self.table = (*self.table, *other.table)
                sids = [sid + offset for sid in sids]
        else:
            self.ordered, self.pairs, self.table = other.ordered, other.pairs, other.table
        self.rows += other.rows
        self.sids += sids
        self.payloads += other.payloads
        self.flags += other.flags

    def extended(self, local: LocalTime) -> tuple[Suffix, ...]:
        """The table with ``local`` appended to every suffix (the ids stay what they were)."""
        return tuple((*suffix, local) for suffix in self.table)

    def materialize(self) -> None:
        """Turn pairs into the ``Mapped`` items they stand for (no-op for other payloads)."""
        if self.pairs:
            self.payloads = [
                payload if flag & TOMBSTONE else Mapped(*payload)
                for payload, flag in zip(self.payloads, self.flags, strict=True)
            ]
            self.pairs = False


def combined(
    order: Callable[[], list[tuple[Any, ...]]], items: Items, reducer: Callable[[Any, Any], Any]
) -> Items:
    """Mapped items of one key folded into one, with the meta of the latest of them.

    ``order()`` gives each input row's meta (the items' suffixes come after it); it is asked
    only when the items' order is not known.
    """
    if items.pairs and items.ordered and not any(items.flags):
        return _combined_pairs_in_order(items, reducer)
    items.materialize()
    if items.ordered:
        return combined_in_order(items, reducer)
    metas = order()
    if in_meta_order(metas, items):
        return combined_in_order(items, reducer)
    return combined_any_order(metas, items, reducer)


def in_meta_order(order: Sequence[tuple[Any, ...]], items: Items) -> bool:
    """Whether ``items`` come in meta order (as a front's rows through a chain of steps do).

    ``order`` holds each input row's meta; an item's meta is its row's, then its suffix.
    """
    rows, sids, table = items.rows, items.sids, items.table
    for k in range(1, len(rows)):
        a, b = rows[k - 1], rows[k]
        if a == b:
            if not table[sids[k - 1]] < table[sids[k]]:
                return False
        elif not order[a] < order[b]:
            return False
    return True


def rows_in_meta_order(order: Sequence[tuple[Any, ...]]) -> bool:
    """Whether input rows with these metas are strictly in meta order."""
    return all(a < b for a, b in pairwise(order))


def _combined_pairs_in_order(items: Items, reducer: Callable[[Any, Any], Any]) -> Items:
    """:func:`combined` for ordered, unflagged pairs: a ``Mapped`` item per key, not per pair.

    The same fold, in the same order, as :func:`combined_in_order` makes over the items.
    """
    last: dict[Any, int] = {}  # key -> index of its last (latest) pair
    values: dict[Any, Any] = {}
    for k, (key, value) in enumerate(items.payloads):
        if key in values:
            values[key] = reducer(values[key], value)
        else:
            values[key] = value
        last[key] = k
    latest = list(last.values())
    out = Items.derived(items, ordered=False)
    out.rows = [items.rows[k] for k in latest]
    out.sids = [items.sids[k] for k in latest]
    # still pairs (keys in the order of ``last``'s, as inserted alongside): the stage's exit
    # encodes them as Mapped items without making any (``ExitRows.extend_pairs``)
    out.payloads, out.pairs = list(values.items()), True
    out.flags = [0] * len(latest)
    return out


def combined_in_order(items: Items, reducer: Callable[[Any, Any], Any]) -> Items:
    """:func:`combined` for items in meta order: a key's latest is its last."""
    out = Items.derived(items, ordered=False)
    last: dict[Any, int] = {}  # key -> index of its last (latest) mapped item
    values: dict[Any, Any] = {}
    for k, (payload, flag) in enumerate(zip(items.payloads, items.flags, strict=True)):
        if flag or not isinstance(payload, Mapped):  # tombstones, replays: as they are
            out.add_nth(items, k, payload, flag)
            continue
        key = payload.key
        if key in values:
            values[key] = reducer(values[key], payload.value)
        else:
            values[key] = payload.value
        last[key] = k
    for key, k in last.items():
        out.add_nth(items, k, Mapped(key, values[key]), 0)
    return out


def combined_any_order(
    order: Sequence[tuple[Any, ...]], items: Items, reducer: Callable[[Any, Any], Any]
) -> Items:
    """:func:`combined` for items in any order: metas compared per key."""
    # key -> index of its latest item, and that item's (row order, suffix) once compared
    best: dict[Any, tuple[int, Any]] = {}
    values: dict[Any, Any] = {}
    out = Items.derived(items, ordered=False)
    for k, (row, payload, flag) in enumerate(
        zip(items.rows, items.payloads, items.flags, strict=True)
    ):
        if flag or not isinstance(payload, Mapped):  # tombstones, replays: as they are
            out.add_nth(items, k, payload, flag)
            continue
        key = payload.key
        held = best.get(key)
        if held is None:
            values[key], best[key] = payload.value, (k, None)
            continue
        values[key] = reducer(values[key], payload.value)
        j, there = held
        if there is None:
            there = (order[items.rows[j]], items.suffix(j))
        here = (order[row], items.suffix(k))
        best[key] = (k, here) if here > there else (j, there)
    for key, (k, _) in best.items():
        out.add_nth(items, k, Mapped(key, values[key]), 0)
    return out
