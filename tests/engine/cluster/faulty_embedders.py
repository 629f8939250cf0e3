"""Embedders that answer with output no corpus can use, for the sharded corpus's tests.

A factory used with ``ShardedCorpus`` or ``ingest`` must pickle by reference (shard and
embedding actors build their own embedder from it): ``FaultyFactory`` is a module-level
frozen dataclass, so it does, and every process it reaches builds the same fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dense import EmbedderUnavailable
from engine.config import EmbedderSpec
from tests.support.fakes import HashEmbedder

# How ``FaultyHashEmbedder`` spoils the hash embedder's (64-dimension) output.
MODES = {
    "ok": "the hash embedder's own output",
    "nan": "a NaN in every row",
    "inf": "an infinite value in every row",
    "zero": "all-zero rows",
    "short": "one row too few",
    "flat": "a 1-D array (the first row) instead of one row per text",
    "narrow": "rows of 32 values, while it says its dimension is 64",
    "swapped": "a consistent model of dimension 32 (a model re-pulled under the same name)",
    "down": "EmbedderUnavailable from every embed call (while is_available says yes)",
}
SWAPPED_DIMENSION = 32


class FaultyHashEmbedder(HashEmbedder):
    """``HashEmbedder`` (same name, so a corpus takes it for its model) answering with
    the fault ``mode`` names (``MODES``)."""

    def __init__(self, mode: str = "ok") -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        super().__init__()
        self.mode = mode

    @property
    def dimension(self) -> int:
        return SWAPPED_DIMENSION if self.mode == "swapped" else super().dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        mode = self.mode
        if mode == "down":
            raise EmbedderUnavailable("the provider failed (test)")
        if mode == "swapped":
            rows = np.random.default_rng(len(texts)).standard_normal(
                (len(texts), SWAPPED_DIMENSION)
            )
            return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
        good = super().embed(texts).copy()
        if mode == "nan":
            good[:, 5] = np.nan
        elif mode == "inf":
            good[:, 5] = np.inf
        elif mode == "zero":
            good[:] = 0.0
        elif mode == "short":
            return good[:-1]
        elif mode == "flat":
            flat: npt.NDArray[np.float32] = good[0]
            return flat
        elif mode == "narrow":
            return np.ones((len(texts), 32), dtype=np.float32)
        return good


@dataclass(frozen=True)
class FaultyFactory:
    """An ``embedder_factory`` building ``FaultyHashEmbedder(mode)`` for every spec."""

    mode: str

    def __call__(self, spec: EmbedderSpec) -> FaultyHashEmbedder:
        del spec
        return FaultyHashEmbedder(self.mode)
