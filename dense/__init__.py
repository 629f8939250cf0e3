"""The dense arm: embedding providers and the FAISS index.

The two providers are imported on first use (PEP 562): ``import dense`` for the FAISS
index alone must not load the Ollama client, httpx and pydantic (0.4 s) or the model
runtime.
"""

import importlib
from typing import TYPE_CHECKING, Any

from dense.allow_list import AllowList
from dense.breaker import BreakerState, CircuitBreaker
from dense.contracts import (
    DenseError,
    Embedder,
    EmbedderUnavailable,
    QueryEmbedder,
    embed_query,
)
from dense.faiss_index import FaissIndex, IndexKind, VectorStorage
from dense.index_file import FaissIndexCorrupt
from dense.passages import PassageMeanEmbedder, PieceSplitter, split_by_pieces, split_passages

if TYPE_CHECKING:
    from dense.local import SentenceTransformerEmbedder
    from dense.ollama import OllamaEmbedder

_PROVIDERS = {"OllamaEmbedder": "dense.ollama", "SentenceTransformerEmbedder": "dense.local"}


def __getattr__(name: str) -> Any:
    if name in _PROVIDERS:
        return getattr(importlib.import_module(_PROVIDERS[name]), name)
    raise AttributeError(f"module 'dense' has no attribute {name!r}")


__all__ = [
    "AllowList",
    "BreakerState",
    "CircuitBreaker",
    "DenseError",
    "Embedder",
    "EmbedderUnavailable",
    "FaissIndex",
    "FaissIndexCorrupt",
    "IndexKind",
    "OllamaEmbedder",
    "PassageMeanEmbedder",
    "PieceSplitter",
    "QueryEmbedder",
    "SentenceTransformerEmbedder",
    "VectorStorage",
    "embed_query",
    "split_by_pieces",
    "split_passages",
]
