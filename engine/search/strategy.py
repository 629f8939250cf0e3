"""The closed sets a search is described by internally: strategy, keyword-fallback reason, arm.

They label metrics and nothing else; no answer ever carries one.
"""

from __future__ import annotations

import enum


class Strategy(enum.Enum):
    """How one search was answered (internal; visible only in metrics)."""

    HYBRID = "hybrid"
    KEYWORD = "keyword"


class FallbackReason(enum.Enum):
    """Why a hybrid corpus answered one search from keywords (the embedder, not the index)."""

    EMBEDDER_DOWN = "embedder_down"
    EMBEDDER_ERROR = "embedder_error"
    EMBEDDER_TIMEOUT = "embedder_timeout"
    """The query's vector missed its deadline, or an earlier one that did still runs
    (``engine.search.embed_deadline``)."""


class Arm(enum.Enum):
    """A stage of a search timed by ``tandem_arm_duration_seconds``."""

    SPARSE = "sparse"
    DENSE = "dense"
    COMPLETION = "completion"
    """Each arm scoring the other's extra candidates (``engine.search.completion``)."""
