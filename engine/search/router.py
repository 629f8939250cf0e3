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
    metrics.embedder_up.labels(corpus).set(1 if up else 0)
    return Strategy.HYBRID if up else Strategy.KEYWORD
