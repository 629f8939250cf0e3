"""One embedder instance per distinct spec, shared by every corpus of an engine.

Sharing matters for more than memory: a remote provider's circuit breaker lives in its
embedder, so a dead Ollama costs the whole engine one probe per back-off window, not one
per corpus or per query.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from dense import Embedder
from engine.config import EmbedderSpec, OllamaEmbedding, SentenceTransformerEmbedding

EmbedderFactory = Callable[[EmbedderSpec], Embedder]


def default_embedder_factory(spec: EmbedderSpec) -> Embedder:
    """Build the provider a spec names. Constructing is cheap; models load on first use."""
    if isinstance(spec, SentenceTransformerEmbedding):
        from dense.local import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(spec.model)
    if isinstance(spec, OllamaEmbedding):
        from dense.ollama import OllamaEmbedder

        return OllamaEmbedder(
            spec.model,
            host=spec.host,
            timeout_s=spec.timeout_s,
            health_timeout_s=spec.health_timeout_s,
        )
    raise TypeError(f"unknown embedder spec {type(spec).__name__}")


class EmbedderPool:
    """Caches embedders by spec (specs are frozen, hence hashable)."""

    def __init__(self, factory: EmbedderFactory | None = None) -> None:
        self._factory = factory or default_embedder_factory
        self._embedders: dict[EmbedderSpec, Embedder] = {}
        self._lock = threading.Lock()

    def get(self, spec: EmbedderSpec) -> Embedder:
        with self._lock:
            embedder = self._embedders.get(spec)
            if embedder is None:
                embedder = self._factory(spec)
                self._embedders[spec] = embedder
            return embedder

    def close(self) -> None:
        with self._lock:
            for embedder in self._embedders.values():
                close = getattr(embedder, "close", None)
                if callable(close):
                    close()
            self._embedders.clear()
