"""When a budget turned a key's exact state into a sketch: the schedule, a function of time.

A budget policy (``exact_or_approximate``, issue 41) decides between batches that the keys of
some key slots fold lowered from now on (:meth:`ExactOrApproximateFold.lowered
<flamestream.approx.folds.ExactOrApproximateFold.lowered>`). Each decision is recorded in the
offset log as ``{"at": [ts, front], "slots": [...]}``: the slots, and the global time from
which their keys' items fold lowered. An item of global time ``t`` and key ``k`` folds lowered
when ``k``'s slot is in a decision at or below ``t``. Every version of an item has its global
time, so all fold alike, on every replay, and the reference runtime given the same schedule
(``run_in_order(..., sketch=...)``) releases the same rows.

Decisions only add slots (a sketched slot never returns to exact); a slot's time is its first
decision's.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flamestream.model import GlobalTime
from flamestream.model.keys import key_slot as key_slot


@dataclass(frozen=True)
class SketchSchedule:
    """Per key slot, the global time from which its keys fold lowered (``slots``: how many).

    >>> schedule = SketchSchedule.of([((10, 0), [1, 3])], slots=4)
    >>> schedule.since
    {1: GlobalTime(ts=10, front=0), 3: GlobalTime(ts=10, front=0)}
    >>> schedule.lowered_slot(1, GlobalTime(9, 0)), schedule.lowered_slot(1, GlobalTime(10, 0))
    (False, True)
    """

    since: Mapping[int, GlobalTime]
    slots: int
    _slot_of_key: dict[Hashable, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(
        cls, decisions: Sequence[tuple[tuple[int, int], Collection[int]]], slots: int
    ) -> SketchSchedule:
        """From ``(at, slots)`` decisions in any order: each slot's earliest ``at``."""
        since: dict[int, GlobalTime] = {}
        for at, chosen in decisions:
            time = GlobalTime(*at)
            for slot in chosen:
                if slot not in since or time < since[slot]:
                    since[int(slot)] = time
        return cls(dict(sorted(since.items())), slots)

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]], slots: int) -> SketchSchedule:
        """From the offset log's records (``{"at": [ts, front], "slots": [...]}``)."""
        return cls.of([(tuple(r["at"]), r["slots"]) for r in records], slots)

    def __bool__(self) -> bool:
        return bool(self.since)

    def lowered_slot(self, slot: int, time: GlobalTime) -> bool:
        """Whether slot ``slot``'s keys fold lowered at global time ``time``."""
        start = self.since.get(slot)
        return start is not None and not time < start

    def lowered(self, time: GlobalTime, key: Hashable) -> bool:
        """Whether key ``key``'s item of global time ``time`` folds lowered (slot cached)."""
        if not self.since:
            return False
        slot = self._slot_of_key.get(key)
        if slot is None:
            slot = self._slot_of_key[key] = key_slot(key, self.slots)
        return self.lowered_slot(slot, time)
