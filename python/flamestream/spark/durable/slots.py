"""Items per key slot per batch, written by the keyed tasks.

Layout: ``<graph>/slots/<batch>/<task>.json`` (:class:`SlotLoads`); the slots' snapshot sizes
(:func:`slot_bytes`) are read from the groupings' slot stores.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping

from flamestream.spark.durable import (
    filesystem,
    listing,
    numbered_paths,
    remove,
    write_atomically,
)


class SlotLoads:
    """Items per slot per batch, written by the keyed tasks (``<state>/slots/<batch>/``)."""

    def __init__(self, state_url: str) -> None:
        self.url = state_url.rstrip("/") + "/slots"

    def write(self, batch_id: int, task: str, loads: Mapping[int, int]) -> None:
        """One task's counts (a retried task overwrites its file)."""
        fs, root = filesystem(self.url)
        path = posixpath.join(root, f"{batch_id:012d}", f"{task}.json")
        data = json.dumps({str(k): v for k, v in sorted(loads.items())}).encode()
        write_atomically(fs, path, data, racing=True)

    def forget_before(self, batch_id: int) -> None:
        """Remove the counts of batches before ``batch_id`` (the control channel, once judged)."""
        fs, root = filesystem(self.url)
        old = [path for batch, path in numbered_paths(fs, root) if batch < batch_id]
        remove(fs, old, recursive=True)

    def read(self, batch_id: int) -> dict[int, int] | None:
        """All tasks' counts of a batch summed (None if no task wrote any)."""
        fs, root = filesystem(self.url)
        folder = posixpath.join(root, f"{batch_id:012d}")
        entries = listing(fs, folder)
        if not entries:
            return None
        total: dict[int, int] = {}
        for path in entries:
            if path.endswith(".json"):
                for slot, items in json.loads(fs.cat_file(path)).items():
                    total[int(slot)] = total.get(int(slot), 0) + int(items)
        return total


def slot_bytes(state_url: str) -> dict[int, int]:
    """Bytes of each slot's newest snapshot, summed over the groupings (one listing).

    Slot snapshots live in ``<state>/<grouping>.slots/part-<slot>/<batch>.state``
    (:class:`flamestream.spark.exec.keyed_state.SlotSnapshots`).
    """
    fs, root = filesystem(state_url)
    try:
        found = fs.glob(posixpath.join(root, "*.slots", "part-*", "*.state"), detail=True)
    except FileNotFoundError:
        return {}
    newest: dict[str, tuple[str, int]] = {}
    for path, info in found.items():
        folder = posixpath.dirname(path)
        if folder not in newest or path > newest[folder][0]:
            newest[folder] = (path, int(info.get("size") or 0))
    out: dict[int, int] = {}
    for folder, (_, size) in newest.items():
        slot = int(posixpath.basename(folder).removeprefix("part-"))
        out[slot] = out.get(slot, 0) + size
    return out
