"""One local Ray cluster (127.0.0.1, 2 CPUs, no dashboard) for the whole test run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    from engine.cluster import start_local_cluster

    started_here = not ray.is_initialized()
    start_local_cluster(num_cpus=2)
    yield
    if started_here:
        ray.shutdown()
