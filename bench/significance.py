"""Paired significance of the difference between two systems' per-query scores.

Both systems are scored on the same queries, so the test works on the per-query
differences ``a[q] - b[q]`` over the queries both have (sorted by id, so the answer does
not depend on the order of either mapping):

- the mean difference;
- a 95 % paired bootstrap confidence interval of that mean (percentile interval,
  ``RESAMPLES`` resamples of the queries with replacement);
- a two-sided p-value from a paired randomization test: each difference's sign is flipped
  at random (the two systems swapped on that query), ``PERMUTATIONS`` times; p is the share
  of flipped means at least as far from 0 as the observed one, counting the observed
  arrangement itself (so p is never 0).

Both draws use fixed seeds, so the same scores always give the same interval and p-value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PERMUTATIONS", "RESAMPLES", "SEED", "PairedTest", "paired_test"]

RESAMPLES = 10_000
"""Bootstrap resamples for the confidence interval."""
PERMUTATIONS = 10_000
"""Random sign flips for the p-value."""
SEED = 0
"""Seed of both draws (the bootstrap's generator and the sign flips' are separate)."""
CONFIDENCE = 0.95

_CHUNK_CELLS = 1 << 20
"""At most this many draws in memory at once (resamples × queries)."""
_TIE = 1e-12
"""A flipped mean short of the observed one by less than this fraction of the mean absolute
difference counts as reaching it (summation order alone must not decide a tie)."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class PairedTest:
    """``a`` against ``b`` on their common queries (positive: ``a`` ahead)."""

    n_queries: int
    mean_difference: float
    ci_low: float
    ci_high: float
    p_value: float

    @property
    def ci_contains_zero(self) -> bool:
        """True when the query set cannot tell the two systems apart at 95 %."""
        return self.ci_low <= 0.0 <= self.ci_high


def paired_test(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    resamples: int = RESAMPLES,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
) -> PairedTest:
    """Mean of ``a[q] - b[q]`` over the common queries, its bootstrap CI and paired p-value.

    Raises ``ValueError`` when the two share no query, a score is not finite, or a count
    is not positive.
    """
    if resamples < 1 or permutations < 1:
        raise ValueError("resamples and permutations must be positive")
    common = sorted(a.keys() & b.keys())
    if not common:
        raise ValueError("the two systems share no query: nothing to pair")
    diffs = np.array([a[q] - b[q] for q in common], dtype=np.float64)
    if not np.all(np.isfinite(diffs)):
        raise ValueError("per-query scores must be finite numbers")
    n = len(common)
    if not np.any(diffs):
        return PairedTest(n, 0.0, 0.0, 0.0, 1.0)
    mean = float(diffs.mean())
    boot = _bootstrap_means(diffs, resamples, np.random.default_rng(seed))
    tail = (1.0 - CONFIDENCE) / 2.0
    low = float(np.quantile(boot, tail))
    high = -float(np.quantile(-boot, tail))  # mirrors exactly when a and b swap
    flipped = _sign_flip_means(diffs, permutations, np.random.default_rng([seed, 1]))
    threshold = abs(mean) - _TIE * float(np.abs(diffs).mean())
    reached = int(np.count_nonzero(np.abs(flipped) >= threshold))
    p_value = (reached + 1) / (permutations + 1)
    return PairedTest(n, mean, low, high, p_value)


def _bootstrap_means(diffs: FloatArray, resamples: int, rng: np.random.Generator) -> FloatArray:
    """Means of ``resamples`` resamples of ``diffs`` with replacement."""
    n = len(diffs)
    return _chunked_means(resamples, n, lambda rows: diffs[rng.integers(0, n, size=(rows, n))])


def _sign_flip_means(diffs: FloatArray, permutations: int, rng: np.random.Generator) -> FloatArray:
    """Means of ``diffs`` under ``permutations`` random sign flips."""
    n = len(diffs)
    return _chunked_means(
        permutations, n, lambda rows: (rng.integers(0, 2, size=(rows, n)) * 2.0 - 1.0) * diffs
    )


def _chunked_means(count: int, n: int, draw: Callable[[int], FloatArray]) -> FloatArray:
    """Row means of ``count`` rows of ``n`` values made by ``draw(rows)``, a bounded number
    of cells at a time (memory stays flat however many resamples are asked for)."""
    out = np.empty(count, dtype=np.float64)
    step = max(1, _CHUNK_CELLS // n)
    for start in range(0, count, step):
        stop = min(count, start + step)
        out[start:stop] = draw(stop - start).mean(axis=1)
    return out
