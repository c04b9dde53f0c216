"""Items and state bytes per key slot per batch, written by the keyed tasks.

Layout: ``<graph>/slots/<batch>/<task>.json`` (items per slot) and, next to it,
``<task>.bytes`` (each slot's snapshot bytes before and after the batch, and its keys after
it) (:class:`SlotLoads`).
The sizes cost nothing to measure: the task holds each snapshot when it restores and saves it.
The slots' newest snapshot sizes can also be listed from the groupings' slot stores
(:func:`slot_bytes`, one listing: what a migration step bounds its bytes by).
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

    def write(
        self,
        batch_id: int,
        task: str,
        loads: Mapping[int, int],
        sizes: Mapping[int, tuple[int, ...]] | None = None,
    ) -> None:
        """One task's counts, and its slots' (before, after[, keys]) state bytes if given.

        A retried task overwrites its files with the same bytes.
        """
        fs, root = filesystem(self.url)
        folder = posixpath.join(root, f"{batch_id:012d}")
        if sizes is not None:  # first: a reader that sees the counts finds the sizes too
            data = json.dumps({str(k): list(v) for k, v in sorted(sizes.items())}).encode()
            write_atomically(fs, posixpath.join(folder, f"{task}.bytes"), data, racing=True)
        data = json.dumps({str(k): v for k, v in sorted(loads.items())}).encode()
        write_atomically(fs, posixpath.join(folder, f"{task}.json"), data, racing=True)

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

    def read_sizes(self, batch_id: int) -> dict[int, tuple[int, int]]:
        """Every slot's (before, after) state bytes in a batch, summed over its tasks.

        A slot is held by one task per grouping: with several groupings, its bytes are theirs
        together.
        """
        return {s: (v[0], v[1]) for s, v in self.read_slots(batch_id).items()}

    def read_slots(self, batch_id: int) -> dict[int, tuple[int, int, int]]:
        """Every slot's (before, after) state bytes and keys after, summed over its tasks."""
        fs, root = filesystem(self.url)
        sizes: dict[int, tuple[int, int, int]] = {}
        for path in listing(fs, posixpath.join(root, f"{batch_id:012d}")):
            if path.endswith(".bytes"):
                for slot, values in json.loads(fs.cat_file(path)).items():
                    seen = sizes.get(int(slot), (0, 0, 0))
                    keys = int(values[2]) if len(values) > 2 else 0
                    sizes[int(slot)] = (
                        seen[0] + int(values[0]),
                        seen[1] + int(values[1]),
                        seen[2] + keys,
                    )
        return sizes


def slot_bytes(state_url: str) -> dict[int, int]:
    """Bytes of each slot's newest snapshot, summed over the groupings (one listing).

    Slot snapshots live in ``<state>/<grouping>.slots/part-<slot>/<batch>.state``
    (:class:`flamestream.spark.exec.general.keyed_state.SlotSnapshots`).
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
