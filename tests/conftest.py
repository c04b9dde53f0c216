"""Fixtures shared by every test folder."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from flamestream.testing.seaweedfs import SeaweedFS

# failed checks in the crash tests' shared helpers show the values compared
pytest.register_assert_rewrite("tests.crash")

from .examples import load_profile  # noqa: E402
from .sessions import local_session  # noqa: E402

load_profile()  # the fast unit tier draws fewer examples (tests/examples.py)

#: Folders and modules whose tests share a session fixture that is costly to make: one xdist
#: worker runs all of them, so that it is made once (one Kafka broker, one standalone cluster,
#: one run of the unbroken sketches). Every other test module is a unit of its own.
SHARED = {
    "tests/cluster/": "tests/cluster/",
    "tests/integration/": "tests/integration/",
    "tests/s3/": "tests/s3/",
    "tests/spark/test_graph_crash_recovery.py": "unbroken-sketches",
    "tests/spark/test_rescale_crash.py": "unbroken-sketches",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """With ``--dist loadfile`` (the default, pyproject.toml): a test module per worker at a
    time, as xdist's, but the modules of each :data:`SHARED` entry in one unit.

    Not ``--dist loadgroup`` with ``xdist_group`` marks: pytest-xdist 3.8 names a test's group
    by rewriting ``item._nodeid``, which pytest 9 no longer reads, so every test becomes a
    unit of its own (module fixtures made on both workers, two brokers, two clusters).
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return next((g for p, g in SHARED.items() if module.startswith(p)), module)

    return SharedFixtureScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def spark_scratch() -> Iterator[str]:
    """Spark's scratch folders (``SPARK_LOCAL_DIRS``) for this run, removed at its end.

    A JVM killed by a test (a crash test's driver, a Worker, an executor) never deletes its
    own, and each holds a copy of the jars in ``spark.jars``: left in the system's temporary
    folder they fill the disk over a day of runs. Set before the first session starts.
    """
    scratch = tempfile.mkdtemp(prefix="flamestream-tests-")
    before = os.environ.get("SPARK_LOCAL_DIRS")
    os.environ["SPARK_LOCAL_DIRS"] = scratch
    yield scratch
    if before is None:
        os.environ.pop("SPARK_LOCAL_DIRS", None)
    else:
        os.environ["SPARK_LOCAL_DIRS"] = before
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] Spark session for every test that needs Spark, stopped at the end."""
    session = local_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFS]:
    """A SeaweedFS S3 endpoint for the session, its address and credentials in the environment.

    One for the whole session, shared by the S3 suite and the integration tests. This
    process's environment is what :func:`tests.crash.spawn` hands the child jobs: the
    ``AWS_*`` and ``FSSPEC_S3_*`` variables for flamestream's stores (their JVM and Python
    runners inherit them; executors get them as ``spark.executorEnv.*`` too) and the Spark
    settings for ``s3a://``.
    """
    from .s3.s3_job import CONF_ENV

    with SeaweedFS() as s3, pytest.MonkeyPatch.context() as patch:
        for name, value in s3.environment().items():
            patch.setenv(name, value)
        patch.setenv(CONF_ENV, json.dumps(s3.spark_conf()))
        yield s3
