"""Rank fusion: pure functions over ranked id lists."""

from fusion.errors import FusionError
from fusion.rrf import FusedHit, rrf

__all__ = ["FusedHit", "FusionError", "rrf"]
