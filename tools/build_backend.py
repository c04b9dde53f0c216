"""setuptools' PEP 517 backend, with PySpark among a wheel's build requirements.

``setup.py`` compiles the JVM shim against the installed PySpark's jars (Spark 4.3 is not on
Maven Central), so an isolated wheel build (``pip wheel .``) needs PySpark in its build
environment. An editable install (``make setup``) bundles no jar, so it does not get it.
"""

from __future__ import annotations

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the backend's other hooks, unchanged)

#: The PySpark the shim is built against (the range ``setup.cfg`` installs).
PYSPARK = "pyspark>=4.3,<4.4"


def get_requires_for_build_wheel(config_settings: dict[str, str] | None = None) -> list[str]:
    """The requirements setuptools states for a wheel, and PySpark."""
    return [*_setuptools.get_requires_for_build_wheel(config_settings), PYSPARK]
