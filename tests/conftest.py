"""Fixtures shared by every test folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

# failed checks in the crash tests' shared helpers show the values compared
pytest.register_assert_rewrite("tests.crash")

from .sessions import local_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] Spark session for every test that needs Spark, stopped at the end."""
    session = local_session()
    yield session
    session.stop()
