"""The dense arm: embedding providers and the FAISS index."""

from dense.allow_list import AllowList
from dense.breaker import BreakerState, CircuitBreaker
from dense.contracts import (
    DenseError,
    Embedder,
    EmbedderUnavailable,
    QueryEmbedder,
    embed_query,
)
from dense.faiss_index import FaissIndex, IndexKind
from dense.index_file import FaissIndexCorrupt
from dense.local import SentenceTransformerEmbedder
from dense.ollama import OllamaEmbedder

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
    "QueryEmbedder",
    "SentenceTransformerEmbedder",
    "embed_query",
]
