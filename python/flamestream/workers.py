"""Compiled bytecode inside Spark's Python zips, so fresh Python processes skip compiling.

Spark starts every Python process (the streaming source runner, data-source planners,
workers) with ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on its
``PYTHONPATH``. Those zips hold ``.py`` sources only, so each fresh interpreter compiles the
pyspark modules it imports again: about three times the CPU of loading bytecode, and enough,
on a loaded machine, to miss the 10 s Spark gives the source runner to connect back.

Python's ``zipimport`` loads a ``pkg/mod.pyc`` stored beside ``pkg/mod.py`` in the same zip
(the legacy layout, not ``__pycache__``) when its header is valid for the running
interpreter. :func:`precompile_archive` adds such a ``.pyc`` for every ``.py`` of a zip:

* The ``.pyc`` files are hash-based and *unchecked* (PEP 552): 3.11's ``zipimport`` then
  trusts them without reading the source. Timestamp-based ones would be compared with the
  ``.py`` entry's DOS time through ``time.mktime``, i.e. in the local time zone, and go stale
  whenever a process runs under another ``TZ``. The source hash is still recorded, so
  ``python --check-hash-based-pycs always`` validates them. A ``.pyc`` whose magic number
  does not match the interpreter (another Python version) is skipped by ``zipimport``, which
  then compiles the ``.py`` as before.
* Every original entry stays byte-identical and at its offset: the new zip is a copy of the
  old one with the ``.pyc`` entries appended after the last original entry and a new central
  directory written after them. A process that read the old zip's directory (``zipimport``
  caches it per process and reopens the file on each import) still finds every original
  entry where its cached directory says.
* The rewrite is atomic (a temporary file in the same directory, then a rename) and
  idempotent: the zip carries a marker entry, :data:`MARKER`; a zip whose marker matches this
  interpreter and format is left untouched. Replacing the zip (reinstalling pyspark) drops the
  marker with the ``.pyc`` files, and the next run precompiles the new zip.
* Code objects are compiled with the file name ``zipimport`` itself would give them when the
  zip is on ``sys.path`` under its real path (``os.path.realpath``, the spelling Spark's
  ``SPARK_HOME`` of a pip install uses), so tracebacks and pyspark's own frame filtering see
  the same file names as before.

Command line (the project's setup runs ``precompile``)::

    python -m flamestream.workers precompile [PYSPARK_DIR]
"""

from __future__ import annotations

import copy
import importlib.util
import json
import marshal
import os
import shutil
import sys
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flamestream.errors import FlameStreamError

#: The entry that marks a zip as precompiled by this module (at the zip's root).
MARKER = "flamestream-precompiled.json"
#: The marker's format; a change makes the next run rebuild the ``.pyc`` entries.
FORMAT = 1
#: PEP 552 flags of the ``.pyc`` header: hash-based (bit 0), check the source (bit 1).
_HASH_BASED = 0b01
_CHECK_SOURCE = 0b10
#: How the ``.pyc`` entries are stored. Uncompressed: a process reads only the few MB of the
#: modules it imports, and skipping zlib saved ~10% of pyspark's import CPU (zip 28 MB
#: instead of 11 MB with deflate).
PYC_COMPRESSION = zipfile.ZIP_STORED


class PrecompileError(FlameStreamError):
    """A zip of Spark's Python sources could not be found, read or rewritten."""


@dataclass(frozen=True)
class ArchiveResult:
    """What :func:`precompile_archive` did to one zip."""

    path: Path
    #: ``"precompiled"`` (``.pyc`` added), ``"rebuilt"`` (stale ``.pyc`` replaced) or
    #: ``"unchanged"`` (already precompiled for this interpreter: nothing written).
    status: str
    #: ``.pyc`` entries the zip holds for its ``.py`` entries after the run.
    compiled: int
    #: ``.py`` entries left without ``.pyc`` (they do not compile), as ``name: error``.
    skipped: tuple[str, ...] = ()
    size_before: int = 0
    size_after: int = 0
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        """Whether the zip was rewritten."""
        return self.status != "unchanged"

    def describe(self) -> str:
        """One line for the command line."""
        text = f"{self.path}: {self.status}, {self.compiled} modules compiled"
        if self.changed:
            text += (
                f" ({self.size_before / 1e6:.2f} MB -> {self.size_after / 1e6:.2f} MB,"
                f" {self.seconds:.1f} s)"
            )
        if self.skipped:
            text += f"; {len(self.skipped)} left as source: " + "; ".join(self.skipped)
        return text


@dataclass(frozen=True)
class Report:
    """What :func:`precompile_spark_python` did, one :class:`ArchiveResult` per zip."""

    archives: tuple[ArchiveResult, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        """Whether any zip was rewritten."""
        return any(archive.changed for archive in self.archives)

    def describe(self) -> str:
        """The report for the command line, one line per zip."""
        return "\n".join(archive.describe() for archive in self.archives)


def _marker_body(originals: int, compiled: int, checked: bool) -> dict[str, Any]:
    """The marker's content: what was compiled, by which interpreter, from how many entries."""
    return {
        "tool": "flamestream.workers",
        "format": FORMAT,
        "magic": importlib.util.MAGIC_NUMBER.hex(),
        "python": sys.version.split()[0],
        "invalidation": "checked-hash" if checked else "unchecked-hash",
        # The original entries come first in the central directory; what follows was added.
        "original_entries": originals,
        "compiled": compiled,
    }


def _read_marker(archive: zipfile.ZipFile, path: Path) -> dict[str, Any] | None:
    """The zip's marker, or ``None`` when it has none."""
    try:
        raw = archive.read(MARKER)
    except KeyError:
        return None
    try:
        body = json.loads(raw)
    except ValueError as exc:
        msg = f"{path}: marker entry {MARKER!r} is not JSON ({exc})"
        raise PrecompileError(msg) from exc
    if not isinstance(body, dict) or not isinstance(body.get("original_entries"), int):
        msg = f"{path}: marker entry {MARKER!r} lacks 'original_entries': {body!r}"
        raise PrecompileError(msg)
    return body


def _pyc(source: bytes, filename: str, checked: bool) -> bytes:
    """A hash-based ``.pyc`` (PEP 552) of ``source``, compiled as ``zipimport`` would."""
    # zipimport normalises line endings before compiling; the hash covers the raw bytes,
    # which is what zipimport hashes when it checks a source.
    text = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    with warnings.catch_warnings():
        # Invalid escape sequences and the like: zipimport would warn at import, not us.
        warnings.simplefilter("ignore")
        code = compile(text, filename, "exec", dont_inherit=True, optimize=0)
    flags = _HASH_BASED | (_CHECK_SOURCE if checked else 0)
    return b"".join(
        (
            importlib.util.MAGIC_NUMBER,
            flags.to_bytes(4, "little"),
            importlib.util.source_hash(source),
            marshal.dumps(code),
        )
    )


def _compile_entries(
    archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], root: str, checked: bool
) -> tuple[list[tuple[zipfile.ZipInfo, bytes]], list[str]]:
    """``(.pyc entry, bytes)`` for each ``.py`` in ``infos``, and the ones that do not compile."""
    names = {info.filename for info in infos}
    compiled: list[tuple[zipfile.ZipInfo, bytes]] = []
    skipped: list[str] = []
    for info in infos:
        name = info.filename
        if not name.endswith(".py") or info.is_dir():
            continue
        if name + "c" in names:
            # The zip ships its own bytecode for this module; leave it be.
            continue
        try:
            data = _pyc(archive.read(info), f"{root}{os.sep}{name}", checked)
        except (SyntaxError, ValueError) as exc:
            skipped.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        entry = zipfile.ZipInfo(name + "c", date_time=info.date_time)
        entry.compress_type = PYC_COMPRESSION
        entry.external_attr = 0o644 << 16
        compiled.append((entry, data))
    return compiled, skipped


def _write_entries(
    archive: zipfile.ZipFile, entries: list[tuple[zipfile.ZipInfo, bytes]], marker: dict[str, Any]
) -> None:
    """Append the ``.pyc`` entries, then the marker, to an archive open for writing."""
    for info, data in entries:
        archive.writestr(info, data)
    stamp = zipfile.ZipInfo(MARKER, date_time=time.localtime()[:6])
    stamp.external_attr = 0o644 << 16
    archive.writestr(stamp, json.dumps(marker, indent=1, sort_keys=True) + "\n")


def precompile_archive(path: Path, *, checked: bool = False) -> ArchiveResult:
    """Add a valid ``.pyc`` beside every ``.py`` of the zip at ``path`` (see the module doc).

    ``checked`` writes checked hash-based ``.pyc`` files instead: ``zipimport`` then reads and
    hashes each source on import (safe against an edited ``.py`` entry, a little slower).
    Raises :class:`PrecompileError` when the zip is missing, not a zip, or cannot be written.
    """
    started = time.perf_counter()
    path = Path(path)
    if not path.is_file():
        msg = f"no zip to precompile at {path}"
        raise PrecompileError(msg)
    # The name zipimport gives a module's code when the zip is on sys.path by its real path.
    root = os.path.realpath(path)
    size_before = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            marker = _read_marker(archive, path)
            if marker is None:
                originals = infos
            else:
                if marker == _marker_body(
                    marker["original_entries"], marker.get("compiled", -1), checked
                ):
                    return ArchiveResult(
                        path, "unchanged", marker["compiled"], size_before=size_before
                    )
                originals = infos[: marker["original_entries"]]
            entries, skipped = _compile_entries(archive, originals, root, checked)
            body = _marker_body(len(originals), len(entries), checked)
            if marker is None:
                status = "precompiled"
                _replace(path, lambda tmp: _append(path, tmp, entries, body))
            else:
                status = "rebuilt"
                _replace(path, lambda tmp: _rewrite(archive, originals, tmp, entries, body))
    except zipfile.BadZipFile as exc:
        msg = f"{path} is not a readable zip: {exc}"
        raise PrecompileError(msg) from exc
    return ArchiveResult(
        path,
        status,
        len(entries),
        tuple(skipped),
        size_before,
        path.stat().st_size,
        time.perf_counter() - started,
    )


def _append(
    source: Path, tmp: Path, entries: list[tuple[zipfile.ZipInfo, bytes]], body: dict[str, Any]
) -> None:
    """Copy ``source`` to ``tmp`` and append the entries: original bytes stay at their offsets."""
    shutil.copyfile(source, tmp)
    with zipfile.ZipFile(tmp, "a") as archive:
        _write_entries(archive, entries, body)


def _rewrite(
    archive: zipfile.ZipFile,
    originals: list[zipfile.ZipInfo],
    tmp: Path,
    entries: list[tuple[zipfile.ZipInfo, bytes]],
    body: dict[str, Any],
) -> None:
    """A new zip at ``tmp``: the original entries (same content), then fresh ``.pyc`` entries.

    Only for a zip precompiled before by another interpreter or format: its stale ``.pyc``
    entries cannot be cut out in place, so the original entries are copied one by one (same
    names, content, times and compression; their offsets may move).
    """
    with zipfile.ZipFile(tmp, "w") as out:
        for info in originals:
            # A copy: writing sets the entry's offset, which belongs to the archive read.
            out.writestr(copy.copy(info), archive.read(info))
        _write_entries(out, entries, body)


def _replace(path: Path, build: Callable[[Path], None]) -> None:
    """Run ``build(tmp)`` on a temporary file beside ``path``, then rename it over ``path``."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        build(tmp)
        shutil.copymode(path, tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        msg = f"could not rewrite {path} (via {tmp}): {exc}"
        raise PrecompileError(msg) from exc
    finally:
        tmp.unlink(missing_ok=True)


def spark_python_dir(pyspark_dir: Path | None = None) -> Path:
    """``pyspark/python/lib`` of the given (else the installed) pyspark: where Spark's zips are.

    Looks pyspark up without importing it, and skips a ``pyspark`` found inside a zip (as under
    Spark's own ``PYTHONPATH``): only an installed package directory holds the zips.
    """
    if pyspark_dir is None:
        spec = importlib.util.find_spec("pyspark")
        locations = list(spec.submodule_search_locations or []) if spec else []
        candidates = [Path(p) / "python" / "lib" for p in locations]
    else:
        candidates = [Path(pyspark_dir) / "python" / "lib"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    looked = ", ".join(map(str, candidates)) or "no pyspark package importable"
    msg = f"pyspark's python/lib directory (with pyspark.zip) not found; looked at: {looked}"
    raise PrecompileError(msg)


def precompile_spark_python(pyspark_dir: Path | None = None, *, checked: bool = False) -> Report:
    """Precompile Spark's Python zips (``pyspark.zip``, ``py4j-*-src.zip``) in place.

    ``pyspark_dir`` is the pyspark package directory (``site-packages/pyspark``); by default
    the one this interpreter would import. Idempotent: zips already precompiled for this
    interpreter are left untouched. See :func:`precompile_archive`.
    """
    lib = spark_python_dir(pyspark_dir)
    zips = sorted(lib.glob("*.zip"))
    if not any(p.name == "pyspark.zip" for p in zips):
        msg = f"no pyspark.zip in {lib} (found: {', '.join(p.name for p in zips) or 'no zips'})"
        raise PrecompileError(msg)
    return Report(tuple(precompile_archive(p, checked=checked) for p in zips))


#: Per archive, the file's (inode, size, mtime) when ``zipimport``'s cache last read it.
_read_at: dict[str, tuple[int, int, int]] = {}


def share_zip_directories() -> None:
    """Have ``importlib.invalidate_caches()`` read an unchanged zip's directory once.

    Once per archive, not once per importer; for this process and the ones it forks
    (idempotent).

    Spark's Python workers call ``importlib.invalidate_caches()`` at every task
    (``pyspark.worker_util.setup_spark_files``), and the source runner at its start. Python
    keeps one ``zipimporter`` per package directory inside a zip (``pyspark.zip``,
    ``pyspark.zip/pyspark/sql``, ...: 16 once ``pyspark.worker`` is imported), and 3.11's
    ``zipimporter.invalidate_caches`` makes each of them parse the whole zip's central
    directory again, in Python: about 0.12 s of CPU per task for ``pyspark.zip``. Here an
    importer whose archive has the same inode, size and modification time as when the shared
    cache (``zipimport._zip_directory_cache``) last read it takes that directory instead;
    any change to the file reads it again, as before.
    """
    import zipimport

    if getattr(zipimport.zipimporter.invalidate_caches, "shares_directories", False):
        return
    reread = zipimport.zipimporter.invalidate_caches
    cache: dict[str, Any] = zipimport._zip_directory_cache  # type: ignore[attr-defined]

    def invalidate_caches(self: Any) -> None:
        try:
            info = os.stat(self.archive)
        except OSError:
            reread(self)
            return
        signature = (info.st_ino, info.st_size, info.st_mtime_ns)
        if _read_at.get(self.archive) == signature and self.archive in cache:
            self._files = cache[self.archive]
            return
        reread(self)
        _read_at[self.archive] = signature

    invalidate_caches.shares_directories = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    """``python -m flamestream.workers precompile [PYSPARK_DIR]``."""
    if not argv or argv[0] != "precompile" or len(argv) > 2:
        print(__doc__)
        return 2
    try:
        report = precompile_spark_python(Path(argv[1]) if len(argv) > 1 else None)
    except PrecompileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
