"""File operations shared by every durable store (any fsspec URL), and their commit protocol.

Stores are written on two kinds of file system, told apart in one place
(:func:`renames_atomically`):

* **POSIX** (local disk): a file is written under a temporary name and renamed, which is
  atomic and cheap; a crash leaves at most the temporary, which :func:`stale_temporaries`
  finds for the store's next sweep.
* **object stores** (S3, GCS, Azure, and any other): there is no rename (``mv`` is a copy and
  a delete), but an object appears whole or not at all when its one PUT (or its multipart
  upload) completes. A file is written once, straight under its name; a crash mid-write leaves
  nothing a listing shows.

Either way every write below is atomic for its readers: they see the whole file or none. What
is committed is then said by one such write (a marker, a manifest): see docs/storage.md.
"""

from __future__ import annotations

import contextlib
import inspect
import posixpath
import uuid
from collections.abc import Iterator
from typing import Any

import fsspec
from fsspec.spec import AbstractBufferedFile

#: fsspec protocols whose ``mv`` of a file is an atomic rename (POSIX file systems).
RENAMING_PROTOCOLS = frozenset({"file", "local"})

#: The suffix of every temporary name (a rename's source, on POSIX file systems only).
TEMPORARY = ".tmp"


def filesystem(url: str) -> tuple[Any, str]:
    """``(file system, root path)`` of an fsspec URL."""
    fs, root = fsspec.core.url_to_fs(url)
    return fs, root


def renames_atomically(fs: Any) -> bool:
    """Whether ``fs`` renames a file atomically (the one capability stores decide by).

    Where it does, a write goes through a temporary name and a rename; where it does not (an
    object store), a write goes straight to its name, once.
    """
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return any(p in RENAMING_PROTOCOLS for p in protocols)


def write_atomically(fs: Any, path: str, data: bytes, *, racing: bool = False) -> None:
    """Write ``path`` all at once: a reader (or a restart after a crash) never sees half of it.

    On a POSIX file system through a temporary name and a rename. ``racing=True`` is for
    writers that may run at the same time (a task and its speculative or retried copy,
    writing the same bytes): each gets its own temporary name. Without it the temporary name
    is fixed, so a crash leaves one file that the next attempt overwrites. On an object store
    with one PUT (racing writers of the same bytes: the last one's object stays, whole).
    """
    with open_atomically(fs, path, racing=racing) as out:
        out.write(data)


@contextlib.contextmanager
def open_atomically(fs: Any, path: str, *, racing: bool = False) -> Iterator[Any]:
    """A binary file to write ``path`` with, that appears whole when the block ends.

    If the block raises, nothing appears: the temporary is removed (POSIX) or the upload is
    discarded (an object store), and the error goes on.
    """
    folder = posixpath.dirname(path)
    if renames_atomically(fs):
        fs.makedirs(folder, exist_ok=True)
        # hidden (a dot first), as readers of an output folder skip such names
        hidden = posixpath.join(folder, "." + posixpath.basename(path))
        temporary = f"{hidden}.{uuid.uuid4().hex}{TEMPORARY}" if racing else hidden + TEMPORARY
        try:
            with fs.open(temporary, "wb") as out:
                yield out
        except BaseException:
            with contextlib.suppress(OSError):
                fs.rm(temporary)
            raise
        fs.mv(temporary, path)
        return
    out = fs.open(path, "wb")
    try:
        yield out
    except BaseException:
        abandon(fs, out, path)
        raise
    out.close()


def abandon(fs: Any, out: Any, path: str) -> None:
    """Drop the file ``out`` being written at ``path``, so that nothing of it appears.

    An object store's upload is discarded unfinished (s3fs aborts its multipart upload): the
    object never exists. Elsewhere the file is closed and removed.
    """
    if isinstance(out, AbstractBufferedFile) and not renames_atomically(fs):
        out.discard()
        out.closed = True  # else closing it, even when collected, would upload the rest
        return
    out.close()
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path)


def publish_file(fs: Any, source: str, target: str) -> None:
    """Give the whole file ``source`` the name ``target`` (made visible), and drop ``source``.

    A rename on POSIX file systems; on an object store a server-side copy (the target appears
    whole) then a delete, so a crash between the two leaves both, ``target`` complete: running
    it again, or removing ``source``, finishes it.
    """
    if renames_atomically(fs):
        fs.mv(source, target)
        return
    fs.copy(source, target)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(source)


def numbered(fs: Any, folder: str, suffix: str = "") -> list[int]:
    """The numbers naming ``folder``'s entries (``<n>`` or ``<n><suffix>``), sorted.

    Entries of other names (temporary files, Spark's own) are left out; a missing folder has
    none.
    """
    return sorted(number for number, _ in numbered_paths(fs, folder, suffix))


def numbered_paths(
    fs: Any, folder: str, suffix: str = "", entries: list[str] | None = None
) -> list[tuple[int, str]]:
    """``(number, path)`` of ``folder``'s entries named ``<n>`` or ``<n><suffix>``.

    ``entries``: the folder's :func:`listing`, if the caller has it already.
    """
    found = []
    for path in listing(fs, folder) if entries is None else entries:
        name = posixpath.basename(path.rstrip("/"))
        if suffix:
            if not name.endswith(suffix):
                continue
            name = name[: -len(suffix)]
        if name.isdigit():
            found.append((int(name), path))
    return found


def listing(fs: Any, folder: str, prefix: str = "") -> list[str]:
    """The paths in ``folder`` whose names start with ``prefix`` (none if it does not exist).

    Listed afresh: object-store file systems cache listings, and a store lists what it (or a
    task on another host) has just written. Where the file system filters by a prefix on the
    server (s3fs), only the matching names are listed: a sink's output folder grows without
    end, a batch's names do not.
    """
    with contextlib.suppress(AttributeError):
        fs.invalidate_cache(folder)
    try:
        if prefix and "prefix" in inspect.signature(fs.find).parameters:
            return list(fs.find(folder, maxdepth=1, prefix=prefix))
        paths = fs.ls(folder, detail=False)
    except FileNotFoundError:
        return []
    return [p for p in paths if posixpath.basename(p.rstrip("/")).startswith(prefix)]


def listing_details(fs: Any, folder: str, prefix: str = "") -> list[dict[str, Any]]:
    """:func:`listing` with each entry's details: ``name``, ``size``, a modification time.

    One request on a store that lists by prefix with details (s3fs); elsewhere the names,
    then each one's details (on local disk a ``stat`` each, of the matching names only).
    """
    with contextlib.suppress(AttributeError):
        fs.invalidate_cache(folder)
    if prefix and "prefix" in inspect.signature(fs.find).parameters:
        try:
            found = fs.find(folder, maxdepth=1, prefix=prefix, detail=True)
        except FileNotFoundError:
            return []
        return [dict(info) for info in found.values()]
    return [dict(fs.info(path)) for path in listing(fs, folder, prefix)]


def stale_temporaries(paths: list[str], before: int) -> list[str]:
    """The temporaries among ``paths`` of files numbered before ``before``: left by crashes.

    A temporary is ``.<n>[.<suffix>][.<random>].tmp``; the writer of a file numbered (by
    batch) before ``before`` is done or dead, so its temporary will never be renamed.
    """
    stale = []
    for path in paths:
        name = posixpath.basename(path.rstrip("/"))
        number = name.lstrip(".").split(".")[0]
        if name.endswith(TEMPORARY) and number.isdigit() and int(number) < before:
            stale.append(path)
    return stale


def remove(fs: Any, paths: list[str], *, recursive: bool = False) -> None:
    """Remove ``paths`` (one request per path on object stores); gone already is fine."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=recursive)
