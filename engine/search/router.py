"""The router: which strategy answers a corpus's searches right now.

Hybrid when the corpus has an embedder and that embedder is available; keyword otherwise.
The decision is internal: it is counted in metrics and never returned to the caller.
"""

from __future__ import annotations

from dense import Embedder
from engine.metrics import EngineMetrics
from engine.search.strategy import Strategy


def resolve_strategy(corpus: str, embedder: Embedder | None, metrics: EngineMetrics) -> Strategy:
    if embedder is None:
        return Strategy.KEYWORD
    up = embedder.is_available()
    metrics.embedder_up.labels(corpus).set(1 if reported_up(embedder, up) else 0)
    return Strategy.HYBRID if up else Strategy.KEYWORD


def reported_up(embedder: Embedder, available: bool) -> bool:
    """What ``tandem_embedder_up`` says for an embedder whose ``is_available()`` answered
    ``available``: down, too, while a model whose last load failed is not loaded — its
    back-off passing lets one search try again (``available``), and the gauge used to read
    1 then, and 1 again after every failed try's back-off, for a model that never loaded."""
    return available and not getattr(embedder, "load_failed", False)
