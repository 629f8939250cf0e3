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
    # Ray waits a fixed 30 s for its raylet to register; on a machine busy with other work
    # that can run out. A start that timed out is retried (a fresh cluster each time).
    for attempt in range(3):
        try:
            start_local_cluster(num_cpus=2)
            break
        except Exception:  # Ray raises a bare Exception for a startup timeout
            ray.shutdown()
            if attempt == 2:
                raise
    yield
    if started_here:
        ray.shutdown()
