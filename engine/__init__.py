"""Tandem's public face: ``SearchEngine``, ``Corpus`` and the data they exchange."""

from engine.config import (
    CorpusConfig,
    FusionWeights,
    OllamaEmbedding,
    SentenceTransformerEmbedding,
)
from engine.corpus import Corpus
from engine.documents import AddResult, ArmRanks, Document, GrepMatch, Passage, SourceText
from engine.engine import SearchEngine
from engine.errors import (
    CorpusExists,
    CorpusNotFound,
    EngineError,
    EngineLocked,
    InvalidArgument,
    SourceNotFound,
    StorageError,
)

__all__ = [
    "AddResult",
    "ArmRanks",
    "Corpus",
    "CorpusConfig",
    "CorpusExists",
    "CorpusNotFound",
    "Document",
    "EngineError",
    "EngineLocked",
    "FusionWeights",
    "GrepMatch",
    "InvalidArgument",
    "OllamaEmbedding",
    "Passage",
    "SearchEngine",
    "SentenceTransformerEmbedding",
    "SourceNotFound",
    "SourceText",
    "StorageError",
]
