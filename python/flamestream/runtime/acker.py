"""The acker: XOR checksums per global time plus front reports give the min-time.

Every time an item is sent along an edge, and every time it is received, its 64-bit id is
XORed into the slot of its global time (Storm's acker, keyed by time instead of by tuple
tree). A zero slot means nothing of that time is in flight. Each front reports the least ts
it may still assign. The min-time is the least global time that some front may still assign
or whose slot is non-zero; nothing below it exists in flight or can appear any more.
"""

from __future__ import annotations

import heapq

from flamestream.errors import InvariantError, ScheduleError
from flamestream.model import END_OF_TIME, DataItem, GlobalTime

_MASK64 = (1 << 64) - 1


def item_id(item: DataItem) -> int:
    """A stable 64-bit id of an item, from its meta (unique per item) and its kind.

    A meta is a tuple of ints only, and CPython hashes such tuples deterministically (no hash
    randomization applies to ints), so every process computes the same id. The splitmix64
    finalizer spreads the bits, as XOR checksums want.
    """
    z = (hash((item.meta, item.tombstone)) + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class Acker:
    """Ack table (global time -> XOR checksum) and front reports.

    The min-time never moves backwards; the acker checks that, because a runtime that makes
    it move back has lost track of something in flight.
    """

    def __init__(self) -> None:
        self._slots: dict[GlobalTime, int] = {}
        self._busy: list[GlobalTime] = []  # heap of times with a non-zero slot (lazily pruned)
        self._reports: dict[int, int] = {}  # open front id -> least ts it may still assign
        self._last_min = GlobalTime(-1, -1)

    def register_front(self, front: int, start_ts: int = 0) -> None:
        """Start tracking a front whose first item will have ts >= ``start_ts``."""
        if front in self._reports:
            msg = f"front {front}: registered twice"
            raise ScheduleError(msg)
        self._reports[front] = start_ts

    def ack(self, global_time: GlobalTime, item_id: int) -> None:
        """XOR one send or one receive of an item into its time's slot."""
        value = self._slots.get(global_time, 0) ^ item_id
        if value:
            if global_time not in self._slots:
                heapq.heappush(self._busy, global_time)
            self._slots[global_time] = value
        else:
            self._slots.pop(global_time, None)

    def report(self, front: int, ts: int) -> None:
        """Front ``front`` will assign no ts below ``ts`` any more."""
        current = self._reports.get(front)
        if current is None:
            msg = f"front {front}: reported after it was closed, or never opened"
            raise ScheduleError(msg)
        if ts < current:
            msg = (
                f"front {front}: report went back from ts {current} to {ts}; "
                "a report promises that no smaller ts follows"
            )
            raise ScheduleError(msg)
        self._reports[front] = ts

    def close(self, front: int) -> None:
        """Front ``front`` will assign nothing more."""
        self._reports.pop(front, None)

    def report_of(self, front: int) -> int | None:
        """The front's current report, or None once it is closed."""
        return self._reports.get(front)

    def busy_times(self) -> list[GlobalTime]:
        """Global times that still have items in flight, in order."""
        return sorted(self._slots)

    @property
    def min_time(self) -> GlobalTime:
        """The least global time still in flight or still assignable by an open front."""
        while self._busy and self._busy[0] not in self._slots:
            heapq.heappop(self._busy)
        candidates = [GlobalTime(ts, front) for front, ts in self._reports.items()]
        if self._busy:
            candidates.append(self._busy[0])
        current = min(candidates, default=END_OF_TIME)
        if current < self._last_min:
            msg = (
                f"min-time moved back from {self._last_min} to {current}: an item was sent "
                "below the min-time"
            )
            raise InvariantError(msg)
        self._last_min = current
        return current
