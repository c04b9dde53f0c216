"""The barrier sink's buffer: hold outputs, drop invalidated ones, release below the min-time.

An output with global time t is released only once the min-time has passed t: by then
nothing of time t is in flight or can still be made, so every item that could invalidate it
has arrived (the paper's Claim 1). Invalidated items and tombstones are never released; each
valid item is released once, in meta order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from flamestream.model import DataItem, GlobalTime
from flamestream.runtime.invalidation import HeldVersions


@dataclass
class BarrierStats:
    """Counters of what a barrier did."""

    received: int = 0
    released: int = 0
    invalidated: int = 0  # buffered items dropped because a later version arrived
    stale: int = 0  # arrivals dropped because a later version had arrived first


class BarrierBuffer:
    """The not-yet-released outputs of one sink, grouped by global time."""

    def __init__(self, step_id: str) -> None:
        self.step_id = step_id
        # per global time, its items in arrival order (tagged None), searched by trace: a
        # loop's global time may hold thousands, and a check against every one was quadratic
        self._by_time: dict[GlobalTime, HeldVersions[None]] = {}
        self._times: list[GlobalTime] = []  # heap over _by_time's keys
        self.stats = BarrierStats()

    def receive(self, item: DataItem) -> None:
        """Buffer an output (or a tombstone), dropping whatever it invalidates."""
        self.stats.received += 1
        held = self._by_time.get(item.global_time)
        if held is None:
            held = self._by_time[item.global_time] = HeldVersions()
            heapq.heappush(self._times, item.global_time)
        elif held.stale(item):
            self.stats.stale += 1
            return
        if item.may_invalidate:
            victims = held.supersede(None, item)
            self.stats.invalidated += sum(not other.tombstone for _, other in victims)
        else:
            held.append((None, item))

    def release(self, min_time: GlobalTime) -> list[DataItem]:
        """Remove and return, in meta order, the valid items whose time is below ``min_time``."""
        out: list[DataItem] = []
        while self._times and self._times[0] < min_time:
            held = self._by_time.pop(heapq.heappop(self._times))
            out.extend(sorted((i for _, i in held if not i.tombstone), key=lambda i: i.meta))
        self.stats.released += len(out)
        return out

    def pending(self) -> int:
        """How many items (tombstones included) wait for the min-time."""
        return sum(len(held) for held in self._by_time.values())
