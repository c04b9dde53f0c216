"""File operations shared by every durable store (any fsspec URL)."""

from __future__ import annotations

import posixpath
import uuid
from typing import Any

import fsspec


def filesystem(url: str) -> tuple[Any, str]:
    """``(file system, root path)`` of an fsspec URL."""
    fs, root = fsspec.core.url_to_fs(url)
    return fs, root


def write_atomically(fs: Any, path: str, data: bytes, *, racing: bool = False) -> None:
    """Write ``path`` all at once: through a temporary name and a rename.

    Where the file system renames atomically, a reader (or a restart after a crash) never sees
    half a file. ``racing=True`` is for writers that may run at the same time (a task and its
    speculative or retried copy, writing the same bytes): each gets its own temporary name.
    Without it the temporary name is fixed, so a crash leaves one file that the next attempt
    overwrites, never a growing pile.
    """
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    temporary = f"{path}.{uuid.uuid4().hex}.tmp" if racing else f"{path}.tmp"
    with fs.open(temporary, "wb") as out:
        out.write(data)
    fs.mv(temporary, path)


def numbered(fs: Any, folder: str, suffix: str = "") -> list[int]:
    """The numbers naming ``folder``'s entries (``<n>`` or ``<n><suffix>``), sorted.

    Entries of other names (temporary files, Spark's own) are left out; a missing folder has
    none.
    """
    if not fs.exists(folder):
        return []
    found = []
    for path in fs.ls(folder, detail=False):
        name = posixpath.basename(path.rstrip("/"))
        if suffix:
            if not name.endswith(suffix):
                continue
            name = name[: -len(suffix)]
        if name.isdigit():
            found.append(int(name))
    return sorted(found)
