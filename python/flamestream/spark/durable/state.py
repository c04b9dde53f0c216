"""Grouping state snapshots, per key partition and batch.

Layout: ``<graph>/<grouping>/part-<p>/<batch>.state`` (:class:`StateStore`).
"""

from __future__ import annotations

import posixpath
import time
from typing import Any

from flamestream.spark.durable import (
    QueryCheckpoint,
    filesystem,
    listing,
    numbered,
    remove,
    stale_temporaries,
    write_atomically,
)
from flamestream.spark.durable.files import numbered_paths

#: Snapshots kept per partition: the newest, and the one a replay of the newest restores.
KEEP_SNAPSHOTS = 2


class StateStore:
    """Snapshots of one grouping's partitions, by batch id (any fsspec URL)."""

    def __init__(self, url: str, grouping: str) -> None:
        self.url = url.rstrip("/") + "/" + grouping

    def _folder(self, partition: int) -> tuple[Any, str]:
        fs, root = filesystem(self.url)
        return fs, posixpath.join(root, f"part-{partition:05d}")

    def _versions(self, fs: Any, folder: str) -> list[int]:
        return numbered(fs, folder, ".state")

    def load(self, partition: int, before: int) -> bytes | None:
        """The newest snapshot written by a batch before ``before``, if any."""
        fs, folder = self._folder(partition)
        earlier = [v for v in self._versions(fs, folder) if v < before]
        if not earlier:
            return None
        data: bytes = fs.cat_file(posixpath.join(folder, f"{earlier[-1]:012d}.state"))
        return data

    def save(self, partition: int, batch_id: int, data: bytes) -> None:
        """Write batch ``batch_id``'s snapshot atomically; drop all but the newest two.

        What older batches' writers left (a crash's temporary, on a POSIX file system) goes
        too: one listing of the partition's folder, a few entries long.
        """
        fs, folder = self._folder(partition)
        # racing: Spark may run a keyed stage once per consumer of its output in one batch
        # (no reuse after the shuffle); the copies write the same bytes, at the same time
        path = posixpath.join(folder, f"{batch_id:012d}.state")
        write_atomically(fs, path, data, racing=True)
        entries = listing(fs, folder)
        versions = sorted(numbered_paths(fs, folder, ".state", entries))
        old = [old_path for _, old_path in versions[:-KEEP_SNAPSHOTS]]
        remove(fs, old + stale_temporaries(entries, batch_id))  # a racing copy may be first


def state_bytes(checkpoint: str) -> int:
    """Bytes of the newest snapshot of every grouping partition of a query (0: no graph)."""
    fs, root = filesystem(QueryCheckpoint(checkpoint).graph_url)
    newest: dict[str, tuple[str, int]] = {}
    try:
        found = fs.glob(posixpath.join(root, "*", "part-*", "*.state"), detail=True)
    except FileNotFoundError:
        return 0
    for path, info in found.items():
        folder = posixpath.dirname(path)
        if folder not in newest or path > newest[folder][0]:
            newest[folder] = (path, int(info.get("size") or 0))
    return sum(size for _, size in newest.values())


class StateBytesGauge:
    """:func:`state_bytes` per query checkpoint, listed at most once per ``every`` seconds.

    Listing the snapshots is a directory walk (one request per folder on object stores); a
    gauge read at every commit would pay it per batch. The value is at most ``every`` seconds
    old instead.
    """

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._known: dict[str, tuple[float, int]] = {}  # checkpoint -> (when listed, bytes)

    def of(self, checkpoint: str) -> int:
        """The state's bytes, listed again if the last listing is ``every`` seconds old."""
        now = time.monotonic()
        known = self._known.get(checkpoint)
        if known is None or now - known[0] >= self.every:
            known = self._known[checkpoint] = (now, state_bytes(checkpoint))
        return known[1]


#: The sink's commit reads the state's size through this (one listing per 10 s at most).
STATE_BYTES = StateBytesGauge()
