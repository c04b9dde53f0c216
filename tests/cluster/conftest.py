"""The standalone cluster the cluster tests run on: a Master and two Workers, one per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flamestream.testing.standalone import StandaloneCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[StandaloneCluster]:
    """A Spark standalone Master and two Workers (1 core each) on loopback, stopped at the end."""
    with StandaloneCluster(workers=2, worker_cores=1, worker_memory="1g") as started:
        yield started
