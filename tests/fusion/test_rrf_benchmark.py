"""Micro-benchmark: RRF over two 100-long rankings (the default fusion window).

Runs as an ordinary test under ``--benchmark-disable`` (the default in pyproject);
``pytest tests/fusion/test_rrf_benchmark.py --benchmark-enable`` reports timings.
"""

from __future__ import annotations

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from fusion import FusedHit, rrf

SPARSE_ARM = [f"doc-{n}" for n in range(100)]
DENSE_ARM = [f"doc-{n}" for n in range(50, 150)]  # half of it shared with the sparse arm


@pytest.mark.parametrize("limit", [None, 10])
def test_rrf_over_two_rankings_of_100(benchmark: BenchmarkFixture, limit: int | None) -> None:
    hits: list[FusedHit] = benchmark(rrf, [SPARSE_ARM, DENSE_ARM], limit=limit)

    assert len(hits) == (150 if limit is None else limit)
    # doc-50 is 51st in the sparse arm and 1st in the dense arm: 1/111 + 1/61 beats 1/61.
    assert hits[0].id == "doc-50"
    assert hits[0].ranks == (51, 1)
    assert hits[0].score == pytest.approx(1 / 111 + 1 / 61)
