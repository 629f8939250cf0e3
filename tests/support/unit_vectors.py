"""Random unit vectors for the vector-index tests."""

from __future__ import annotations

import numpy as np


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` random rows of length 1 in ``dim`` dimensions."""
    x = rng.standard_normal((n, dim)).astype(np.float32)
    rows: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return rows
