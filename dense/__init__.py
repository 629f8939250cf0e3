"""The dense arm: embedding providers and the FAISS index."""

from dense.allow_list import AllowList
from dense.contracts import DenseError, Embedder, EmbedderUnavailable
from dense.faiss_index import FaissIndex, IndexKind
from dense.index_file import FaissIndexCorrupt
from dense.local import SentenceTransformerEmbedder

__all__ = [
    "AllowList",
    "DenseError",
    "Embedder",
    "EmbedderUnavailable",
    "FaissIndex",
    "FaissIndexCorrupt",
    "IndexKind",
    "SentenceTransformerEmbedder",
]
