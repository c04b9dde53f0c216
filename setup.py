"""The build hook that puts the JVM shim jar into the wheel (``flamestream/jars/``).

The metadata lives in ``setup.cfg``; this file only extends ``build_py``. A wheel (``make wheel``,
``pip wheel .``, ``pip install .``) gets ``flamestream-shim-<version>.jar``, compiled by Maven
from ``jvm-shim/`` against the build environment's PySpark (``flamestream.jvm.build``; the
in-tree backend ``tools/build_backend.py`` adds PySpark to a wheel's build requirements), or
the jar ``$FLAMESTREAM_SHIM_JAR`` names, checked. Without Java and Maven (and no such jar) the
build fails, naming what is missing: a wheel without the jar would install, then run without
the plugin, its listeners and gauges. An editable install (``make setup``) gets no jar here:
``make setup`` builds it into ``pyspark/jars``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def shim_jar() -> Path:
    """The jar to bundle: ``$FLAMESTREAM_SHIM_JAR`` if set, else built from ``jvm-shim/``."""
    sys.path.insert(0, str(ROOT / "python"))
    from flamestream import jvm

    given = os.environ.get(jvm.JAR_ENV)
    try:
        if given:
            jar = Path(given).expanduser()
            jvm.check_jar(jar)
            return jar
        return jvm.build(install=False)
    except (jvm.ShimError, ImportError) as exc:
        msg = (
            f"flamestream: the wheel needs the JVM shim jar and it could not be made: {exc}. "
            "To build the wheel: Java 17 and Maven on PATH (`make wheel`), or "
            f"{jvm.JAR_ENV} naming a jar built by `python -m flamestream.jvm build`"
        )
        raise SystemExit(msg) from exc


class BuildPyWithShim(build_py):
    """``build_py``, then the shim jar into ``flamestream/jars/`` of the build tree."""

    def run(self) -> None:
        """Build the Python files, then add the jar (not for an editable install)."""
        super().run()
        if getattr(self, "editable_mode", False):
            return
        jar = shim_jar()
        target = Path(self.build_lib) / "flamestream" / "jars" / jar.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(jar, target)


setup(cmdclass={"build_py": BuildPyWithShim})
