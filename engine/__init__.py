"""Tandem's public face: ``SearchEngine``, ``Corpus`` and the data they exchange."""

from engine.config import (
    CorpusConfig,
    FieldType,
    FusionWeights,
    NaturalLanguage,
    OllamaEmbedding,
    PassageWindows,
    SentenceTransformerEmbedding,
    ZScoreFusion,
)
from engine.corpus import Corpus
from engine.documents import AddResult, ArmRanks, Document, GrepMatch, Passage, SourceText
from engine.engine import SearchEngine
from engine.errors import (
    CorpusExists,
    CorpusNotFound,
    EngineBusy,
    EngineError,
    EngineLocked,
    EngineReadOnly,
    GrepTimeout,
    InvalidArgument,
    SourceNotFound,
    StorageError,
)
from engine.filters import And, Eq, Filter, FilterInput, In, Range
from engine.natural import (
    Answer,
    ExtractedValue,
    Interpretation,
    NaturalSearchUnavailable,
    RateLimited,
)
from engine.searchable import SearchableCorpus

__all__ = [
    "AddResult",
    "And",
    "Answer",
    "ArmRanks",
    "Corpus",
    "CorpusConfig",
    "CorpusExists",
    "CorpusNotFound",
    "Document",
    "EngineBusy",
    "EngineError",
    "EngineLocked",
    "EngineReadOnly",
    "Eq",
    "ExtractedValue",
    "FieldType",
    "Filter",
    "FilterInput",
    "FusionWeights",
    "GrepMatch",
    "GrepTimeout",
    "In",
    "Interpretation",
    "InvalidArgument",
    "NaturalLanguage",
    "NaturalSearchUnavailable",
    "OllamaEmbedding",
    "Passage",
    "PassageWindows",
    "Range",
    "RateLimited",
    "SearchEngine",
    "SearchableCorpus",
    "SentenceTransformerEmbedding",
    "SourceNotFound",
    "SourceText",
    "StorageError",
    "ZScoreFusion",
]
