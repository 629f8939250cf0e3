"""One embedder instance per distinct spec, shared by every corpus of an engine.

Sharing matters for more than memory: a remote provider's circuit breaker lives in its
embedder, so a dead Ollama costs the whole engine one probe per back-off window, not one
per corpus or per query.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator

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
        self._pins: dict[EmbedderSpec, int] = {}  # model specs kept whatever is in use
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

    @contextlib.contextmanager
    def pinned(self, spec: EmbedderSpec) -> Iterator[Embedder]:
        """``get(spec)``, kept from ``keep_only`` until the block ends (a switch to it runs
        for a while before any corpus's config names it)."""
        base = model_spec(spec)
        with self._lock:
            self._pins[base] = self._pins.get(base, 0) + 1
        try:
            yield self.get(spec)
        finally:
            with self._lock:
                self._pins[base] -= 1
                if not self._pins[base]:
                    del self._pins[base]

    def keep_only(self, in_use: Iterable[EmbedderSpec]) -> None:
        """Forget (and close) the models no spec in ``in_use`` names: the corpora that
        used them were dropped or switched away, and a model can hold hundreds of MB for
        the life of the process. Harmless if one is still held somewhere: a local model
        stays loaded while referenced, an Ollama client reopens its pools if used again."""
        wanted = {model_spec(spec) for spec in in_use}
        with self._lock:
            wanted |= set(self._pins)
            gone = [base for base in self._models if base not in wanted]
            for base in gone:
                _close(self._models.pop(base))
            for spec in [s for s in self._embedders if model_spec(s) not in wanted]:
                del self._embedders[spec]

    def close(self) -> None:
        with self._lock:
            for model in self._models.values():
                _close(model)
            self._models.clear()
            self._embedders.clear()


def _close(model: Embedder) -> None:
    close = getattr(model, "close", None)
    if callable(close):
        close()
