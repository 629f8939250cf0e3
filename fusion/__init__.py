"""Rank fusion: pure functions over ranked id lists (``rrf``, the default) and over
scored candidate windows (``zscore_fusion``)."""

from fusion.errors import FusionError
from fusion.rrf import FusedHit, rrf
from fusion.zscore import ScoredRanking, zscore_fusion

__all__ = ["FusedHit", "FusionError", "ScoredRanking", "rrf", "zscore_fusion"]
