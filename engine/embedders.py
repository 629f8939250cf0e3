"""One embedder instance per distinct spec, shared by every corpus of an engine.

Sharing matters for more than memory: a remote provider's circuit breaker lives in its
embedder, so a dead Ollama costs the whole engine one probe per back-off window, not one
per corpus or per query.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from dense import Embedder
from dense.passages import PassageMeanEmbedder
from engine.config import EmbedderSpec, OllamaEmbedding, SentenceTransformerEmbedding

EmbedderFactory = Callable[[EmbedderSpec], Embedder]

logger = logging.getLogger(__name__)


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


def model_spec(spec: EmbedderSpec) -> EmbedderSpec:
    """``spec`` without its document-splitting choice: what names the model itself."""
    return spec if spec.passages is None else spec.model_copy(update={"passages": None})


def with_passages(spec: EmbedderSpec, model: Embedder) -> Embedder:
    """``model`` as the spec embeds documents: whole, or as the mean of its passages."""
    windows = spec.passages
    if windows is None:
        return model
    splitter = None
    if windows.unit == "pieces":
        make = getattr(model, "piece_splitter", None)
        if callable(make):
            splitter = make()
        else:  # a custom factory's provider without a tokenizer
            logger.warning("%s has no tokenizer: passage windows counted in words", model.name)
    return PassageMeanEmbedder(
        model, max_words=windows.max_words, stride_words=windows.stride_words, splitter=splitter
    )


def build_embedder(spec: EmbedderSpec, factory: EmbedderFactory | None = None) -> Embedder:
    """The embedder a spec names: ``factory`` (default: ``default_embedder_factory``)
    builds the model, which ``with_passages`` wraps when the spec splits documents."""
    return with_passages(spec, (factory or default_embedder_factory)(model_spec(spec)))


class EmbedderPool:
    """Caches embedders by spec (specs are frozen, hence hashable); specs that differ
    only in ``passages`` share one model."""

    def __init__(self, factory: EmbedderFactory | None = None) -> None:
        self._factory = factory or default_embedder_factory
        self._models: dict[EmbedderSpec, Embedder] = {}
        self._embedders: dict[EmbedderSpec, Embedder] = {}
        self._lock = threading.Lock()

    def get(self, spec: EmbedderSpec) -> Embedder:
        with self._lock:
            embedder = self._embedders.get(spec)
            if embedder is None:
                base = model_spec(spec)
                model = self._models.get(base)
                if model is None:
                    model = self._models[base] = self._factory(base)
                embedder = self._embedders[spec] = with_passages(spec, model)
            return embedder

    def close(self) -> None:
        with self._lock:
            for model in self._models.values():
                close = getattr(model, "close", None)
                if callable(close):
                    close()
            self._models.clear()
            self._embedders.clear()
