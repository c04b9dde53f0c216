"""How far a history-then-live query has got: from its progress, on the user's driver.

The front records its backfill in every batch's end offset (the ``history`` record, see
:mod:`flamestream.spark.connector.history`); Spark's query progress carries that offset, so
the phase, the rows read, the share of the history and the rate need no other channel.

>>> status = BackfillStatus.of({"sources": [{"endOffset": '{"history": {"phase": "backfill", '
...     '"rowsRead": 500, "size": 2000, "done": 500, "switch": null}}'}]})
>>> status.phase, status.rows_read, status.share
('backfill', 500, 0.25)
>>> print(status.bar(width=10))
backfill [##        ] 25.0%  500 rows
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class BackfillStatus:
    """One progress report of a history-then-live front."""

    phase: str  #: ``backfill`` or ``live``
    rows_read: int  #: history rows read so far (in committed and planned batches)
    size: int  #: the history's size (rows; bytes for a files history)
    done: int  #: how much of ``size`` the batches so far read
    switch_batch: int | None  #: the batch that switched, once planned
    gap_positions: int  #: positions in neither the history nor the live source
    rows_per_second: float | None = None  #: over the last two reports (``watch``)

    @property
    def share(self) -> float:
        """The share of the history read (1.0 once live)."""
        if self.phase == "live" or not self.size:
            return 1.0
        return min(1.0, self.done / self.size)

    @classmethod
    def of(cls, progress: dict[str, Any] | None) -> BackfillStatus | None:
        """The status in a query progress (``query.lastProgress``), or None: no history."""
        for source in (progress or {}).get("sources", []):
            end = source.get("endOffset")
            offset = json.loads(end) if isinstance(end, str) else end
            record = offset.get("history") if isinstance(offset, dict) else None
            if record:
                switch = record.get("switch") or {}
                return cls(
                    phase=str(record["phase"]),
                    rows_read=int(record["rowsRead"]),
                    size=int(record.get("size", 0)),
                    done=int(record.get("done", 0)),
                    switch_batch=switch.get("batch"),
                    gap_positions=int(switch.get("gapPositions", 0)),
                )
        return None

    def bar(self, width: int = 30) -> str:
        """A one-line progress bar."""
        done = round(self.share * width)
        line = f"{self.phase} [{'#' * done}{' ' * (width - done)}] {100 * self.share:.1f}%"
        line += f"  {self.rows_read} rows"
        if self.rows_per_second is not None:
            line += f"  {self.rows_per_second:,.0f} rows/s"
        if self.phase == "live":
            line += f"  (switched in batch {self.switch_batch}"
            line += f", {self.gap_positions} gap positions)" if self.gap_positions else ")"
        return line


def backfill_status(query: Any) -> BackfillStatus | None:
    """The backfill's status of a running ``StreamingQuery`` (None: no history, or no batch)."""
    return BackfillStatus.of(query.lastProgress)


def watch_backfill(
    query: Any, *, every: float = 1.0, out: TextIO | None = None, until_live: bool = True
) -> BackfillStatus | None:
    """Print a progress bar of the backfill until the query is live (or stops).

    On a terminal the bar redraws in place; otherwise a line per change. Returns the last status.
    """
    stream = out or sys.stderr
    tty = stream.isatty()
    last: BackfillStatus | None = None
    seen = (0, time.monotonic())
    while query.isActive:
        status = backfill_status(query)
        if status is not None and status != last:
            now = time.monotonic()
            rate = (status.rows_read - seen[0]) / (now - seen[1]) if now > seen[1] else None
            status = BackfillStatus(**{**status.__dict__, "rows_per_second": rate})
            seen, last = (status.rows_read, now), status
            stream.write(("\r" if tty else "") + status.bar() + ("" if tty else "\n"))
            stream.flush()
            if until_live and status.phase == "live":
                break
        query.awaitTermination(every)
    if tty and last is not None:
        stream.write("\n")
    return last
