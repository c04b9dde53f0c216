"""The S3 suite's fixtures: a fresh bucket per test on the session's SeaweedFS.

Spark's own checkpoint goes to ``s3a://`` (hadoop-aws) and flamestream's stores to ``s3://``
(s3fs). The S3A jars must be on the class path when a session's JVM starts, and the test
session of ``tests/conftest.py`` may have started without them, so every Spark run on S3 is a
child job (:mod:`tests.s3.s3_job`) that gets them from ``FLAMESTREAM_TEST_SPARK_CONF``. The
``seaweedfs`` fixture itself is in ``tests/conftest.py``: the integration tests use it too.
"""

from __future__ import annotations

import uuid

import pytest

from flamestream.testing.seaweedfs import SeaweedFS

from ..crash import run_child
from .helpers import JOB, BucketRun, make_graph_input, upload


def new_run(s3: SeaweedFS, prefix: str = "test") -> BucketRun:
    """A job's run in a new empty bucket."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(name)
    return BucketRun(s3.filesystem(), name)


@pytest.fixture
def run(seaweedfs: SeaweedFS) -> BucketRun:
    """A job's run in a new empty bucket."""
    return new_run(seaweedfs)


@pytest.fixture(scope="session")
def graph_on_s3(seaweedfs: SeaweedFS, tmp_path_factory: pytest.TempPathFactory) -> BucketRun:
    """The word count of :mod:`tests.spark.graph_crash_job`, run once to its end, all on S3."""
    done = new_run(seaweedfs, "unbroken")
    local = tmp_path_factory.mktemp("graph-input")
    make_graph_input(local)
    upload(done.fs, local, done.bucket)
    assert run_child(JOB, ["graph", *done.urls()]) == 0
    return done
