"""Following the cluster: the active key partitions track the cores the application has.

With ``ElasticPolicy(follow_cluster=True)`` the control channel's reader (the driver's source
process) asks, once per committed batch, how many executors and cores the application has
(:func:`flamestream.jvm.cluster_executors`: the shim's listener, through its loopback
endpoint), turns that into a desired active count (:func:`~.key_layout.desired_active`: the
cores, bounded by ``P`` and by the slots that got items, held back while batches are well
within the latency budget), and, once the same count was desired for ``settle`` batches in a
row (:func:`settle_step`: executors arrive and leave one by one, and a lost one may be
replaced at once), rescales to it as a ``rescale(n)`` request would: a target layout over
``n`` partitions, reached a few slots per batch. The decision, with the cores it came from,
goes into the control channel's end offset, so a replayed batch uses the same layout whatever
the cluster looks like then.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from flamestream.jvm import Executors, cluster_executors
from flamestream.spark.control.key_layout import FOLLOW_SETTLE, desired_active
from flamestream.spark.durable import QueryCheckpoint, filesystem


@dataclass(frozen=True)
class Pending:
    """A desired active count not acted upon yet, and for how many batches it held."""

    active: int
    batches: int


def settle_step(
    pending: Pending | None, desired: int, current: int, settle: int
) -> tuple[Pending | None, int | None]:
    """Hysteresis on the desired count (pure): ``(pending after this batch, count to act on)``.

    A count equal to the current one clears what was pending; another one counts the batches
    it held in a row (a different one starts again at one), and is acted upon at ``settle``.
    """
    if desired == current:
        return None, None
    held = pending.batches + 1 if pending is not None and pending.active == desired else 1
    if held >= settle:
        return None, desired
    return Pending(desired, held), None


def batch_ms(checkpoint: str, batch: int) -> float | None:
    """Batch ``batch``'s duration: its offset's write to its commit's (None: not known)."""
    log = QueryCheckpoint(checkpoint)
    fs, root = filesystem(log.url)
    try:
        planned = fs.info(log.offset_path(batch)).get("mtime")
        committed = fs.info(posixpath.join(root, "commits", str(batch))).get("mtime")
    except (FileNotFoundError, OSError):
        return None
    if planned is None or committed is None:
        return None
    return max(0.0, (float(committed) - float(planned)) * 1000)


class ClusterFollower:
    """The driver-side half: reads the cluster once per batch and applies :func:`settle_step`.

    ``read``: where the executors come from (default: the shim's endpoint; None when no shim
    runs, and then nothing is decided).
    """

    def __init__(
        self,
        partitions: int,
        settle: int = FOLLOW_SETTLE,
        target_ms: float | None = None,
        read: Callable[[], Executors | None] = cluster_executors,
    ) -> None:
        self.partitions = partitions
        self.settle = settle
        self.target_ms = target_ms
        self.read = read
        self.pending: Pending | None = None
        self.judged = -1  #: the newest batch after which the cluster was read
        self.seen: Executors | None = None  #: what the last reading found

    def decide(
        self, checkpoint: str, last: int, current: int, slot_loads: Mapping[int, int] | None
    ) -> tuple[int | None, str]:
        """After committed batch ``last``: the active count to rescale to (or None), and why.

        ``current``: the active count now; ``slot_loads``: items per slot in batch ``last``.
        """
        if last <= self.judged:
            return None, ""
        self.judged = last
        seen = self.read()
        if seen is None:
            return None, ""
        self.seen = seen
        took = batch_ms(checkpoint, last) if self.target_ms is not None else None
        desired = desired_active(
            seen.cores,
            self.partitions,
            current,
            batch_ms=took,
            target_ms=self.target_ms,
            slot_loads=slot_loads,
        )
        self.pending, act = settle_step(self.pending, desired, current, self.settle)
        if act is None:
            return None, ""
        return act, f"cluster: {seen.executors} executors, {seen.cores} cores after batch {last}"
