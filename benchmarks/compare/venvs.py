"""Virtualenvs for the peers and the plot, made once under ``<root>/<package>-<version>``.

Each gets ``pip install <package>==<version>`` and a stamp file naming that requirement;
a virtualenv with a matching stamp is reused without running pip. A failed install raises
:class:`SetupError` with pip's last lines.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.compare.errors import SetupError

#: The file in a virtualenv that names the requirement installed into it.
STAMP = ".flamestream-compare"

#: Prints the version of the distribution named by argv[1].
VERSION = "import sys, importlib.metadata as m; print(m.version(sys.argv[1]))"


def _run(command: list[str], what: str, timeout: float) -> str:
    try:
        done = subprocess.run(  # noqa: S603
            command, capture_output=True, text=True, check=False, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        msg = f"venvs: {what} failed: {e}; hint: rerun, or remove the virtualenv to recreate it"
        raise SetupError(msg) from e
    if done.returncode:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        msg = f"venvs: {what} exited with {done.returncode}: {tail}"
        raise SetupError(msg)
    return done.stdout


def ensure(root: Path, package: str, version: str, *, timeout: float = 1800.0) -> Path:
    """The Python of a virtualenv holding ``package==version`` (created or reused)."""
    requirement = f"{package}=={version}"
    home = root / f"{package}-{version}"
    python, stamp = home / "bin" / "python", home / STAMP
    if python.exists() and stamp.exists() and stamp.read_text().strip() == requirement:
        return python
    if not python.exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "venv", str(home)], f"creating {home}", timeout)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, requirement], f"pip install {requirement} into {home}", timeout)
    stamp.write_text(requirement + "\n")
    return python


def installed(python: Path, package: str) -> str:
    """The version of ``package`` that ``python``'s environment holds."""
    return _run([str(python), "-c", VERSION, package], f"{package}'s version", 120.0).strip()
