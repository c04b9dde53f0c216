"""Precompiling Spark's Python zips: entries kept, bytecode used, a second run a no-op."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flamestream.workers import (
    MARKER,
    PrecompileError,
    main,
    precompile_archive,
    precompile_spark_python,
)

SOURCES = {
    "pkg/__init__.py": b'"""A package."""\nNAME = "pkg"\n',
    "pkg/mod.py": b"import pkg\r\nVALUE = pkg.NAME + '.mod'\r\n",
    "pkg/sub/__init__.py": b"",
    "pkg/sub/deep.py": b"def f():\n    return 42\n",
    "pkg/data.json": b'{"not": "python"}\n',
}

# A fresh interpreter that imports from the zip with compile() refusing the zip's sources:
# zipimport compiles a .py through the builtin compile(), so the import only succeeds if every
# module came from a .pyc in the zip.
CHILD = """
import builtins, sys
archive = sys.argv[1]
real = builtins.compile
def guard(source, filename, *args, **kwargs):
    if str(filename).startswith(archive):
        raise RuntimeError(f"compiled from source: {filename}")
    return real(source, filename, *args, **kwargs)
builtins.compile = guard
sys.path.insert(0, archive)
import pkg.mod, pkg.sub.deep
print(pkg.mod.VALUE, pkg.sub.deep.f(), pkg.__file__, pkg.mod.__file__, pkg.sub.deep.__file__)
"""


def make_zip(path: Path, sources: dict[str, bytes] = SOURCES) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("pkg/"), b"")
        for name, data in sources.items():
            archive.writestr(name, data)
    return path


def import_from(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def central_directory_offset(data: bytes) -> int:
    end = data.rfind(b"PK\x05\x06")
    (offset,) = struct.unpack("<I", data[end + 16 : end + 20])
    return int(offset)


def entry_fields(info: zipfile.ZipInfo) -> tuple[object, ...]:
    return (
        info.filename,
        info.header_offset,
        info.CRC,
        info.compress_type,
        info.compress_size,
        info.file_size,
        info.date_time,
    )


def test_precompiled_zip_keeps_its_entries_and_a_fresh_interpreter_uses_the_bytecode(
    tmp_path: Path,
) -> None:
    path = make_zip(tmp_path / "lib.zip")
    before = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        original = [entry_fields(info) for info in archive.infolist()]

    # The control: from the plain zip, the guard trips (the test can tell source from bytecode).
    control = import_from(path)
    assert control.returncode != 0
    assert "compiled from source" in control.stderr

    result = precompile_archive(path)
    assert (result.status, result.compiled, result.skipped) == ("precompiled", 4, ())
    assert result.changed

    after = path.read_bytes()
    # Every original local record (header + data) is byte-identical and at its old offset.
    assert after[: central_directory_offset(before)] == before[: central_directory_offset(before)]
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        assert [entry_fields(info) for info in infos[: len(original)]] == original
        for name, data in SOURCES.items():
            assert archive.read(name) == data
        added = {info.filename for info in infos[len(original) :]}
        assert archive.testzip() is None
        marker = json.loads(archive.read(MARKER))
    assert added == {name + "c" for name in SOURCES if name.endswith(".py")} | {MARKER}
    assert marker["original_entries"] == len(original)

    child = import_from(path)
    assert child.returncode == 0, child.stderr
    value, answer, *files = child.stdout.split()
    assert (value, answer) == ("pkg.mod", "42")
    assert all(f.endswith(".pyc") and f.startswith(str(path)) for f in files)


def test_the_bytecode_passes_pythons_own_source_hash_check(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "lib.zip")
    precompile_archive(path)
    code = "import sys; sys.path.insert(0, sys.argv[1]); import pkg.mod; print(pkg.mod.__file__)"
    child = subprocess.run(
        [sys.executable, "-I", "--check-hash-based-pycs", "always", "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert child.stdout.strip().endswith("pkg/mod.pyc")


def test_a_second_run_is_a_no_op(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "lib.zip")
    precompile_archive(path)
    stat, data = path.stat(), path.read_bytes()

    again = precompile_archive(path)

    assert (again.status, again.compiled, again.changed) == ("unchanged", 4, False)
    assert path.read_bytes() == data
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert not [p for p in tmp_path.iterdir() if p != path]  # no temporary file left behind


def test_a_module_that_does_not_compile_stays_source_only(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "lib.zip", {**SOURCES, "pkg/broken.py": b"def (:\n"})

    result = precompile_archive(path)

    assert result.compiled == 4
    assert len(result.skipped) == 1
    assert result.skipped[0].startswith("pkg/broken.py: SyntaxError")
    with zipfile.ZipFile(path) as archive:
        assert "pkg/broken.pyc" not in archive.namelist()


def test_bytecode_of_another_interpreter_is_replaced(tmp_path: Path) -> None:
    path = make_zip(tmp_path / "lib.zip")
    precompile_archive(path)
    # Pretend another Python wrote the .pyc entries: a foreign magic number, unusable bytecode.
    stale = tmp_path / "stale.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(stale, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == MARKER:
                data = json.dumps({**json.loads(data), "magic": "00000000"}).encode()
            elif info.filename.endswith(".pyc"):
                data = b"\0\0\0\0" + data[4:]
            out.writestr(info, data)
    stale.replace(path)
    assert import_from(path).returncode != 0  # the bad bytecode is skipped, the source compiled

    result = precompile_archive(path)

    assert (result.status, result.compiled) == ("rebuilt", 4)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        assert len(names) == len(set(names))
        for name, data in SOURCES.items():
            assert archive.read(name) == data
    child = import_from(path)
    assert child.returncode == 0, child.stderr
    assert precompile_archive(path).status == "unchanged"


def test_precompile_spark_python_handles_the_zips_of_a_pyspark_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    make_zip(lib / "pyspark.zip")
    make_zip(lib / "py4j-0.0-src.zip", {"py4j/__init__.py": b"X = 1\n"})

    report = precompile_spark_python(tmp_path / "pyspark")

    assert [(a.path.name, a.status, a.compiled) for a in report.archives] == [
        ("py4j-0.0-src.zip", "precompiled", 1),
        ("pyspark.zip", "precompiled", 4),
    ]
    assert report.changed
    assert main(["precompile", str(tmp_path / "pyspark")]) == 0
    out = capsys.readouterr().out
    assert "pyspark.zip: unchanged, 4 modules compiled" in out


def test_missing_zips_are_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(PrecompileError, match="python/lib directory"):
        precompile_spark_python(tmp_path)
    (tmp_path / "python" / "lib").mkdir(parents=True)
    with pytest.raises(PrecompileError, match=r"no pyspark\.zip in"):
        precompile_spark_python(tmp_path)
    (tmp_path / "python" / "lib" / "pyspark.zip").write_bytes(b"not a zip")
    with pytest.raises(PrecompileError, match="is not a readable zip"):
        precompile_spark_python(tmp_path)


# A fresh interpreter importing from the zip, sharing zip directories, then counting how often
# invalidate_caches parses the zip's directory: unchanged, and after the zip gained a module.
SHARING = """
import importlib, os, sys, zipfile, zipimport
archive = sys.argv[1]
sys.path.insert(0, archive)
import pkg.mod, pkg.sub.deep
from flamestream.workers import share_zip_directories
reads = []
real = zipimport._read_directory
def counted(path):
    reads.append(path)
    return real(path)
zipimport._read_directory = counted
importers = sum(1 for p in sys.path_importer_cache if p.startswith(archive))
share_zip_directories()
share_zip_directories()
importlib.invalidate_caches()
first = len(reads)
importlib.invalidate_caches()
again = len(reads) - first
read, write = os.pipe()  # a forked child (a warm server's) reads nothing either
if os.fork() == 0:
    before = len(reads)
    importlib.invalidate_caches()
    os.write(write, str(len(reads) - before).encode())
    os._exit(0)
os.wait()
forked = os.read(read, 16).decode()
with zipfile.ZipFile(archive, "a") as out:
    out.writestr("pkg/added.py", "VALUE = 'added'\\n")
st = os.stat(archive)
os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
importlib.invalidate_caches()
import pkg.added
print(importers, first, again, forked, len(reads) - first - again, pkg.added.VALUE)
"""


def test_invalidate_caches_reads_an_unchanged_zip_once_and_a_changed_one_again(tmp_path: Path):
    archive = make_zip(tmp_path / "shared.zip")
    done = subprocess.run(
        [sys.executable, "-c", SHARING, str(archive)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    importers, first, again, forked, after_change, value = done.stdout.split()
    assert int(importers) >= 3  # the zip, pkg/ and pkg/sub/: one importer each
    assert (int(first), int(again), int(forked), value) == (1, 0, 0, "added")
    assert int(after_change) == 1


_POOL_PROBE = """
import pyarrow as pa
from flamestream.spark.exec.worker.worker_setup import setup_worker, use_jemalloc
setup_worker()  # not in a Spark task: nothing changes
print(pa.default_memory_pool().backend_name, use_jemalloc(), pa.default_memory_pool().backend_name)
"""


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [(None, "mimalloc True jemalloc"), ("system", "system False system")],
)
def test_workers_allocate_with_jemalloc_unless_the_user_chose_a_pool(
    chosen: str | None, expected: str
) -> None:
    """Outside a task nothing changes; ``use_jemalloc`` switches, unless the user's variable
    names a pool, which is kept."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    run = subprocess.run(
        [sys.executable, "-c", _POOL_PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert run.stdout.split() == expected.split()
