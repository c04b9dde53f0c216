"""Small builders shared by the unit tests."""

from __future__ import annotations

from typing import Any

from flamestream.model import DataItem, GlobalTime, LocalTime, Meta


def meta(ts: int, *trace: tuple[int, int], front: int = 0) -> Meta:
    return Meta(GlobalTime(ts, front), tuple(LocalTime(*lt) for lt in trace))


def item(
    payload: Any,
    ts: int,
    *trace: tuple[int, int],
    front: int = 0,
    may_invalidate: bool = False,
    tombstone: bool = False,
) -> DataItem:
    return DataItem(payload, meta(ts, *trace, front=front), may_invalidate, tombstone)
